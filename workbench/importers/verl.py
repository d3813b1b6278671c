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
from collections.abc import Iterator

from workbench.metrics.names import (
    CLIP_FRAC,
    ENTROPY_MEAN,
    GRAD_NORM,
    KL_REF,
    LENGTH_MAX,
    LENGTH_MEAN,
    LENGTH_TRUNCATED_FRAC,
    LOSS_POLICY,
    MISMATCH_CHI2_SEQ,
    MISMATCH_CHI2_TOKEN,
    MISMATCH_ESS,
    MISMATCH_IS_RATIO_ABOVE_CAP_FRAC,
    MISMATCH_IS_RATIO_BELOW_CAP_FRAC,
    MISMATCH_IS_RATIO_STD,
    MISMATCH_IS_WEIGHT_MEAN,
    MISMATCH_KL,
    MISMATCH_KL_K1,
    MISMATCH_LEARNER_PPL,
    MISMATCH_LOG_PPL_DIFF,
    MISMATCH_PPL_RATIO,
    MISMATCH_SAMPLER_PPL,
    PERF_STEP_S,
    POLICY_APPROX_KL,
    REWARD_MEAN,
)

from .adapters import ADAPTERS, Adapter, MetricMapping
from .completions import MAX_STEP, Budget, CompletionRecord, Dump, completion_files, finite_number
from .errors import ImportSourceError
from .validate import BadLines, Point, metric_value, numbered_lines, step_number

METRIC_UTILS = "verl/trainer/ppo/metric_utils.py"
CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
ROLLOUT_CORR = "verl/trainer/ppo/rollout_corr_helper.py"

MAPPINGS = (
    MetricMapping(
        "critic/score/mean",
        REWARD_MEAN,
        f"{METRIC_UTILS} (compute_data_metrics)",
        caveat="the sequence score of the reward function, over non-aborted samples, before any "
        "KL-in-reward penalty (critic/rewards/mean is after it: kept as source)",
    ),
    MetricMapping(
        "actor/entropy",
        ENTROPY_MEAN,
        "verl/trainer/ppo/ray_trainer.py (agg_loss of entropys)",
        caveat="aggregated with the actor's loss_agg_mode: the canonical token mean only when "
        "loss_agg_mode = token-mean (verl's default)",
    ),
    MetricMapping("response_length/mean", LENGTH_MEAN, f"{METRIC_UTILS} (compute_data_metrics)"),
    MetricMapping("response_length/max", LENGTH_MAX, f"{METRIC_UTILS} (compute_data_metrics)"),
    MetricMapping(
        "response_length/clip_ratio",
        LENGTH_TRUNCATED_FRAC,
        f"{METRIC_UTILS} (compute_data_metrics)",
        caveat="the truncated fraction: response length == max_response_length (a response "
        "ending with EOS exactly at the limit counts as truncated), not a ratio clip",
    ),
    MetricMapping(
        "actor/pg_clipfrac",
        CLIP_FRAC,
        f"{CORE_ALGOS} (compute_policy_loss_vanilla)",
        caveat="tokens where the clipped surrogate is the larger loss (either side), averaged "
        "over micro-batches; no low/high split is logged",
    ),
    MetricMapping(
        "actor/pg_clipfrac_lower",
        None,
        f"{CORE_ALGOS} (compute_policy_loss_vanilla)",
        caveat="the dual-clip lower-bound fraction: advantage < 0 and the loss capped at "
        "-A*clip_ratio_c (ratio > clip_ratio_c, 3.0 by default), NOT the low-side clip "
        "fraction clip/frac_low (ratio < 1-eps with A < 0); kept as source/actor/pg_clipfrac_lower",
    ),
    MetricMapping("actor/ppo_kl", POLICY_APPROX_KL, f"{CORE_ALGOS} (masked_mean(-log ratio))"),
    MetricMapping("actor/pg_loss", LOSS_POLICY, "verl/workers/utils/losses.py (ppo_loss)"),
    MetricMapping(
        "actor/kl_loss",
        KL_REF,
        "verl/workers/utils/losses.py (ppo_loss: kl_loss; prefixed actor/ by ray_trainer._update_actor)",
        caveat="logged only with actor.use_kl_loss; the estimator is actor.kl_loss_type",
    ),
    MetricMapping(
        "actor/grad_norm",
        GRAD_NORM,
        "verl/workers/engine/base.py (grad_norm; prefixed actor/ by ray_trainer._update_actor)",
        caveat="before clipping, averaged over the step's optimizer steps",
    ),
    MetricMapping("perf/time_per_step", PERF_STEP_S, f"{METRIC_UTILS} (compute_throughout_metrics)"),
    # rollout_corr/*: the sampler/learner mismatch (learner = old_log_prob, before the update), whatever the
    # correction; the off-policy diagnostics are the definitions the workbench's own follow (parity-tested).
    *(
        MetricMapping(f"rollout_corr/{key}", name, f"{ROLLOUT_CORR} (compute_offpolicy_metrics)")
        for key, name in (
            ("kl", MISMATCH_KL_K1),
            ("k3_kl", MISMATCH_KL),
            ("training_ppl", MISMATCH_LEARNER_PPL),
            ("rollout_ppl", MISMATCH_SAMPLER_PPL),
            ("log_ppl_diff", MISMATCH_LOG_PPL_DIFF),
            ("ppl_ratio", MISMATCH_PPL_RATIO),
            ("chi2_token", MISMATCH_CHI2_TOKEN),
            ("chi2_seq", MISMATCH_CHI2_SEQ),
        )
    ),
    MetricMapping(
        "rollout_corr/rollout_is_mean",
        MISMATCH_IS_WEIGHT_MEAN,
        f"{ROLLOUT_CORR} (compute_is_metrics)",
        caveat="the mean applied (truncated) IS weight, logged only with rollout_is set; the raw ratio's "
        "mean (mismatch/is_ratio_mean) is not logged by verl",
    ),
    MetricMapping(
        "rollout_corr/rollout_is_ratio_fraction_high",
        MISMATCH_IS_RATIO_ABOVE_CAP_FRAC,
        f"{ROLLOUT_CORR} (compute_is_metrics)",
        caveat="raw ratios above rollout_is_threshold (token level; sequence level: of sequence weights)",
    ),
    MetricMapping(
        "rollout_corr/rollout_is_ratio_fraction_low",
        MISMATCH_IS_RATIO_BELOW_CAP_FRAC,
        f"{ROLLOUT_CORR} (compute_is_metrics)",
        caveat="below rollout_is_threshold_lower, 1/threshold unless set",
    ),
    MetricMapping(
        "rollout_corr/rollout_is_eff_sample_size",
        MISMATCH_ESS,
        f"{ROLLOUT_CORR} (compute_is_metrics)",
        caveat="of the applied weights clamped at the threshold: equal to the raw ratios' ESS when no "
        "weight reaches it, larger otherwise (verl's 0.3 band is stated on this one)",
    ),
    MetricMapping(
        "rollout_corr/rollout_is_std",
        MISMATCH_IS_RATIO_STD,
        f"{ROLLOUT_CORR} (compute_is_metrics)",
        caveat="of the weights clamped at the threshold: the raw std when no weight reaches it",
    ),
)

# LocalLogger prints numbers with pprint.pformat: numpy scalars appear as np.float64(0.5).
_CONSOLE_STEP = re.compile(r"(?:^|\s)step:(\d+)(?: - (.*))?$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def _number(text: str) -> float:
    text = text.strip()
    m = _NUMPY_SCALAR.match(text)
    if m:
        text = m.group(1)
    try:
        float(text)  # nan, inf and numbers; anything else is not a metric value
    except ValueError:
        raise ValueError(f"value {text[:40]!r} is not a number") from None
    return metric_value(text)  # refuses a finite-looking number beyond float range


def read_metric_log(path: str, bad: BadLines) -> Iterator[Point]:
    """A verl JSONL file-logger file or a console log -> ``(where, step, {metric: value})`` per line,
    streamed (:func:`~workbench.importers.validate.numbered_lines`).

    The format is the first record's: a JSON line with ``step`` and ``data`` makes it JSONL (then
    every non-empty line must be one), a ``step:N - name:value`` line a console log (then other
    lines are log chatter, ignored; Ray prefixes such as ``(TaskRunner pid=...)`` are allowed). A
    malformed record goes to ``bad`` (an error with the line number, or counted when skipping).
    """
    fmt = None
    undecided: list[tuple[int, str]] = []  # JSON-looking lines before the format is known (first few)
    undecided_count = 0
    for number, line in numbered_lines(path):
        line = line.rstrip()
        where = f"{path}:{number}"
        if not line:
            continue
        if fmt != "console" and line.startswith("{"):
            try:
                parsed = _jsonl_record(line)
            except ValueError as e:
                if fmt == "jsonl":
                    bad(number, str(e))
                else:
                    undecided_count += 1
                    if len(undecided) < 1:
                        undecided.append((number, str(e)))
                continue
            if fmt is None:
                fmt = "jsonl"
                for n, why in undecided:  # they were malformed JSON lines after all
                    bad(n, why)
                bad.count += undecided_count - len(undecided)
            yield (where, *parsed)
            continue
        m = _CONSOLE_STEP.search(line)
        if fmt == "jsonl":
            bad(number, "not a JSON line in a JSONL metric log")
            continue
        if m is None:
            continue  # console chatter
        fmt = "console"
        try:
            yield (where, *_console_record(m))
        except ValueError as e:
            bad(number, str(e))
    if fmt is None:
        raise ImportSourceError(
            f"{path} is not a verl metric log (no 'step:N - name:value' line and no JSON line with 'step' and 'data')"
        )


_DECODER = json.JSONDecoder()


def _json(line: str) -> object:
    """``json.loads(line)`` for a line that starts with ``{`` and ends without white space (as
    :func:`read_metric_log` hands them over), a third cheaper: the decoder's ``raw_decode`` without
    ``loads``' layers. A line it does not take whole goes to ``json.loads``, for its own error."""
    try:
        row, end = _DECODER.raw_decode(line)
    except ValueError:
        return json.loads(line)
    return row if end == len(line) else json.loads(line)


def _jsonl_record(line: str) -> tuple[int, dict[str, float]]:
    """One FileLogger line; ``ValueError`` saying what is wrong with it."""
    try:
        row = _json(line)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"invalid JSON ({getattr(e, 'msg', e)} at column {getattr(e, 'colno', '?')})") from None
    if not isinstance(row, dict) or not isinstance(row.get("data"), dict) or "step" not in row:
        raise ValueError("a JSON line without 'step' and a 'data' mapping")
    step = step_number(row["step"])
    metrics = {}
    for name, value in row["data"].items():
        if type(value) is float:  # nearly every value: kept as parsed (NaN and infinities too, as metric_value does)
            if math.isinf(value) and "Infinity" not in line:  # 1e400: json reads it as inf without a word
                raise ValueError(f"value of {name[:60]!r} is out of range (beyond a 64-bit float)")
            metrics[name] = value
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            metrics[name] = metric_value(value)  # strings, lists, booleans are not metrics: left out
    return step, metrics


def _console_record(m: re.Match[str]) -> tuple[int, dict[str, float]]:
    """One LocalLogger line; ``ValueError`` naming a value that is not a number."""
    step = step_number(int(m.group(1)))
    metrics = {}
    for part in (m.group(2) or "").split(" - "):
        name, sep, value = part.rpartition(":")
        if not sep or not name:
            raise ValueError(f"{part[:60]!r} is not name:value")
        metrics[name] = _number(value)
    return step, metrics


# --------------------------------------------------------------------------------------------
# Generations: trainer.rollout_data_dir (train) and trainer.validation_data_dir (eval)
# --------------------------------------------------------------------------------------------

#: ``RayPPOTrainer._write_generations`` (verl/trainer/ppo/ray_trainer.py): ``{dump_path}/{global_steps}.jsonl``,
#: one ``json.dumps(entry, ensure_ascii=False, default=str)`` per line with ``input``, ``output`` (decoded with
#: skip_special_tokens), ``gts``, ``score`` (token_level_scores summed), ``step`` and the reward function's
#: extra infos of the batch's length (``acc``, ``pred``, ``request_id``; validation adds ``reward`` = score).
_GENERATIONS_FILE = re.compile(r"(\d+)\.jsonl")
_RECORD_KEYS = ("input", "output", "gts", "score", "step")


def _answer(gts: object) -> str | None:
    if gts is None or isinstance(gts, str):
        return gts
    return json.dumps(gts, ensure_ascii=False, default=str)


def _correct(entry: dict) -> bool | None:
    """The reward function's ``acc`` (verl's math scorers return it) when it is a truth value, else unknown."""
    acc = entry.get("acc")
    if acc is None:
        return None
    if isinstance(acc, bool) or acc in (0, 1):
        return bool(acc)
    return None


def read_generations(directory: str, split: str, metrics_path: str) -> Dump:
    """Every ``N.jsonl`` of ``directory`` (``trainer.rollout_data_dir``: ``train``; ``trainer.validation_data_dir``:
    ``eval``). ``reward`` is verl's ``score``, ``answer`` its ``gts``, ``correct`` its ``acc`` where the reward
    function returned one (null otherwise); lengths, truncation and advantages are not in the dump (null/NaN)."""
    option = "trainer.rollout_data_dir" if split == "train" else "trainer.validation_data_dir"
    files = completion_files(directory, _GENERATIONS_FILE, f"verl generation dumps ({option})")
    records: list[CompletionRecord] = []
    budget = Budget()
    extra: set[str] = set()
    for _, path in files:
        for number, line in numbered_lines(str(path)):
            where = f"{path}:{number}"
            if not line.strip():
                continue
            try:
                entry = _json(line.rstrip())
            except RecursionError:
                raise ImportSourceError(f"{where}: JSON nested too deeply") from None
            except ValueError as e:
                raise ImportSourceError(f"{where}: invalid JSON ({getattr(e, 'msg', e)})") from None
            if not isinstance(entry, dict) or any(k not in entry for k in _RECORD_KEYS):
                raise ImportSourceError(f"{where}: not a verl generation record (needs {', '.join(_RECORD_KEYS)})")
            step = entry["step"]
            if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
                raise ImportSourceError(f"{where}: step {str(step)[:40]!r} is not a step number")
            if not isinstance(entry["input"], str) or not isinstance(entry["output"], str):
                raise ImportSourceError(f"{where}: input and output must be text")
            record = CompletionRecord(
                split=split,
                step=step,
                prompt=entry["input"],
                text=entry["output"],
                reward=finite_number(entry["score"], "score", where),
                answer=_answer(entry["gts"]),
                correct=_correct(entry),
            )
            budget.add(record, where)
            records.append(record)
            extra |= set(entry) - {*_RECORD_KEYS, "acc"}
    rules = [
        "reward = verl's score (token_level_scores summed)",
        "answer = gts",
        "correct = the reward function's acc where it returned one (else null)",
        "length, truncated, advantage: not in the dump",
    ]
    return Dump(records, [p for _, p in files], rules, extra)


ADAPTERS.register("verl")(
    Adapter(
        framework="verl",
        version="0.9.1",
        mappings=MAPPINGS,
        file_reader=read_metric_log,
        file_kind="a verl console or JSONL metric log",
        completions_reader=read_generations,
        completion_splits=("train", "eval"),
    )
)
