"""The canonical metric catalogue: name, meaning, unit, which direction is healthy, the values
the metric can take by construction, and the range a healthy run plausibly logs.

Names are a contract (docs/metrics.md lists them): dashboards, health rules, comparisons and users'
notebooks read them. Add metrics freely; never rename one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.metrics.passk import MEAN_AT_N_METRIC, PASS_AT_K_METRICS
from workbench.metrics.reflection import REFLECTION_METRICS

Direction = Literal["up", "down", "stable", "none"]

# rollout.staleness >= 1 (workbench/train/pipeline.py): how far behind the sampler's policy was, and who waited
STALENESS_MEAN = "offpolicy/staleness_mean"
STALENESS_MAX = "offpolicy/staleness_max"
SAMPLER_WAIT_S = "perf/sampler_wait_s"
LEARNER_WAIT_S = "perf/learner_wait_s"
PIPELINE_METRICS = (STALENESS_MEAN, STALENESS_MAX, SAMPLER_WAIT_S, LEARNER_WAIT_S)

UNBOUNDED = (-math.inf, math.inf)
NON_NEGATIVE = (0.0, math.inf)
UNIT_INTERVAL = (0.0, 1.0)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    meaning: str
    unit: str
    healthy: Direction  # up: higher is better; down: lower is better; stable: drift is the symptom
    # Every value the metric can log lies in [lo, hi] by how it is computed (a fraction, a count,
    # a k3 KL), so its mean does too: a confidence band may be cut to this range without losing
    # coverage. UNBOUNDED where the sign is free (k1 KL, a loss, a reward).
    bounds: tuple[float, float] = UNBOUNDED
    # [lo, hi] that a healthy small run (16 prompts x 8 completions) plausibly logs; lo == hi for a
    # value a healthy run holds constant. The tests' synthetic healthy streams draw every metric
    # from it, so a new health rule on any catalogued metric finds its input there.
    healthy_range: tuple[float, float] = field(kw_only=True)


CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec("reward/mean", "mean total reward over all sampled completions", "reward", "up",
               healthy_range=(0.3, 0.7)),
    MetricSpec("reward/std", "std of total reward over all sampled completions", "reward", "none", NON_NEGATIVE,
               healthy_range=(0.3, 0.5)),
    MetricSpec("accuracy/train", "fraction of sampled completions judged correct by math-verify", "fraction", "up", UNIT_INTERVAL,
               healthy_range=(0.3, 0.7)),
    MetricSpec("entropy/mean", "learner next-token entropy of the sampling distribution, token-mean over responses",
               "nats", "stable", NON_NEGATIVE, healthy_range=(0.8, 1.0)),
    MetricSpec("length/mean", "response length", "tokens", "stable", NON_NEGATIVE, healthy_range=(20.0, 40.0)),
    MetricSpec("length/max", "longest response in the batch", "tokens", "stable", NON_NEGATIVE,
               healthy_range=(40.0, 64.0)),
    MetricSpec("length/correct_mean", "mean length of correct responses", "tokens", "stable", NON_NEGATIVE,
               healthy_range=(20.0, 40.0)),
    MetricSpec("length/incorrect_mean", "mean length of incorrect responses (grows under GRPO length bias)",
               "tokens", "down", NON_NEGATIVE, healthy_range=(30.0, 60.0)),
    MetricSpec("length/truncated_frac", "fraction of responses that hit max_new_tokens without EOS", "fraction",
               "down", UNIT_INTERVAL, healthy_range=(0.0, 0.1)),
    MetricSpec("clip/frac", "fraction of response tokens whose gradient the clipping removes (low + high; "
               "CISPO: weights truncated)", "fraction", "stable", UNIT_INTERVAL, healthy_range=(0.0, 0.1)),
    MetricSpec("clip/frac_low", "A < 0 tokens clipped: ratio < 1-ε_low (GMPO: log-ratio < -ε_low); "
               "CISPO: weight truncated below, any A", "fraction", "stable", UNIT_INTERVAL,
               healthy_range=(0.0, 0.05)),
    MetricSpec("clip/frac_high", "A > 0 tokens clipped: ratio > 1+ε_high (GMPO: log-ratio > ε_high); "
               "CISPO: weight truncated above, any A", "fraction", "stable", UNIT_INTERVAL,
               healthy_range=(0.0, 0.05)),
    MetricSpec("policy/approx_kl", "token-mean k1 estimate of KL(old ‖ new) during the update", "nats", "down",
               healthy_range=(0.0, 0.005)),
    MetricSpec("policy/ratio_mean", "mean importance ratio π_new/π_old over response tokens", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.99, 1.01)),
    MetricSpec("policy/ratio_max", "max importance ratio over response tokens", "ratio", "down", NON_NEGATIVE,
               healthy_range=(1.2, 2.0)),
    MetricSpec("mismatch/prob_abs_diff_mean", "|p_learner − p_sampler| of sampled tokens, learner before the update",
               "probability", "down", UNIT_INTERVAL, healthy_range=(0.0, 0.01)),
    MetricSpec("mismatch/prob_abs_diff_max", "max |p_learner − p_sampler| of sampled tokens", "probability", "down", UNIT_INTERVAL,
               healthy_range=(0.0, 0.4)),
    MetricSpec("mismatch/kl", "token-mean k3 estimate of KL(π_sampler ‖ π_learner)", "nats", "down", NON_NEGATIVE,
               healthy_range=(0.0, 0.005)),
    MetricSpec("mismatch/is_weight_mean", "mean IS correction weight (when a correction is on)", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.98, 1.02)),
    MetricSpec("mismatch/is_clipped_frac", "fraction of tokens whose IS weight was truncated/masked", "fraction",
               "down", UNIT_INTERVAL, healthy_range=(0.0, 0.01)),
    MetricSpec("mismatch/is_reweighted_frac", "fraction of tokens whose applied IS weight differs from 1 by more "
               "than 0.1% (what turning a correction on acts on)", "fraction", "stable", UNIT_INTERVAL,
               healthy_range=(0.0, 1.0)),  # any share: it describes the sampler, not health
    # The mismatch flight recorder (workbench/metrics/mismatch.py): Δ = log π_learner − log π_sampler on
    # sampled tokens, ρ = exp(Δ) the raw ratio before any correction, logged whatever the correction.
    MetricSpec("mismatch/kl_k1", "token-mean k1 estimate of KL(π_sampler ‖ π_learner), E[−Δ] (verl "
               "rollout_corr/kl; mismatch/kl is the k3)", "nats", "down", healthy_range=(-0.005, 0.005)),
    MetricSpec("mismatch/log_ratio_abs_mean", "token mean of |Δ| = |log π_learner − log π_sampler| (TRL: the "
               "sampling logp difference, mean)", "nats", "down", NON_NEGATIVE, healthy_range=(0.0, 0.02)),
    MetricSpec("mismatch/log_ratio_abs_max", "largest |Δ| over response tokens (the step-0 gate's statistic)",
               "nats", "down", NON_NEGATIVE, healthy_range=(0.0, 0.7)),
    MetricSpec("mismatch/is_ratio_mean", "mean raw token IS ratio ρ = π_learner/π_sampler, before any correction",
               "ratio", "stable", NON_NEGATIVE, healthy_range=(0.99, 1.01)),
    MetricSpec("mismatch/is_ratio_std", "population std of the raw token IS ratio", "ratio", "down", NON_NEGATIVE,
               healthy_range=(0.0, 0.05)),
    MetricSpec("mismatch/is_ratio_min", "smallest raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.5, 1.0)),
    MetricSpec("mismatch/is_ratio_max", "largest raw token IS ratio", "ratio", "down", NON_NEGATIVE,
               healthy_range=(1.0, 2.0)),
    MetricSpec("mismatch/is_ratio_p1", "1st percentile of the raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.9, 1.0)),
    MetricSpec("mismatch/is_ratio_p5", "5th percentile of the raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.95, 1.0)),
    MetricSpec("mismatch/is_ratio_p50", "median raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(0.999, 1.001)),
    MetricSpec("mismatch/is_ratio_p95", "95th percentile of the raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(1.0, 1.05)),
    MetricSpec("mismatch/is_ratio_p99", "99th percentile of the raw token IS ratio", "ratio", "stable", NON_NEGATIVE,
               healthy_range=(1.0, 1.1)),
    MetricSpec("mismatch/is_ratio_tail_frac", "fraction of tokens whose raw IS ratio lies outside [0.9, 1.1] "
               "(the tail a healthy mean hides)", "fraction", "down", UNIT_INTERVAL, healthy_range=(0.0, 0.02)),
    MetricSpec("mismatch/is_ratio_above_cap_frac", "fraction of tokens whose raw IS ratio exceeds the correction's "
               "cap C (algorithm.correction_cap; logged with or without a correction)", "fraction", "down",
               UNIT_INTERVAL, healthy_range=(0.0, 0.001)),
    MetricSpec("mismatch/is_ratio_below_cap_frac", "fraction of tokens whose raw IS ratio is below 1/C", "fraction",
               "down", UNIT_INTERVAL, healthy_range=(0.0, 0.001)),
    MetricSpec("mismatch/ess", "normalised effective sample size of the raw token ratios, (Σρ)²/(N·Σρ²) per batch "
               "(verl rollout_is_eff_sample_size; 1 = no mismatch)", "fraction", "up", UNIT_INTERVAL,
               healthy_range=(0.99, 1.0)),
    MetricSpec("mismatch/chi2_token", "token χ² divergence E[ρ²] − 1 (verl chi2_token)", "χ²", "down",
               (-1.0, math.inf), healthy_range=(0.0, 0.01)),
    MetricSpec("mismatch/chi2_seq", "sequence χ² divergence E[(Π_t ρ_t)²] − 1 (verl chi2_seq)", "χ²", "down",
               (-1.0, math.inf), healthy_range=(0.0, 0.2)),
    MetricSpec("mismatch/seq_log_ratio_mean", "mean over sequences of Σ_t Δ, the log of the sequence IS weight",
               "nats", "stable", healthy_range=(-0.05, 0.05)),
    MetricSpec("mismatch/seq_log_ratio_std", "population std over sequences of Σ_t Δ", "nats", "down", NON_NEGATIVE,
               healthy_range=(0.0, 0.2)),
    MetricSpec("mismatch/seq_log_ratio_min", "smallest sequence log IS weight Σ_t Δ", "nats", "stable",
               healthy_range=(-0.5, 0.0)),
    MetricSpec("mismatch/seq_log_ratio_max", "largest sequence log IS weight Σ_t Δ", "nats", "stable",
               healthy_range=(0.0, 0.5)),
    MetricSpec("mismatch/learner_ppl", "learner perplexity of the sampled responses, batch mean of per-sequence "
               "exp(−mean log π_learner) (verl training_ppl)", "perplexity", "none", (1.0, math.inf),
               healthy_range=(1.5, 3.0)),
    MetricSpec("mismatch/sampler_ppl", "sampler perplexity of its own responses (verl rollout_ppl)", "perplexity",
               "none", (1.0, math.inf), healthy_range=(1.5, 3.0)),
    MetricSpec("mismatch/log_ppl_diff", "mean over sequences of log(learner ppl / sampler ppl) (verl log_ppl_diff)",
               "nats", "stable", healthy_range=(-0.005, 0.005)),
    MetricSpec("mismatch/ppl_ratio", "mean over sequences of learner ppl / sampler ppl (verl ppl_ratio)", "ratio",
               "stable", NON_NEGATIVE, healthy_range=(0.995, 1.005)),
    MetricSpec("mismatch/token_mult_prob_error", "token mean of exp|Δ| (NeMo-RL token_mult_prob_error; 1 = "
               "identical, NeMo-RL says investigate above 1.05)", "ratio", "down", NON_NEGATIVE,
               healthy_range=(1.0, 1.02)),
    MetricSpec("mismatch/kl_ent_ratio", "mismatch/kl ÷ entropy/mean (prime-rl kl_ent_ratio): the mismatch as a "
               "share of the policy's own randomness", "ratio", "down", NON_NEGATIVE, healthy_range=(0.0, 0.01)),
    MetricSpec("batch/repetition_frac", "fraction of responses caught in a loop: an n-gram (n ≤ 4 tokens) repeated "
               "back to back ≥ 4 times (slime repetition_frac, own definition)", "fraction", "down", UNIT_INTERVAL,
               healthy_range=(0.0, 0.05)),
    MetricSpec("kl/ref", "KL to the reference policy (when one is used)", "nats", "down", healthy_range=(0.0, 0.1)),
    MetricSpec("loss/policy", "policy loss (mean over the step's optimizer steps)", "loss", "none",
               healthy_range=(-0.1, 0.1)),
    MetricSpec("grad/norm", "global grad norm before clipping (mean over optimizer steps)", "norm", "stable", NON_NEGATIVE,
               healthy_range=(0.5, 2.0)),
    # LoRA runs only (learner.lora; workbench/train/lora.py), every step
    MetricSpec("lora/trainable_params", "parameters the optimizer trains: the adapters' A and B entries, "
               "Σ rank·(d_in + d_out) over the adapted layers", "count", "none", NON_NEGATIVE,
               healthy_range=(1e3, 1e5)),
    MetricSpec("lora/trainable_frac", "lora/trainable_params ÷ every parameter of the adapted model (adapters "
               "included, as peft counts)", "fraction", "none", UNIT_INTERVAL, healthy_range=(0.001, 0.2)),
    MetricSpec("lora/update_norm", "‖ΔW‖ of the adapters: √(Σ_layers ‖(alpha/rank)·B·A‖_F²), the adapted policy's "
               "distance from the base in weight space (0 at the start: B is initialised to 0)", "norm", "none",
               NON_NEGATIVE, healthy_range=(0.0, 1.0)),
    MetricSpec("batch/zero_std_frac", "fraction of groups whose rewards are all equal (no GRPO signal)", "fraction",
               "down", UNIT_INTERVAL, healthy_range=(0.2, 0.5)),
    MetricSpec("batch/all_correct_frac", "fraction of prompts whose completions are all correct (too easy: no "
               "accuracy signal; prompt curation drops such prompts)", "fraction", "down", UNIT_INTERVAL,
               healthy_range=(0.0, 0.3)),
    MetricSpec("batch/all_wrong_frac", "fraction of prompts whose completions are all wrong (too hard: no "
               "accuracy signal)", "fraction", "down", UNIT_INTERVAL, healthy_range=(0.1, 0.4)),
    MetricSpec("batch/filtered_frac", "fraction of groups dropped by dynamic sampling", "fraction", "none", UNIT_INTERVAL,
               healthy_range=(0.0, 0.3)),
    MetricSpec("eval/accuracy", "held-out accuracy (greedy unless configured; with rollout.eval_samples > 1, of each "
               "problem's first sampled answer), at eval steps", "fraction", "up", UNIT_INTERVAL,
               healthy_range=(0.3, 0.7)),
    MetricSpec("eval/length_mean", "held-out mean response length, at eval steps", "tokens", "stable", NON_NEGATIVE,
               healthy_range=(20.0, 40.0)),
    MetricSpec("eval/n_problems", "held-out problems scored at this eval step: eval/accuracy a is a mean over n "
               "of them, so √(a(1−a)/n) is its standard error from the draw of problems alone (not seed noise)",
               "count", "none", NON_NEGATIVE, healthy_range=(100.0, 500.0)),
    *(MetricSpec(name, f"held-out unbiased pass@{name.rsplit('_', 1)[1]} (Chen et al. 2021): the chance that "
                 f"{name.rsplit('_', 1)[1]} of the rollout.eval_samples answers per problem, drawn without replacement, "
                 "hold a correct one, mean over problems; logged at eval steps when rollout.eval_samples > 1 and k <= it",
                 "fraction", "up", UNIT_INTERVAL, healthy_range=(0.3, 0.9)) for name in PASS_AT_K_METRICS),
    MetricSpec(MEAN_AT_N_METRIC, "held-out fraction of all rollout.eval_samples answers judged correct (mean@n, "
               "= eval/pass_at_1); logged when eval_samples > 1", "fraction", "up", UNIT_INTERVAL,
               healthy_range=(0.3, 0.7)),
    *(MetricSpec(name, f"fraction of {where} responses{side_text} holding one of rollout.reflection_words "
                 "(default oat-zero's 11 self-reflection keywords); model.path runs only", "fraction", "none",
                 UNIT_INTERVAL, healthy_range=(0.0, 0.2))
      for where, names in (("sampled", REFLECTION_METRICS["behaviour"]), ("held-out (first answers)",
                                                                         REFLECTION_METRICS["eval"]))
      for name, side_text in zip(names, ("", " judged correct", " judged incorrect"), strict=True)),
    MetricSpec("perf/step_s", "wall time of the RL step", "s", "down", NON_NEGATIVE, healthy_range=(0.3, 0.6)),
    MetricSpec("perf/sample_s", "wall time sampling this step's completions (every sampling round)", "s", "down",
               NON_NEGATIVE, healthy_range=(0.1, 0.3)),
    MetricSpec("perf/score_s", "wall time scoring them (math-verify and shaping); with reward.overlap it runs "
               "beside the learner's forward, and sample + score + learn can exceed the step", "s", "down",
               NON_NEGATIVE, healthy_range=(0.01, 0.05)),
    MetricSpec("perf/learn_s", "wall time of the policy update and the weight sync to the sampler", "s", "down",
               NON_NEGATIVE, healthy_range=(0.1, 0.3)),
    MetricSpec("perf/sample_tokens_per_s", "generated tokens per second of sampling", "tokens/s", "up", NON_NEGATIVE,
               healthy_range=(2000.0, 4000.0)),
    MetricSpec("perf/learn_tokens_per_s", "tokens per second through the learner update", "tokens/s", "up", NON_NEGATIVE,
               healthy_range=(5000.0, 10000.0)),
    MetricSpec("perf/sample_tokens", "tokens generated this step", "tokens", "none", NON_NEGATIVE,
               healthy_range=(2000.0, 5000.0)),
    MetricSpec("perf/health_s", "time evaluating the health rules this step", "s", "down", NON_NEGATIVE,
               healthy_range=(0.0, 0.001)),
    MetricSpec("perf/algorithm_s", "time inside the algorithm units (advantages, IS weights, loss)", "s", "down", NON_NEGATIVE,
               healthy_range=(0.001, 0.01)),
    MetricSpec(STALENESS_MEAN, "policy versions between the sampler that generated this step's batch and the "
               "learner that trains on it, mean over its groups (rollout.staleness >= 1; the schedule gives "
               "min(step, k))", "versions", "none", NON_NEGATIVE, healthy_range=(0.0, 2.0)),
    MetricSpec(STALENESS_MAX, "the largest such lag in the batch (rollout.staleness >= 1)", "versions", "none",
               NON_NEGATIVE, healthy_range=(0.0, 2.0)),
    MetricSpec(SAMPLER_WAIT_S, "time the pipelined sampler thread sat idle since the previous step, waiting for "
               "a request whose weights exist (rollout.staleness >= 1): the learner is the bottleneck", "s", "down",
               NON_NEGATIVE, healthy_range=(0.0, 0.3)),
    MetricSpec(LEARNER_WAIT_S, "time the learner waited for this step's pipelined batch (rollout.staleness >= 1): "
               "the sampler is the bottleneck", "s", "down", NON_NEGATIVE, healthy_range=(0.0, 0.3)),
    MetricSpec("batch/sampling_rounds", "sampling rounds used to fill the batch (logged only with a batch filter)", "count",
               "down", NON_NEGATIVE,
               healthy_range=(1.0, 1.0)),
    MetricSpec("train/optimizer_steps", "optimizer steps this RL step (epochs × minibatches)", "count", "none", NON_NEGATIVE,
               healthy_range=(1.0, 1.0)),
    MetricSpec("health/status", "0 ok, 1 warn, 2 fail (worst rule active this step)", "code", "down", (0.0, 2.0),
               healthy_range=(0.0, 0.0)),
)

BY_NAME = {m.name: m for m in CATALOGUE}


def metric_bounds(name: str) -> tuple[float, float]:
    """The range a catalogued metric's values lie in; unbounded for a metric not catalogued."""
    spec = BY_NAME.get(name)
    return spec.bounds if spec else UNBOUNDED


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
        for name in ("mismatch/is_weight_mean", "mismatch/is_clipped_frac", "mismatch/is_reweighted_frac"):
            absent[name] = "algorithm.correction is not set"
    if "algorithm.batch_filter" in params and off("algorithm.batch_filter"):
        for name in ("batch/filtered_frac", "batch/sampling_rounds"):
            absent[name] = "algorithm.batch_filter is not set"
    if "rollout.staleness" in params and off("rollout.staleness"):
        absent |= dict.fromkeys(PIPELINE_METRICS, "rollout.staleness = 0 (the synchronous loop)")
    reflection_off = None
    if "model.builtin" in params and not off("model.builtin"):
        reflection_off = ("model.builtin = tiny: its character-level arithmetic completions hold no words "
                          "(not applicable)")
    elif "rollout.reflection_words" in params and str(params["rollout.reflection_words"]).strip() in ("[]", ""):
        reflection_off = "rollout.reflection_words = [] (off)"
    if reflection_off is not None:
        for names in REFLECTION_METRICS.values():
            absent |= dict.fromkeys(names, reflection_off)
    if "rollout.eval_samples" in params:
        try:
            n = int(float(params["rollout.eval_samples"]))
        except (TypeError, ValueError):
            n = 1
        for name in PASS_AT_K_METRICS:
            if int(name.rsplit("_", 1)[1]) > n or n == 1:
                absent[name] = f"rollout.eval_samples = {n} (pass@k is logged for k <= eval_samples when above 1)"
        if n == 1:
            absent[MEAN_AT_N_METRIC] = "rollout.eval_samples = 1"
    return absent


def is_fraction(name: str) -> bool:
    """Whether ``name`` is a catalogued metric whose every value lies in [0, 1] (a fraction, an accuracy)."""
    spec = BY_NAME.get(name)
    return spec is not None and spec.bounds[0] >= 0.0 and spec.bounds[1] <= 1.0


def range_text(bounds: tuple[float, float]) -> str:
    """``[0, 1]``, ``>= 0`` or ``any``: a metric's bounds for tables."""
    lo, hi = bounds
    if math.isinf(lo) and math.isinf(hi):
        return "any"
    if math.isinf(hi):
        return f">= {lo:g}"
    return f"[{lo:g}, {hi:g}]"


def markdown_table() -> str:
    """The catalogue as the markdown table in docs/metrics.md (kept in sync by a test)."""
    lines = ["| name | meaning | unit | healthy | range |", "|---|---|---|---|---|"]
    lines += [f"| `{m.name}` | {m.meaning} | {m.unit} | {m.healthy} | {range_text(m.bounds)} |" for m in CATALOGUE]
    return "\n".join(lines) + "\n"
