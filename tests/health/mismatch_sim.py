"""Token-level sampler/learner simulations for the mismatch rules: R runs at once, vectorised.

Each step draws N = 64 response tokens; at each the learner's next-token logits over a V = 8 token
vocabulary are ``SCALE · g`` (g standard normal, SCALE 2.5). The sampler draws the token from *its*
logits, and Δ = log π_learner − log π_sampler of that token is all the metrics see, as in a real run.
64 tokens per step (a real 16×8 batch has thousands) make every per-step metric noisier than a real
run's: conservative for the false-alarm rates. Scenarios (``SCENARIOS``):

* ``fp32``: the sampler's logits equal the learner's up to 1e-6 relative (another kernel's sum order).
* ``bf16``: each sampler logit carries an error of sd ``BF16_REL · |z|`` (one bf16 ulp, 0.78%): sd(Δ) ≈
  0.015, KL ≈ 1e-4, about twice the bf16 sampler of studies/precision_mismatch.yaml (KL ≈ 6e-5).
* planted failures, from step ``ONSET`` on: ``temperature`` (the sampler samples at 0.8, the learner
  scores at 1.0: a leaked generation setting), ``top_k`` (the sampler keeps the 3 likeliest of 8
  tokens), ``stale`` (the weight sync stops: the sampler keeps the policy of step ONSET while the learner
  turns by ``DRIFT`` logits per step), ``bf16_drift`` (a bf16 sampler on a model whose logits sharpen
  ×1.03 per step from ONSET: the bf16 error grows with the logits' magnitude).
"""

from __future__ import annotations

import math

import torch

RUNS, STEPS, TOKENS, VOCAB = 100, 200, 64, 8
SCALE = 2.5
ONSET = 100
BF16_REL = float(torch.finfo(torch.bfloat16).eps)  # per-logit relative error: one bf16 ulp (0.78%)
DRIFT = 0.05  # the learner's per-step logit change (on-policy KL per update ≈ ½·0.05²·2.5² ≈ 0.008)
HEALTHY = ("fp32", "bf16")
FAILURES = ("temperature", "top_k", "stale", "bf16_drift")
SCENARIOS = HEALTHY + FAILURES


def policy(g: torch.Tensor, direction: torch.Tensor, step: int) -> torch.Tensor:
    """Unit-scale logits of the policy after ``step`` updates: it turns towards ``direction`` by ``DRIFT``
    logits per step at constant magnitude (a moving policy, not a sharpening one)."""
    a = DRIFT * step / SCALE
    return (g + a * direction) / math.sqrt(1 + a * a)


def simulate_deltas(scenario: str, *, runs: int = RUNS, steps: int = STEPS, tokens: int = TOKENS, seed: int = 0):
    """Yield (step, Δ [runs, tokens] float64) for each step of ``runs`` independent runs."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: a second thread only waits for a busy core (10× slower under load)
    try:
        yield from _steps(scenario, steps, runs, tokens, gen)
    finally:
        torch.set_num_threads(threads)


def _steps(scenario: str, steps: int, runs: int, tokens: int, gen: torch.Generator):
    for step in range(steps):
        planted = scenario in FAILURES and step >= ONSET
        g = torch.randn(runs, tokens, VOCAB, generator=gen)  # [R, N, V] the step's contexts
        direction = torch.randn(runs, tokens, VOCAB, generator=gen)  # how the update moves each context
        sharpen = 1.03 ** (step - ONSET) if scenario == "bf16_drift" and planted else 1.0
        learner = SCALE * sharpen * policy(g, direction, step)  # [R, N, V] learner logits
        sampler = learner
        if scenario == "fp32":
            sampler = learner * (1 + 1e-6 * torch.randn(learner.shape, generator=gen))
        elif scenario in ("bf16", "bf16_drift"):
            sampler = learner + BF16_REL * learner.abs() * torch.randn(learner.shape, generator=gen)
        elif planted and scenario == "temperature":
            sampler = learner / 0.8
        elif planted and scenario == "top_k":
            kth = learner.topk(3, dim=-1).values[..., -1:]
            sampler = learner.masked_fill(learner < kth, -math.inf)
        elif planted and scenario == "stale":
            sampler = SCALE * policy(g, direction, ONSET)
        lp_learner = torch.log_softmax(learner, -1)
        lp_sampler = torch.log_softmax(sampler, -1)
        gumbel = -torch.log(-torch.log(torch.rand(learner.shape, generator=gen).clamp(min=1e-12)))
        token = (lp_sampler + gumbel).argmax(-1, keepdim=True)  # [R, N, 1] drawn from the sampler
        delta = (lp_learner.gather(-1, token) - lp_sampler.gather(-1, token)).squeeze(-1)  # [R, N]
        yield step, delta.double().clamp(-20, 20)


def batched_rule_metrics(delta: torch.Tensor) -> dict[str, torch.Tensor]:
    """The metrics the mismatch rules read, for every run at once (``[R]`` each), with the definitions of
    workbench/metrics/mismatch.py (test_mismatch_rules.py checks one run against it)."""
    rho = delta.exp()  # [R, N]
    mean = rho.mean(-1)
    second = (rho**2).mean(-1)
    return {
        "mismatch/kl": (rho - 1 - delta).mean(-1),
        "mismatch/kl_k1": -delta.mean(-1),
        "mismatch/is_ratio_mean": mean,
        "mismatch/is_ratio_std": rho.std(-1, correction=0),
        "mismatch/is_ratio_tail_frac": ((rho < 0.9) | (rho > 1.1)).double().mean(-1),
        "mismatch/ess": mean**2 / second,
        "mismatch/chi2_token": second - 1,
        "mismatch/token_mult_prob_error": delta.abs().exp().mean(-1),
    }
