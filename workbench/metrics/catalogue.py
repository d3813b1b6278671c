"""The canonical metric catalogue: name, meaning, unit, and which direction is healthy.

Names are a contract (docs/metrics.md lists them): dashboards, health rules, comparisons and users'
notebooks read them. Add metrics freely; never rename one.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Literal

Direction = Literal["up", "down", "stable", "none"]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    meaning: str
    unit: str
    healthy: Direction  # up: higher is better; down: lower is better; stable: drift is the symptom


CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec("reward/mean", "mean total reward over all sampled completions", "reward", "up"),
    MetricSpec("reward/std", "std of total reward over all sampled completions", "reward", "none"),
    MetricSpec("accuracy/train", "fraction of sampled completions judged correct by math-verify", "fraction", "up"),
    MetricSpec("entropy/mean", "learner next-token entropy of the sampling distribution, token-mean over responses",
               "nats", "stable"),
    MetricSpec("length/mean", "response length", "tokens", "stable"),
    MetricSpec("length/max", "longest response in the batch", "tokens", "stable"),
    MetricSpec("length/correct_mean", "mean length of correct responses", "tokens", "stable"),
    MetricSpec("length/incorrect_mean", "mean length of incorrect responses (grows under GRPO length bias)",
               "tokens", "down"),
    MetricSpec("length/truncated_frac", "fraction of responses that hit max_new_tokens without EOS", "fraction",
               "down"),
    MetricSpec("clip/frac", "fraction of response tokens whose gradient the clipping removes (low + high; "
               "CISPO: weights truncated)", "fraction", "stable"),
    MetricSpec("clip/frac_low", "A < 0 tokens clipped: ratio < 1-ε_low (GMPO: log-ratio < -ε_low); "
               "CISPO: weight truncated below, any A", "fraction", "stable"),
    MetricSpec("clip/frac_high", "A > 0 tokens clipped: ratio > 1+ε_high (GMPO: log-ratio > ε_high); "
               "CISPO: weight truncated above, any A", "fraction", "stable"),
    MetricSpec("policy/approx_kl", "token-mean k1 estimate of KL(old ‖ new) during the update", "nats", "down"),
    MetricSpec("policy/ratio_mean", "mean importance ratio π_new/π_old over response tokens", "ratio", "stable"),
    MetricSpec("policy/ratio_max", "max importance ratio over response tokens", "ratio", "down"),
    MetricSpec("mismatch/prob_abs_diff_mean", "|p_learner − p_sampler| of sampled tokens, learner before the update",
               "probability", "down"),
    MetricSpec("mismatch/prob_abs_diff_max", "max |p_learner − p_sampler| of sampled tokens", "probability", "down"),
    MetricSpec("mismatch/kl", "token-mean k3 estimate of KL(π_sampler ‖ π_learner)", "nats", "down"),
    MetricSpec("mismatch/is_weight_mean", "mean IS correction weight (when a correction is on)", "ratio", "stable"),
    MetricSpec("mismatch/is_clipped_frac", "fraction of tokens whose IS weight was truncated/masked", "fraction",
               "down"),
    MetricSpec("kl/ref", "KL to the reference policy (when one is used)", "nats", "down"),
    MetricSpec("loss/policy", "policy loss (mean over the step's optimizer steps)", "loss", "none"),
    MetricSpec("grad/norm", "global grad norm before clipping (mean over optimizer steps)", "norm", "stable"),
    MetricSpec("batch/zero_std_frac", "fraction of groups whose rewards are all equal (no GRPO signal)", "fraction",
               "down"),
    MetricSpec("batch/filtered_frac", "fraction of groups dropped by dynamic sampling", "fraction", "none"),
    MetricSpec("eval/accuracy", "held-out accuracy (greedy unless configured), at eval steps", "fraction", "up"),
    MetricSpec("eval/length_mean", "held-out mean response length, at eval steps", "tokens", "stable"),
    MetricSpec("perf/step_s", "wall time of the RL step", "s", "down"),
    MetricSpec("perf/sample_tokens_per_s", "generated tokens per second of sampling", "tokens/s", "up"),
    MetricSpec("perf/learn_tokens_per_s", "tokens per second through the learner update", "tokens/s", "up"),
    MetricSpec("perf/sample_tokens", "tokens generated this step", "tokens", "none"),
    MetricSpec("perf/health_s", "time evaluating the health rules this step", "s", "down"),
    MetricSpec("perf/algorithm_s", "time inside the algorithm units (advantages, IS weights, loss)", "s", "down"),
    MetricSpec("batch/sampling_rounds", "sampling rounds used to fill the batch (dynamic sampling)", "count", "down"),
    MetricSpec("train/optimizer_steps", "optimizer steps this RL step (epochs × minibatches)", "count", "none"),
    MetricSpec("health/status", "0 ok, 1 warn, 2 fail (worst rule active this step)", "code", "down"),
)

BY_NAME = {m.name: m for m in CATALOGUE}


def unlogged_by_config(params: Mapping[str, Any]) -> dict[str, str]:
    """Metrics that a run with these (flattened, dotted) config params never logs, with the setting
    that switches them off: a health rule watching one is not applicable to the run, not unevaluated.

    Works on a resolved config dumped flat and on a run's logged MLflow params (strings) alike."""

    def off(key: str) -> bool:
        value = params.get(key)
        return value is None or str(value).strip().lower() in ("", "none", "null", "0", "0.0")

    absent: dict[str, str] = {}
    if "algorithm.kl_coef" in params and off("algorithm.kl_coef"):
        absent["kl/ref"] = "algorithm.kl_coef = 0 (no reference model)"
    if "algorithm.correction" in params and off("algorithm.correction"):
        for name in ("mismatch/is_weight_mean", "mismatch/is_clipped_frac"):
            absent[name] = "algorithm.correction is not set"
    return absent


def markdown_table() -> str:
    """The catalogue as the markdown table in docs/metrics.md (kept in sync by a test)."""
    lines = ["| name | meaning | unit | healthy |", "|---|---|---|---|"]
    lines += [f"| `{m.name}` | {m.meaning} | {m.unit} | {m.healthy} |" for m in CATALOGUE]
    return "\n".join(lines) + "\n"
