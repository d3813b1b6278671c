"""The step-0 gate: before the first update the learner re-scores the first batch, and the run stops with
one line if the sampler's logprobs differ from the learner's by more than the two precisions can explain.

slime asserts the same on its exact path (the learner reproduces the rollout logprobs at step 0). Here
the bound is an error analysis per dtype pair (tests/tolerance.py's style): the two sides compute one
forward — the same weights, the same tokens — with sums in another order (another engine's kernels, a
KV cache) and, in a lower precision, with every weight and sum rounded. Every output logit is a chain of
at most n = reduction depth + positions summed operands, so:

* both float32: deterministically (Higham, *Accuracy and Stability*, §3.1), each side is within n·u of the
  exact value, u = eps/2, of the logits' size M; the two differ by at most 2·n·u·M.
* a lower precision on either side: the worst case (n·u_bf16 ≈ 2 for a small model) explains anything, so
  the probabilistic bound of Higham & Mary (2019, "A new approach to probabilistic rounding error
  analysis", Thm 2.4) is used: λ·√n·u per side, exceeded with probability ≤ 2·exp(−λ²/2) per value;
  λ = 6 makes that 3e-8 per token. The bound is loose (it must hold on every healthy model), so in low
  precision the gate only catches a gross fault; a float32 pair catches a 1e-3 disagreement.

M is the largest |logp| of the batch plus one, over the temperature (a logit enters logp scaled by 1/T).
A leaked generation setting (a model directory's ``repetition_penalty``, ``top_k``), a weight copy that
missed a sync or a resumed checkpoint the sampler never received all exceed it by orders of magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.batch import Rollouts
from workbench.rollout.hf import DTYPES
from workbench.train.learner_protocol import Learner

PROBABILISTIC_LAMBDA = 6.0


class MismatchGateError(RuntimeError):
    """The sampler and the learner disagree at step 0 beyond what their precisions explain."""


@dataclass(frozen=True)
class GateVerdict:
    max_abs_log_ratio: float  # max over response tokens of |log π_learner − log π_sampler|
    bound: float  # what the two precisions explain
    worst: tuple[int, int]  # (sequence, position) of the largest disagreement

    @property
    def passed(self) -> bool:
        return self.max_abs_log_ratio <= self.bound


def reduction_depth(model: torch.nn.Module) -> int:
    """The longest chain of summed operands behind one output logit: per layer the hidden size (q/k/v and
    o projections) twice and the MLP width, plus the vocabulary (the log-softmax's sum)."""
    cfg = model.config
    layers = int(getattr(cfg, "num_hidden_layers", 1))
    per_layer = 2 * int(cfg.hidden_size) + int(getattr(cfg, "intermediate_size", cfg.hidden_size))
    return layers * per_layer + int(cfg.vocab_size)


def unit_roundoff(dtype: str) -> float:
    return float(torch.finfo(DTYPES[dtype]).eps) / 2


def mismatch_bound(depth: int, positions: int, sampler_dtype: str, learner_dtype: str, magnitude: float) -> float:
    """The largest |Δ logp| two healthy evaluations of one forward can show (module docstring)."""
    n = depth + positions
    u = max(unit_roundoff(sampler_dtype), unit_roundoff(learner_dtype))
    if sampler_dtype == learner_dtype == "float32":
        return 2 * n * u * magnitude
    return 2 * PROBABILISTIC_LAMBDA * math.sqrt(n) * u * magnitude


@torch.no_grad()
def step0_verdict(
    learner: Learner, rollouts: Rollouts, temperature: float, *, sampler_dtype: str, learner_dtype: str
) -> GateVerdict:
    """Re-score ``rollouts`` with the learner and compare with the sampler's logprobs."""
    learner_logp, _ = learner.logprobs(rollouts, slice(None), temperature, with_entropy=False)  # [B, T]
    on = rollouts.mask.bool().to(learner_logp.device)
    sampler_logp = rollouts.sampler_logp.to(learner_logp.device)
    gap = torch.where(on, (learner_logp.double() - sampler_logp.double()).abs(), 0.0)  # [B, T]
    worst = divmod(int(gap.argmax()), gap.shape[1])
    magnitude = (float(torch.where(on, learner_logp.double().abs(), 0.0).max()) + 1.0) / max(temperature, 1e-6)
    with learner.gathered_model() as full:  # ZeRO-3: the config is whole either way; no weights are read
        depth = reduction_depth(full)
    bound = mismatch_bound(depth, rollouts.input_ids.shape[1], sampler_dtype, learner_dtype, magnitude)
    return GateVerdict(float(gap.max()), bound, worst)


def check_step0(
    learner: Learner, rollouts: Rollouts, temperature: float, *, sampler: str, sampler_dtype: str, learner_dtype: str
) -> GateVerdict:
    """``step0_verdict``, raising ``MismatchGateError`` with one line when it fails."""
    verdict = step0_verdict(learner, rollouts, temperature, sampler_dtype=sampler_dtype, learner_dtype=learner_dtype)
    if not verdict.passed:
        seq, pos = verdict.worst
        raise MismatchGateError(
            f"step-0 mismatch gate: max |log π_learner − log π_sampler| = {verdict.max_abs_log_ratio:.3g} "
            f"(sequence {seq}, token {pos}) exceeds the {verdict.bound:.3g} that a {sampler} {sampler_dtype} "
            f"sampler and a {learner_dtype} learner explain; check for a leaked generation setting "
            f"(repetition_penalty, top_k in the model's generation_config.json) or weights the sampler never "
            f"received (health.step0_gate: false skips this check)"
        )
    return verdict
