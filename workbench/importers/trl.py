"""TRL (``GRPOTrainer``, TRL 1.16): metric mappings and the ``trainer_state.json`` reader.

Definitions read from ``trl/trainer/grpo_trainer.py`` (TRL 1.16.0): ``_generate_and_score_completions``
logs lengths, rewards and ``frac_reward_zero_std``; ``_compute_loss`` logs ``entropy``, ``kl``
and the ``clip_ratio/*`` fractions; ``GRPOTrainer.log`` averages each over the logging window.
``loss``, ``grad_norm``, ``learning_rate`` and ``epoch`` come from ``transformers.Trainer``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from workbench.errors import UserFileError
from workbench.metrics.names import (
    BATCH_ZERO_STD_FRAC,
    CLIP_FRAC,
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    ENTROPY_MEAN,
    GRAD_NORM,
    KL_REF,
    LENGTH_MAX,
    LENGTH_MEAN,
    LENGTH_TRUNCATED_FRAC,
    LOSS_POLICY,
    MISMATCH_IS_WEIGHT_MEAN,
    MISMATCH_LOG_RATIO_ABS_MAX,
    MISMATCH_LOG_RATIO_ABS_MEAN,
    PERF_STEP_S,
    REWARD_MEAN,
    REWARD_STD,
)
from workbench.safe_io import parse_json, read_bytes

from .adapters import ADAPTERS, Adapter, MetricMapping
from .errors import ImportSourceError
from .validate import BadLines, Point, metric_value, regular_file_size, step_number

GRPO = "trl/trainer/grpo_trainer.py"
HF_TRAINER = "transformers/trainer.py (Trainer._maybe_log_save_evaluate)"

MAPPINGS = (
    MetricMapping("reward", REWARD_MEAN, f"{GRPO} (_generate_and_score_completions: nanmean of weighted rewards)"),
    MetricMapping("reward_std", REWARD_STD, f"{GRPO} (nanstd over all completions of the batch)",
                  caveat="Bessel-corrected std over the whole batch, unscorable completions excluded"),
    MetricMapping("frac_reward_zero_std", BATCH_ZERO_STD_FRAC,
                  f"{GRPO} (is_std_zero per completion, mean)",
                  caveat="a fraction of completions in zero-std groups; equals the fraction of groups "
                         "because every group has num_generations completions"),
    MetricMapping("entropy", ENTROPY_MEAN, f"{GRPO} (_compute_loss: global_masked_mean(entropies))"),
    MetricMapping("completions/mean_length", LENGTH_MEAN, f"{GRPO} (completion_mask.sum(1), mean)"),
    MetricMapping("completions/max_length", LENGTH_MAX, f"{GRPO} (completion_mask.sum(1), max)"),
    MetricMapping("completions/clipped_ratio", LENGTH_TRUNCATED_FRAC,
                  f"{GRPO} (last token neither EOS nor pad)",
                  caveat="TRL calls it 'clipped'; it is the truncated fraction (no EOS within "
                         "max_completion_length), not a ratio-clipping statistic"),
    MetricMapping("clip_ratio/low_mean", CLIP_FRAC_LOW, f"{GRPO} (_compute_loss: is_low_clipped)",
                  caveat="region-based on the advantage sign: ratio < 1-epsilon_low and advantage < 0 "
                         "(the canonical definition); logged only for loss_type grpo, bnpo, dr_grpo, "
                         "dapo, luspo"),
    MetricMapping("clip_ratio/high_mean", CLIP_FRAC_HIGH, f"{GRPO} (_compute_loss: is_high_clipped)",
                  caveat="ratio > 1+epsilon_high and advantage > 0; same loss types as clip_ratio/low_mean"),
    MetricMapping("clip_ratio/region_mean", CLIP_FRAC, f"{GRPO} (_compute_loss: is_region_clipped)",
                  caveat="low or high region; same loss types as clip_ratio/low_mean"),
    MetricMapping("cispo_clip_ratio", None, f"{GRPO} (_compute_loss: is_cispo_clipped)",
                  caveat="counts ratio > epsilon_high only where advantage > 0; the canonical CISPO "
                         "clip/frac counts every truncated weight, so it is kept as source/cispo_clip_ratio"),
    MetricMapping("kl", KL_REF, f"{GRPO} (_compute_loss: per_token_kl, k3 to the reference model)",
                  caveat="logged only when beta != 0"),
    MetricMapping("loss", LOSS_POLICY, HF_TRAINER,
                  caveat="the total training loss (policy term + beta*KL - entropy bonus), averaged over "
                         "the logging window; equals the policy loss when beta = 0 and no entropy bonus"),
    MetricMapping("grad_norm", GRAD_NORM, HF_TRAINER,
                  caveat="global norm before clipping, at the logging step"),
    MetricMapping("step_time", PERF_STEP_S, f"{GRPO} (training_step wall time)"),
    MetricMapping("sampling/sampling_logp_difference/mean", MISMATCH_LOG_RATIO_ABS_MEAN,
                  f"{GRPO} (_generate_and_score_completions: |old_per_token_logps − sampling_per_token_logps|)",
                  caveat="logged with vllm_importance_sampling_correction; a mean of the processes' token means"),
    MetricMapping("sampling/sampling_logp_difference/max", MISMATCH_LOG_RATIO_ABS_MAX,
                  f"{GRPO} (_generate_and_score_completions)",
                  caveat="logged with vllm_importance_sampling_correction"),
    MetricMapping("sampling/importance_sampling_ratio/mean", MISMATCH_IS_WEIGHT_MEAN,
                  f"{GRPO} (_generate_and_score_completions)",
                  caveat="the applied (truncated or masked) IS weight, not the raw ratio"),
)


#: A trainer_state.json is one JSON document, parsed whole: a few MB for a long run.
MAX_TRAINER_STATE_BYTES = 256 << 20


class _OutOfRange(str):
    """A JSON number beyond a 64-bit float (``1e400``), which ``json`` would read as infinity without a word:
    kept as its text, so :func:`metric_value` refuses it (``Infinity``, as HF writes inf, is not one)."""


def _float(text: str) -> float | _OutOfRange:
    value = float(text)
    return _OutOfRange(text) if math.isinf(value) else value


def read_trainer_state(path: str, bad: BadLines) -> Iterator[Point]:
    """``trainer_state.json`` -> ``(where, global step, {metric: value})`` per ``log_history`` entry.

    Entries logged at the same step are merged by the import (later keys win, as HF's loggers do);
    non-numeric values (strings) are skipped; ``None`` (TRL's "no valid value in the window")
    becomes NaN. An entry without an integer step, or with a number out of range, goes to ``bad``.
    """
    regular_file_size(path)  # "is a FIFO", "is a directory": the clearer message first
    try:  # a regular file (checked on the open descriptor), bounded, recursion-safe JSON (workbench/safe_io.py)
        data = parse_json(read_bytes(path, limit=MAX_TRAINER_STATE_BYTES, what="TRL trainer state"), str(path),
                          parse_float=_float)
    except UserFileError as e:
        raise ImportSourceError(str(e).replace(": not valid JSON", " is not a TRL trainer state (not JSON)")) from None
    history = data.get("log_history") if isinstance(data, dict) else None
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise ImportSourceError(f"{path} is not a TRL trainer state (no 'log_history' list)")
    for i, entry in enumerate(history):
        try:
            if "step" not in entry:
                raise ValueError("no integer 'step'")
            step = step_number(entry["step"])
            row = {key: metric_value(value) for key, value in entry.items() if key != "step"
                   and (value is None or isinstance(value, _OutOfRange)
                        or (isinstance(value, (int, float)) and not isinstance(value, bool)))}
        except ValueError as e:
            bad(i, str(e), what="log_history entry")
            continue
        yield f"{path}: log_history[{i}]", step, row


ADAPTERS.register("trl")(Adapter(
    framework="trl", version="1.16.0", mappings=MAPPINGS, file_reader=read_trainer_state,
    file_kind="a TRL trainer_state.json",
))
