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

from workbench.metrics import names
from workbench.metrics.passk import PASS_AT_K_METRICS
from workbench.metrics.reflection import REFLECTION_METRICS

Direction = Literal["up", "down", "stable", "none"]

# rollout.staleness >= 1 (workbench/train/pipeline.py): how far behind the sampler's policy was, and who waited
PIPELINE_METRICS = (
    names.OFFPOLICY_STALENESS_MEAN,
    names.OFFPOLICY_STALENESS_MAX,
    names.PERF_SAMPLER_WAIT_S,
    names.PERF_LEARNER_WAIT_S,
)

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
    MetricSpec(
        names.REWARD_MEAN, "mean total reward over all sampled completions", "reward", "up", healthy_range=(0.3, 0.7)
    ),
    MetricSpec(
        names.REWARD_STD,
        "std of total reward over all sampled completions",
        "reward",
        "none",
        NON_NEGATIVE,
        healthy_range=(0.3, 0.5),
    ),
    MetricSpec(
        names.ACCURACY_TRAIN,
        "fraction of sampled completions judged correct by math-verify",
        "fraction",
        "up",
        UNIT_INTERVAL,
        healthy_range=(0.3, 0.7),
    ),
    MetricSpec(
        names.REWARD_VERIFY_TIMEOUT_FRAC,
        "fraction of sampled completions whose answer verification ran out of time (reward.timeout_s); each is "
        "scored incorrect, so a run on a loaded CPU can log other rewards than another run of its run key; "
        "nonzero: reward.timeout_s is too short for the machine's load",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.0),
    ),
    MetricSpec(
        names.ENTROPY_MEAN,
        "learner next-token entropy of the sampling distribution, token-mean over responses",
        "nats",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.8, 1.0),
    ),
    MetricSpec(names.LENGTH_MEAN, "response length", "tokens", "stable", NON_NEGATIVE, healthy_range=(20.0, 40.0)),
    MetricSpec(
        names.LENGTH_MAX, "longest response in the batch", "tokens", "stable", NON_NEGATIVE, healthy_range=(40.0, 64.0)
    ),
    MetricSpec(
        names.LENGTH_CORRECT_MEAN,
        "mean length of correct responses",
        "tokens",
        "stable",
        NON_NEGATIVE,
        healthy_range=(20.0, 40.0),
    ),
    MetricSpec(
        names.LENGTH_INCORRECT_MEAN,
        "mean length of incorrect responses (grows under GRPO length bias)",
        "tokens",
        "down",
        NON_NEGATIVE,
        healthy_range=(30.0, 60.0),
    ),
    MetricSpec(
        names.LENGTH_TRUNCATED_FRAC,
        "fraction of responses that hit max_new_tokens without EOS",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.1),
    ),
    MetricSpec(
        names.CLIP_FRAC,
        "fraction of response tokens whose gradient the clipping removes (low + high; CISPO: weights truncated)",
        "fraction",
        "stable",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.1),
    ),
    MetricSpec(
        names.CLIP_FRAC_LOW,
        "A < 0 tokens clipped: ratio < 1-ε_low (GMPO: log-ratio < -ε_low); CISPO: weight truncated below, any A",
        "fraction",
        "stable",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.05),
    ),
    MetricSpec(
        names.CLIP_FRAC_HIGH,
        "A > 0 tokens clipped: ratio > 1+ε_high (GMPO: log-ratio > ε_high); CISPO: weight truncated above, any A",
        "fraction",
        "stable",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.05),
    ),
    MetricSpec(
        names.POLICY_APPROX_KL,
        "token-mean k1 estimate of KL(old ‖ new) during the update",
        "nats",
        "down",
        healthy_range=(0.0, 0.005),
    ),
    MetricSpec(
        names.POLICY_RATIO_MEAN,
        "mean importance ratio π_new/π_old over response tokens",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.99, 1.01),
    ),
    MetricSpec(
        names.POLICY_RATIO_MAX,
        "max importance ratio over response tokens",
        "ratio",
        "down",
        NON_NEGATIVE,
        healthy_range=(1.2, 2.0),
    ),
    MetricSpec(
        names.MISMATCH_PROB_ABS_DIFF_MEAN,
        "|p_learner − p_sampler| of sampled tokens, learner before the update",
        "probability",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.01),
    ),
    MetricSpec(
        names.MISMATCH_PROB_ABS_DIFF_MAX,
        "max |p_learner − p_sampler| of sampled tokens",
        "probability",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.4),
    ),
    MetricSpec(
        names.MISMATCH_KL,
        "token-mean k3 estimate of KL(π_sampler ‖ π_learner)",
        "nats",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.005),
    ),
    MetricSpec(
        names.MISMATCH_IS_WEIGHT_MEAN,
        "mean IS correction weight (when a correction is on)",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.98, 1.02),
    ),
    MetricSpec(
        names.MISMATCH_IS_CLIPPED_FRAC,
        "fraction of tokens whose IS weight was truncated/masked",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.01),
    ),
    MetricSpec(
        names.MISMATCH_IS_REWEIGHTED_FRAC,
        "fraction of tokens whose applied IS weight differs from 1 by more "
        "than 0.1% (what turning a correction on acts on)",
        "fraction",
        "stable",
        UNIT_INTERVAL,
        healthy_range=(0.0, 1.0),
    ),  # any share: it describes the sampler, not health
    # The mismatch flight recorder (workbench/metrics/mismatch.py): Δ = log π_learner − log π_sampler on
    # sampled tokens, ρ = exp(Δ) the raw ratio before any correction, logged whatever the correction.
    MetricSpec(
        names.MISMATCH_KL_K1,
        "token-mean k1 estimate of KL(π_sampler ‖ π_learner), E[−Δ] (verl rollout_corr/kl; mismatch/kl is the k3)",
        "nats",
        "down",
        healthy_range=(-0.005, 0.005),
    ),
    MetricSpec(
        names.MISMATCH_LOG_RATIO_ABS_MEAN,
        "token mean of |Δ| = |log π_learner − log π_sampler| (TRL: the sampling logp difference, mean)",
        "nats",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.02),
    ),
    MetricSpec(
        names.MISMATCH_LOG_RATIO_ABS_MAX,
        "largest |Δ| over response tokens (the step-0 gate's statistic)",
        "nats",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.7),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_MEAN,
        "mean raw token IS ratio ρ = π_learner/π_sampler, before any correction",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.99, 1.01),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_STD,
        "population std of the raw token IS ratio",
        "ratio",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.05),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_MIN,
        "smallest raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.5, 1.0),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_MAX,
        "largest raw token IS ratio",
        "ratio",
        "down",
        NON_NEGATIVE,
        healthy_range=(1.0, 2.0),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_P1,
        "1st percentile of the raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.9, 1.0),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_P5,
        "5th percentile of the raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.95, 1.0),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_P50,
        "median raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.999, 1.001),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_P95,
        "95th percentile of the raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(1.0, 1.05),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_P99,
        "99th percentile of the raw token IS ratio",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(1.0, 1.1),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_TAIL_FRAC,
        "fraction of tokens whose raw IS ratio lies outside [0.9, 1.1] (the tail a healthy mean hides)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.02),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_ABOVE_CAP_FRAC,
        "fraction of tokens whose raw IS ratio exceeds the correction's "
        "cap C (algorithm.correction_cap; logged with or without a correction)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.001),
    ),
    MetricSpec(
        names.MISMATCH_IS_RATIO_BELOW_CAP_FRAC,
        "fraction of tokens whose raw IS ratio is below 1/C",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.001),
    ),
    MetricSpec(
        names.MISMATCH_ESS,
        "normalised effective sample size of the raw token ratios, (Σρ)²/(N·Σρ²) per batch "
        "(verl rollout_is_eff_sample_size; 1 = no mismatch)",
        "fraction",
        "up",
        UNIT_INTERVAL,
        healthy_range=(0.99, 1.0),
    ),
    MetricSpec(
        names.MISMATCH_CHI2_TOKEN,
        "token χ² divergence E[ρ²] − 1 (verl chi2_token)",
        "χ²",
        "down",
        (-1.0, math.inf),
        healthy_range=(0.0, 0.01),
    ),
    MetricSpec(
        names.MISMATCH_CHI2_SEQ,
        "sequence χ² divergence E[(Π_t ρ_t)²] − 1 (verl chi2_seq)",
        "χ²",
        "down",
        (-1.0, math.inf),
        healthy_range=(0.0, 0.2),
    ),
    MetricSpec(
        names.MISMATCH_SEQ_LOG_RATIO_MEAN,
        "mean over sequences of Σ_t Δ, the log of the sequence IS weight",
        "nats",
        "stable",
        healthy_range=(-0.05, 0.05),
    ),
    MetricSpec(
        names.MISMATCH_SEQ_LOG_RATIO_STD,
        "population std over sequences of Σ_t Δ",
        "nats",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.2),
    ),
    MetricSpec(
        names.MISMATCH_SEQ_LOG_RATIO_MIN,
        "smallest sequence log IS weight Σ_t Δ",
        "nats",
        "stable",
        healthy_range=(-0.5, 0.0),
    ),
    MetricSpec(
        names.MISMATCH_SEQ_LOG_RATIO_MAX,
        "largest sequence log IS weight Σ_t Δ",
        "nats",
        "stable",
        healthy_range=(0.0, 0.5),
    ),
    MetricSpec(
        names.MISMATCH_LEARNER_PPL,
        "learner perplexity of the sampled responses, batch mean of per-sequence "
        "exp(−mean log π_learner) (verl training_ppl)",
        "perplexity",
        "none",
        (1.0, math.inf),
        healthy_range=(1.5, 3.0),
    ),
    MetricSpec(
        names.MISMATCH_SAMPLER_PPL,
        "sampler perplexity of its own responses (verl rollout_ppl)",
        "perplexity",
        "none",
        (1.0, math.inf),
        healthy_range=(1.5, 3.0),
    ),
    MetricSpec(
        names.MISMATCH_LOG_PPL_DIFF,
        "mean over sequences of log(learner ppl / sampler ppl) (verl log_ppl_diff)",
        "nats",
        "stable",
        healthy_range=(-0.005, 0.005),
    ),
    MetricSpec(
        names.MISMATCH_PPL_RATIO,
        "mean over sequences of learner ppl / sampler ppl (verl ppl_ratio)",
        "ratio",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.995, 1.005),
    ),
    MetricSpec(
        names.MISMATCH_TOKEN_MULT_PROB_ERROR,
        "token mean of exp|Δ| (NeMo-RL token_mult_prob_error; 1 = identical, NeMo-RL says investigate above 1.05)",
        "ratio",
        "down",
        NON_NEGATIVE,
        healthy_range=(1.0, 1.02),
    ),
    MetricSpec(
        names.MISMATCH_KL_ENT_RATIO,
        "mismatch/kl ÷ entropy/mean (prime-rl kl_ent_ratio): the mismatch as a share of the policy's own randomness",
        "ratio",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.01),
    ),
    MetricSpec(
        names.BATCH_REPETITION_FRAC,
        "fraction of responses caught in a loop: an n-gram (n ≤ 4 tokens) repeated "
        "back to back ≥ 4 times (slime repetition_frac, own definition)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.05),
    ),
    MetricSpec(names.KL_REF, "KL to the reference policy (when one is used)", "nats", "down", healthy_range=(0.0, 0.1)),
    MetricSpec(
        names.LOSS_POLICY,
        "policy loss (mean over the step's optimizer steps)",
        "loss",
        "none",
        healthy_range=(-0.1, 0.1),
    ),
    MetricSpec(
        names.GRAD_NORM,
        "global grad norm before clipping (mean over optimizer steps)",
        "norm",
        "stable",
        NON_NEGATIVE,
        healthy_range=(0.5, 2.0),
    ),
    # LoRA runs only (learner.lora; workbench/train/lora.py), every step
    MetricSpec(
        names.LORA_TRAINABLE_PARAMS,
        "parameters the optimizer trains: the adapters' A and B entries, Σ rank·(d_in + d_out) over the adapted layers",
        "count",
        "none",
        NON_NEGATIVE,
        healthy_range=(1e3, 1e5),
    ),
    MetricSpec(
        names.LORA_TRAINABLE_FRAC,
        "lora/trainable_params ÷ every parameter of the adapted model (adapters included, as peft counts)",
        "fraction",
        "none",
        UNIT_INTERVAL,
        healthy_range=(0.001, 0.2),
    ),
    MetricSpec(
        names.LORA_UPDATE_NORM,
        "‖ΔW‖ of the adapters: √(Σ_layers ‖(alpha/rank)·B·A‖_F²), the adapted policy's "
        "distance from the base in weight space (0 at the start: B is initialised to 0)",
        "norm",
        "none",
        NON_NEGATIVE,
        healthy_range=(0.0, 1.0),
    ),
    MetricSpec(
        names.BATCH_ZERO_STD_FRAC,
        "fraction of groups whose rewards are all equal (no GRPO signal)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.2, 0.5),
    ),
    MetricSpec(
        names.BATCH_ALL_CORRECT_FRAC,
        "fraction of prompts whose completions are all correct (too easy: no "
        "accuracy signal; prompt curation drops such prompts)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.3),
    ),
    MetricSpec(
        names.BATCH_ALL_WRONG_FRAC,
        "fraction of prompts whose completions are all wrong (too hard: no accuracy signal)",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.1, 0.4),
    ),
    MetricSpec(
        names.BATCH_FILTERED_FRAC,
        "fraction of groups dropped by dynamic sampling",
        "fraction",
        "none",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.3),
    ),
    MetricSpec(
        names.EVAL_ACCURACY,
        "held-out accuracy (greedy unless configured; with rollout.eval_samples > 1, of each "
        "problem's first sampled answer), at eval steps",
        "fraction",
        "up",
        UNIT_INTERVAL,
        healthy_range=(0.3, 0.7),
    ),
    MetricSpec(
        names.EVAL_LENGTH_MEAN,
        "held-out mean response length, at eval steps",
        "tokens",
        "stable",
        NON_NEGATIVE,
        healthy_range=(20.0, 40.0),
    ),
    MetricSpec(
        names.EVAL_N_PROBLEMS,
        "held-out problems scored at this eval step: eval/accuracy a is a mean over n "
        "of them, so √(a(1−a)/n) is its standard error from the draw of problems alone (not seed noise)",
        "count",
        "none",
        NON_NEGATIVE,
        healthy_range=(100.0, 500.0),
    ),
    MetricSpec(
        names.EVAL_VERIFY_TIMEOUT_FRAC,
        "fraction of held-out answers (all rollout.eval_samples per problem) whose verification ran out of time "
        "(reward.timeout_s), at eval steps; each is scored incorrect in eval/accuracy (and pass@k, mean@n), so a "
        "run on a loaded CPU can log another eval/accuracy than another run of its run key; nonzero: "
        "reward.timeout_s is too short for the machine's load",
        "fraction",
        "down",
        UNIT_INTERVAL,
        healthy_range=(0.0, 0.0),
    ),
    *(
        MetricSpec(
            name,
            f"held-out unbiased pass@{name.rsplit('_', 1)[1]} (Chen et al. 2021): the chance that "
            f"{name.rsplit('_', 1)[1]} of the rollout.eval_samples answers per problem, drawn without replacement, "
            "hold a correct one, mean over problems; logged at eval steps when rollout.eval_samples > 1 and k <= it",
            "fraction",
            "up",
            UNIT_INTERVAL,
            healthy_range=(0.3, 0.9),
        )
        for name in PASS_AT_K_METRICS
    ),
    MetricSpec(
        names.EVAL_MEAN_AT_N,
        "held-out fraction of all rollout.eval_samples answers judged correct (mean@n, "
        "= eval/pass_at_1); logged when eval_samples > 1",
        "fraction",
        "up",
        UNIT_INTERVAL,
        healthy_range=(0.3, 0.7),
    ),
    *(
        MetricSpec(
            name,
            f"fraction of {where} responses{side_text} holding one of rollout.reflection_words "
            "(default oat-zero's 11 self-reflection keywords); model.path runs only",
            "fraction",
            "none",
            UNIT_INTERVAL,
            healthy_range=(0.0, 0.2),
        )
        for where, rates in (
            ("sampled", REFLECTION_METRICS["behaviour"]),
            ("held-out (first answers)", REFLECTION_METRICS["eval"]),
        )
        for name, side_text in zip(rates, ("", " judged correct", " judged incorrect"), strict=True)
    ),
    MetricSpec(names.PERF_STEP_S, "wall time of the RL step", "s", "down", NON_NEGATIVE, healthy_range=(0.3, 0.6)),
    MetricSpec(
        names.PERF_SAMPLE_S,
        "wall time sampling this step's completions (every sampling round)",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.1, 0.3),
    ),
    MetricSpec(
        names.PERF_SCORE_S,
        "wall time scoring them (math-verify and shaping); with reward.overlap it runs "
        "beside the learner's forward, and sample + score + learn can exceed the step",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.01, 0.05),
    ),
    MetricSpec(
        names.PERF_LEARN_S,
        "wall time of the policy update and the weight sync to the sampler",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.1, 0.3),
    ),
    MetricSpec(
        names.PERF_SAMPLE_TOKENS_PER_S,
        "generated tokens per second of sampling",
        "tokens/s",
        "up",
        NON_NEGATIVE,
        healthy_range=(2000.0, 4000.0),
    ),
    MetricSpec(
        names.PERF_LEARN_TOKENS_PER_S,
        "tokens per second through the learner update",
        "tokens/s",
        "up",
        NON_NEGATIVE,
        healthy_range=(5000.0, 10000.0),
    ),
    MetricSpec(
        names.PERF_SAMPLE_TOKENS,
        "tokens generated this step",
        "tokens",
        "none",
        NON_NEGATIVE,
        healthy_range=(2000.0, 5000.0),
    ),
    MetricSpec(
        names.PERF_HEALTH_S,
        "time evaluating the health rules this step",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.001),
    ),
    MetricSpec(
        names.PERF_ALGORITHM_S,
        "time inside the algorithm units (advantages, IS weights, loss)",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.001, 0.01),
    ),
    MetricSpec(
        names.OFFPOLICY_STALENESS_MEAN,
        "policy versions between the sampler that generated this step's batch and the "
        "learner that trains on it, mean over its groups (rollout.staleness >= 1; the schedule gives "
        "min(step, k))",
        "versions",
        "none",
        NON_NEGATIVE,
        healthy_range=(0.0, 2.0),
    ),
    MetricSpec(
        names.OFFPOLICY_STALENESS_MAX,
        "the largest such lag in the batch (rollout.staleness >= 1)",
        "versions",
        "none",
        NON_NEGATIVE,
        healthy_range=(0.0, 2.0),
    ),
    MetricSpec(
        names.PERF_SAMPLER_WAIT_S,
        "time the pipelined sampler thread sat idle since the previous step, waiting for "
        "a request whose weights exist (rollout.staleness >= 1): the learner is the bottleneck",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.3),
    ),
    MetricSpec(
        names.PERF_LEARNER_WAIT_S,
        "time the learner waited for this step's pipelined batch (rollout.staleness >= 1): "
        "the sampler is the bottleneck",
        "s",
        "down",
        NON_NEGATIVE,
        healthy_range=(0.0, 0.3),
    ),
    MetricSpec(
        names.BATCH_SAMPLING_ROUNDS,
        "sampling rounds used to fill the batch (logged only with a batch filter)",
        "count",
        "down",
        NON_NEGATIVE,
        healthy_range=(1.0, 1.0),
    ),
    MetricSpec(
        names.TRAIN_OPTIMIZER_STEPS,
        "optimizer steps this RL step (epochs × minibatches)",
        "count",
        "none",
        NON_NEGATIVE,
        healthy_range=(1.0, 1.0),
    ),
    MetricSpec(
        names.HEALTH_STATUS,
        "0 ok, 1 warn, 2 fail (worst rule active this step)",
        "code",
        "down",
        (0.0, 2.0),
        healthy_range=(0.0, 0.0),
    ),
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
        absent[names.KL_REF] = "algorithm.kl_coef = 0 (no reference model)"
    if "algorithm.correction" in params and off("algorithm.correction"):
        for name in (names.MISMATCH_IS_WEIGHT_MEAN, names.MISMATCH_IS_CLIPPED_FRAC, names.MISMATCH_IS_REWEIGHTED_FRAC):
            absent[name] = "algorithm.correction is not set"
    if "algorithm.batch_filter" in params and off("algorithm.batch_filter"):
        for name in (names.BATCH_FILTERED_FRAC, names.BATCH_SAMPLING_ROUNDS):
            absent[name] = "algorithm.batch_filter is not set"
    if "rollout.staleness" in params and off("rollout.staleness"):
        absent |= dict.fromkeys(PIPELINE_METRICS, "rollout.staleness = 0 (the synchronous loop)")
    reflection_off = None
    if "model.builtin" in params and not off("model.builtin"):
        reflection_off = (
            "model.builtin = tiny: its character-level arithmetic completions hold no words (not applicable)"
        )
    elif "rollout.reflection_words" in params and str(params["rollout.reflection_words"]).strip() in ("[]", ""):
        reflection_off = "rollout.reflection_words = [] (off)"
    if reflection_off is not None:
        for rates in REFLECTION_METRICS.values():
            absent |= dict.fromkeys(rates, reflection_off)
    if "rollout.eval_samples" in params:
        try:
            n = int(float(params["rollout.eval_samples"]))
        except (TypeError, ValueError):
            n = 1
        for name in PASS_AT_K_METRICS:
            if int(name.rsplit("_", 1)[1]) > n or n == 1:
                absent[name] = f"rollout.eval_samples = {n} (pass@k is logged for k <= eval_samples when above 1)"
        if n == 1:
            absent[names.EVAL_MEAN_AT_N] = "rollout.eval_samples = 1"
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
