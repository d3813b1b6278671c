"""Per-token KL estimators between the policy and a reference policy.

With ``Δ = logp - ref_logp`` on the sampled tokens (samples from the policy), Schulman's
estimators of ``KL(π ‖ π_ref)``; registered in ``KL_ESTIMATORS`` under verl's names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from workbench.algorithms._masked import MAX_LOG_RATIO
from workbench.registry import Activity, Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]

KL_ESTIMATORS: Registry[KLEstimator] = Registry(
    "KL estimator", activity=Activity.always("penalises every token when algorithm.kl_coef > 0")
)

# verl clamps the k3 estimate itself to this range (after clamping the log-ratio to ±20).
K3_CLAMP = 10.0


@KL_ESTIMATORS.register("k1")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k1 = Δ``: unbiased, high variance, can be negative.

    Schulman 2020, "Approximating KL Divergence" (blog post), estimator k1; verl ``kl``/``k1``.
    """
    return logp - ref_logp  # [B,T]


@KL_ESTIMATORS.register("k2")
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k2 = ½ Δ²``: biased, low variance, non-negative; its gradient is the KL's gradient.

    Schulman 2020, "Approximating KL Divergence", estimator k2; verl ``mse``/``k2``.
    """
    return 0.5 * (logp - ref_logp).square()  # [B,T]


@KL_ESTIMATORS.register("k3", "low_var_kl")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k3 = exp(-Δ) + Δ - 1``: unbiased, low variance, non-negative.

    Schulman 2020, "Approximating KL Divergence", estimator k3 (used by GRPO, Shao et al.
    2024, §4.1.1 Eq. 4). As verl ``low_var_kl``/``k3``: ``-Δ`` is clamped to ±20 and the
    estimate to ±10.
    """
    neg_delta = (ref_logp - logp).clamp(min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO)  # [B,T]
    return (torch.exp(neg_delta) - neg_delta - 1.0).clamp(min=-K3_CLAMP, max=K3_CLAMP)  # [B,T]


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str) -> Tensor:
    """Per-token KL estimate ``[B,T]`` (differentiable w.r.t. ``logp``); mask it before reducing.

    Raises ``ValueError`` naming the valid estimators on an unknown name.
    """
    fn = KL_ESTIMATORS.get(estimator)
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"logp and ref_logp must have the same shape; got {tuple(logp.shape)}, {tuple(ref_logp.shape)}"
        )
    return fn(logp, ref_logp)
