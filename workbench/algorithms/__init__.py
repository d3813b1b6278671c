"""Pure-torch RL algorithm units (no I/O): advantages, losses, aggregation, IS corrections, KL, entropy.

Every paper's change is a small registered function; the training loop looks units up by
name through the functions below, and the registries list the valid names. Where a name
coincides with verl 0.9.1's ``trainer/ppo/core_algos.py``, the numbers agree with verl.
"""

from workbench.algorithms.advantage import ADVANTAGE_ESTIMATORS, compute_advantages
from workbench.algorithms.aggregate import AGG_MODES, aggregate_loss
from workbench.algorithms.correction import IS_CORRECTIONS, importance_weights
from workbench.algorithms.entropy import entropy_from_logits
from workbench.algorithms.kl import KL_ESTIMATORS, kl_penalty
from workbench.algorithms.losses import POLICY_LOSSES, compute_policy_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "IS_CORRECTIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "aggregate_loss",
    "compute_advantages",
    "compute_policy_loss",
    "entropy_from_logits",
    "importance_weights",
    "kl_penalty",
]
