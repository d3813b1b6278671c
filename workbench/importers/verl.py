"""verl (``RayPPOTrainer``, verl 0.9.1): metric mappings and the console / JSONL log reader.

Definitions read from verl 0.9.1 (the copy ``make verl`` installs under ``.workbench/verl``):
``verl/trainer/ppo/metric_utils.py`` (``compute_data_metrics``: ``critic/*``,
``response_length/*``; ``compute_throughout_metrics``: ``perf/*``),
``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_vanilla``: ``actor/pg_clipfrac``,
``actor/pg_clipfrac_lower``, ``actor/ppo_kl``), ``verl/trainer/ppo/ray_trainer.py``
(``actor/entropy``; ``_update_actor`` prefixes the actor worker's metrics with ``actor/``),
``verl/workers/utils/losses.py`` (``actor/pg_loss``, ``kl_loss``), ``verl/workers/engine/base.py``
(``grad_norm``). The actor's per-micro-batch values are reduced over the step by ``reduce_metrics``.

Log formats (``verl/utils/tracking.py``): ``trainer.logger=['console']`` prints
``step:N - name:value - name:value`` per step (``LocalLogger``, ``concat_dict_to_str``);
``trainer.logger=['file']`` writes JSON lines ``{"step": N, "data": {name: value}}``
(``FileLogger``); ``trainer.logger=['mlflow']`` logs the same names with ``step``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from .adapters import ADAPTERS, Adapter, MetricMapping
from .errors import ImportSourceError

METRIC_UTILS = "verl/trainer/ppo/metric_utils.py"
CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
ROLLOUT_CORR = "verl/trainer/ppo/rollout_corr_helper.py"

MAPPINGS = (
    MetricMapping("critic/score/mean", "reward/mean", f"{METRIC_UTILS} (compute_data_metrics)",
                  caveat="the sequence score of the reward function, over non-aborted samples, before any "
                         "KL-in-reward penalty (critic/rewards/mean is after it: kept as source)"),
    MetricMapping("actor/entropy", "entropy/mean", "verl/trainer/ppo/ray_trainer.py (agg_loss of entropys)",
                  caveat="aggregated with the actor's loss_agg_mode: the canonical token mean only when "
                         "loss_agg_mode = token-mean (verl's default)"),
    MetricMapping("response_length/mean", "length/mean", f"{METRIC_UTILS} (compute_data_metrics)"),
    MetricMapping("response_length/max", "length/max", f"{METRIC_UTILS} (compute_data_metrics)"),
    MetricMapping("response_length/clip_ratio", "length/truncated_frac", f"{METRIC_UTILS} (compute_data_metrics)",
                  caveat="the truncated fraction: response length == max_response_length (a response "
                         "ending with EOS exactly at the limit counts as truncated), not a ratio clip"),
    MetricMapping("actor/pg_clipfrac", "clip/frac", f"{CORE_ALGOS} (compute_policy_loss_vanilla)",
                  caveat="tokens where the clipped surrogate is the larger loss (either side), averaged "
                         "over micro-batches; no low/high split is logged"),
    MetricMapping("actor/pg_clipfrac_lower", None, f"{CORE_ALGOS} (compute_policy_loss_vanilla)",
                  caveat="the dual-clip lower-bound fraction: advantage < 0 and the loss capped at "
                         "-A*clip_ratio_c (ratio > clip_ratio_c, 3.0 by default), NOT the low-side clip "
                         "fraction clip/frac_low (ratio < 1-eps with A < 0); kept as source/actor/pg_clipfrac_lower"),
    MetricMapping("actor/ppo_kl", "policy/approx_kl", f"{CORE_ALGOS} (masked_mean(-log ratio))"),
    MetricMapping("actor/pg_loss", "loss/policy", "verl/workers/utils/losses.py (ppo_loss)"),
    MetricMapping("actor/kl_loss", "kl/ref", "verl/workers/utils/losses.py (ppo_loss: kl_loss; prefixed actor/ "
                  "by ray_trainer._update_actor)",
                  caveat="logged only with actor.use_kl_loss; the estimator is actor.kl_loss_type"),
    MetricMapping("actor/grad_norm", "grad/norm", "verl/workers/engine/base.py (grad_norm; prefixed actor/ by "
                  "ray_trainer._update_actor)",
                  caveat="before clipping, averaged over the step's optimizer steps"),
    MetricMapping("perf/time_per_step", "perf/step_s", f"{METRIC_UTILS} (compute_throughout_metrics)"),
    # rollout_corr/*: the sampler/learner mismatch (learner = old_log_prob, before the update), whatever the
    # correction; the off-policy diagnostics are the definitions the workbench's own follow (parity-tested).
    *(MetricMapping(f"rollout_corr/{key}", name, f"{ROLLOUT_CORR} (compute_offpolicy_metrics)")
      for key, name in (("kl", "mismatch/kl_k1"), ("k3_kl", "mismatch/kl"), ("training_ppl", "mismatch/learner_ppl"),
                        ("rollout_ppl", "mismatch/sampler_ppl"), ("log_ppl_diff", "mismatch/log_ppl_diff"),
                        ("ppl_ratio", "mismatch/ppl_ratio"), ("chi2_token", "mismatch/chi2_token"),
                        ("chi2_seq", "mismatch/chi2_seq"))),
    MetricMapping("rollout_corr/rollout_is_mean", "mismatch/is_weight_mean", f"{ROLLOUT_CORR} (compute_is_metrics)",
                  caveat="the mean applied (truncated) IS weight, logged only with rollout_is set; the raw ratio's "
                         "mean (mismatch/is_ratio_mean) is not logged by verl"),
    MetricMapping("rollout_corr/rollout_is_ratio_fraction_high", "mismatch/is_ratio_above_cap_frac",
                  f"{ROLLOUT_CORR} (compute_is_metrics)",
                  caveat="raw ratios above rollout_is_threshold (token level; sequence level: of sequence weights)"),
    MetricMapping("rollout_corr/rollout_is_ratio_fraction_low", "mismatch/is_ratio_below_cap_frac",
                  f"{ROLLOUT_CORR} (compute_is_metrics)",
                  caveat="below rollout_is_threshold_lower, 1/threshold unless set"),
    MetricMapping("rollout_corr/rollout_is_eff_sample_size", "mismatch/ess", f"{ROLLOUT_CORR} (compute_is_metrics)",
                  caveat="of the applied weights clamped at the threshold: equal to the raw ratios' ESS when no "
                         "weight reaches it, larger otherwise (verl's 0.3 band is stated on this one)"),
    MetricMapping("rollout_corr/rollout_is_std", "mismatch/is_ratio_std", f"{ROLLOUT_CORR} (compute_is_metrics)",
                  caveat="of the weights clamped at the threshold: the raw std when no weight reaches it"),
)

# LocalLogger prints numbers with pprint.pformat: numpy scalars appear as np.float64(0.5).
_CONSOLE_STEP = re.compile(r"(?:^|\s)step:(\d+)(?: - (.*))?$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def _number(text: str) -> float | None:
    text = text.strip()
    m = _NUMPY_SCALAR.match(text)
    if m:
        text = m.group(1)
    try:
        return float(text)  # also nan, inf
    except ValueError:
        return None


def read_metric_log(path: str) -> list[tuple[int, dict[str, float]]]:
    """A verl JSONL file-logger file or a console log -> ``[(step, {metric: value})]``.

    Console lines may carry prefixes (Ray's ``(TaskRunner pid=...)``); other lines are ignored.
    A step seen twice merges its metrics (later values win).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ImportSourceError(f"{path}: no such file") from None
    except OSError as e:
        raise ImportSourceError(f"{path}: cannot read ({e.strerror})") from None
    by_step: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        line = line.rstrip()
        parsed = _jsonl_line(line) if line.startswith("{") else _console_line(line)
        if parsed is None:
            continue
        step, metrics = parsed
        by_step.setdefault(step, {}).update(metrics)
    if not by_step:
        raise ImportSourceError(f"{path} is not a verl metric log (no 'step:N - name:value' line and no "
                                "JSON line with 'step' and 'data')")
    return sorted(by_step.items())


def _jsonl_line(line: str) -> tuple[int, dict[str, float]] | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("data"), dict):
        return None
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return step, {k: float(v) if v is not None else math.nan for k, v in row["data"].items()
                  if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def _console_line(line: str) -> tuple[int, dict[str, float]] | None:
    m = _CONSOLE_STEP.search(line)
    if m is None:
        return None
    metrics = {}
    for part in (m.group(2) or "").split(" - "):
        name, sep, value = part.rpartition(":")
        x = _number(value) if sep else None
        if name and x is not None:
            metrics[name] = x
    return int(m.group(1)), metrics


ADAPTERS.register("verl")(Adapter(
    framework="verl", version="0.9.1", mappings=MAPPINGS, file_reader=read_metric_log,
    file_kind="a verl console or JSONL metric log",
))
