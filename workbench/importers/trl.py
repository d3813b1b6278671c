"""TRL (``GRPOTrainer``, TRL 1.16): metric mappings and the ``trainer_state.json`` reader.

Definitions read from ``trl/trainer/grpo_trainer.py`` (TRL 1.16.0): ``_generate_and_score_completions``
logs lengths, rewards and ``frac_reward_zero_std``; ``_compute_loss`` logs ``entropy``, ``kl``
and the ``clip_ratio/*`` fractions; ``GRPOTrainer.log`` averages each over the logging window.
``loss``, ``grad_norm``, ``learning_rate`` and ``epoch`` come from ``transformers.Trainer``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

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
from .completions import (
    MAX_IMPORTED_COMPLETIONS,
    MAX_STEP,
    Budget,
    CompletionRecord,
    Dump,
    completion_files,
    finite_number,
)
from .errors import ImportSourceError
from .validate import BadLines, Point, metric_value, regular_file_size, step_number

GRPO = "trl/trainer/grpo_trainer.py"
HF_TRAINER = "transformers/trainer.py (Trainer._maybe_log_save_evaluate)"

MAPPINGS = (
    MetricMapping("reward", REWARD_MEAN, f"{GRPO} (_generate_and_score_completions: nanmean of weighted rewards)"),
    MetricMapping(
        "reward_std",
        REWARD_STD,
        f"{GRPO} (nanstd over all completions of the batch)",
        caveat="Bessel-corrected std over the whole batch, unscorable completions excluded",
    ),
    MetricMapping(
        "frac_reward_zero_std",
        BATCH_ZERO_STD_FRAC,
        f"{GRPO} (is_std_zero per completion, mean)",
        caveat="a fraction of completions in zero-std groups; equals the fraction of groups "
        "because every group has num_generations completions",
    ),
    MetricMapping("entropy", ENTROPY_MEAN, f"{GRPO} (_compute_loss: global_masked_mean(entropies))"),
    MetricMapping("completions/mean_length", LENGTH_MEAN, f"{GRPO} (completion_mask.sum(1), mean)"),
    MetricMapping("completions/max_length", LENGTH_MAX, f"{GRPO} (completion_mask.sum(1), max)"),
    MetricMapping(
        "completions/clipped_ratio",
        LENGTH_TRUNCATED_FRAC,
        f"{GRPO} (last token neither EOS nor pad)",
        caveat="TRL calls it 'clipped'; it is the truncated fraction (no EOS within "
        "max_completion_length), not a ratio-clipping statistic",
    ),
    MetricMapping(
        "clip_ratio/low_mean",
        CLIP_FRAC_LOW,
        f"{GRPO} (_compute_loss: is_low_clipped)",
        caveat="region-based on the advantage sign: ratio < 1-epsilon_low and advantage < 0 "
        "(the canonical definition); logged only for loss_type grpo, bnpo, dr_grpo, "
        "dapo, luspo",
    ),
    MetricMapping(
        "clip_ratio/high_mean",
        CLIP_FRAC_HIGH,
        f"{GRPO} (_compute_loss: is_high_clipped)",
        caveat="ratio > 1+epsilon_high and advantage > 0; same loss types as clip_ratio/low_mean",
    ),
    MetricMapping(
        "clip_ratio/region_mean",
        CLIP_FRAC,
        f"{GRPO} (_compute_loss: is_region_clipped)",
        caveat="low or high region; same loss types as clip_ratio/low_mean",
    ),
    MetricMapping(
        "cispo_clip_ratio",
        None,
        f"{GRPO} (_compute_loss: is_cispo_clipped)",
        caveat="counts ratio > epsilon_high only where advantage > 0; the canonical CISPO "
        "clip/frac counts every truncated weight, so it is kept as source/cispo_clip_ratio",
    ),
    MetricMapping(
        "kl",
        KL_REF,
        f"{GRPO} (_compute_loss: per_token_kl, k3 to the reference model)",
        caveat="logged only when beta != 0",
    ),
    MetricMapping(
        "loss",
        LOSS_POLICY,
        HF_TRAINER,
        caveat="the total training loss (policy term + beta*KL - entropy bonus), averaged over "
        "the logging window; equals the policy loss when beta = 0 and no entropy bonus",
    ),
    MetricMapping("grad_norm", GRAD_NORM, HF_TRAINER, caveat="global norm before clipping, at the logging step"),
    MetricMapping("step_time", PERF_STEP_S, f"{GRPO} (training_step wall time)"),
    MetricMapping(
        "sampling/sampling_logp_difference/mean",
        MISMATCH_LOG_RATIO_ABS_MEAN,
        f"{GRPO} (_generate_and_score_completions: |old_per_token_logps − sampling_per_token_logps|)",
        caveat="logged with vllm_importance_sampling_correction; a mean of the processes' token means",
    ),
    MetricMapping(
        "sampling/sampling_logp_difference/max",
        MISMATCH_LOG_RATIO_ABS_MAX,
        f"{GRPO} (_generate_and_score_completions)",
        caveat="logged with vllm_importance_sampling_correction",
    ),
    MetricMapping(
        "sampling/importance_sampling_ratio/mean",
        MISMATCH_IS_WEIGHT_MEAN,
        f"{GRPO} (_generate_and_score_completions)",
        caveat="the applied (truncated or masked) IS weight, not the raw ratio",
    ),
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
        data = parse_json(
            read_bytes(path, limit=MAX_TRAINER_STATE_BYTES, what="TRL trainer state"), str(path), parse_float=_float
        )
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
            row = {
                key: metric_value(value)
                for key, value in entry.items()
                if key != "step"
                and (
                    value is None
                    or isinstance(value, _OutOfRange)
                    or (isinstance(value, (int, float)) and not isinstance(value, bool))
                )
            }
        except ValueError as e:
            bad(i, str(e), what="log_history entry")
            continue
        yield f"{path}: log_history[{i}]", step, row


# --------------------------------------------------------------------------------------------
# Completions: GRPOConfig(log_completions=True)
# --------------------------------------------------------------------------------------------

#: ``GRPOTrainer.log`` (log_completions): ``pd.DataFrame(table).to_parquet(f"{output_dir}/completions/
#: completions_{global_step:05d}.parquet")``, columns step, prompt, completion, one per reward function,
#: log_extra's, advantage; the rows are the last generation batch (a deque of generation_batch_size).
COMPLETIONS_DIR = "completions"
_COMPLETIONS_FILE = re.compile(r"completions_(\d+)\.parquet")
MAX_COMPLETIONS_FILE_BYTES = 256 << 20  # one logging step's generation batch: KBs to tens of MBs
_CHECKPOINT = re.compile(r"checkpoint-\d+")


def completions_beside(trainer_state: str) -> str | None:
    """The ``completions/`` directory GRPOTrainer writes in its ``output_dir``: beside the trainer state, or
    above it when the state is a checkpoint's (``output_dir/checkpoint-N/trainer_state.json``)."""
    here = Path(trainer_state).parent
    for folder in (here, here.parent) if _CHECKPOINT.fullmatch(here.name) else (here,):
        if (folder / COMPLETIONS_DIR).is_dir():
            return str(folder / COMPLETIONS_DIR)
    return None


def _text(value: Any, what: str, where: str) -> str:
    """A prompt or completion: a string, or a conversation (a list of ``{role, content}`` messages, the
    content a string or a list of parts whose ``text`` is read), rendered one ``role: content`` per message;
    a completion's messages give their content alone."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        lines = []
        for message in value:
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise ImportSourceError(f"{where}: a {what} message without text content")
            lines.append(content if what == "completion" else f"{message.get('role', '')}: {content}")
        return "\n".join(lines)
    raise ImportSourceError(f"{where}: {what} is neither text nor a list of messages")


def reward_names(keys: Iterable[str]) -> list[str]:
    """The reward functions' names in one TRL log entry's keys: TRL logs ``rewards/<name>/mean`` for each."""
    return [k[len("rewards/") : -len("/mean")] for k in keys if k.startswith("rewards/") and k.endswith("/mean")]


def _reward_names(trainer_state: str) -> list[str]:
    """The reward functions' names, from the ``rewards/<name>/mean`` metrics TRL logs for each."""
    names: dict[str, None] = {}
    for _, _, row in read_trainer_state(trainer_state, BadLines(trainer_state, skip=True)):
        names |= dict.fromkeys(reward_names(row))
    return list(names)


def read_completions(directory: str, split: str, metrics_path: str) -> Dump:
    """Every ``completions_NNNNN.parquet`` of ``directory`` (GRPOTrainer's ``output_dir/completions``).

    ``reward`` is the sum of the reward functions' columns (TRL's default ``reward_weights`` of 1; NaN where
    every function returned None), each also kept as ``reward.<name>``; ``advantage`` as logged; correctness,
    lengths and truncation are not in the file (null). Every row is ``train``: an evaluation writes the same
    file name, so a step's file holds whichever ran last."""
    if split != "train":
        raise ImportSourceError(
            f"{directory}: TRL's completion files do not say train or eval; give them with --rollouts"
        )
    files = completion_files(directory, _COMPLETIONS_FILE, "TRL completion files (log_completions=True)")
    known = _reward_names(metrics_path)
    records: list[CompletionRecord] = []
    budget = Budget()
    unused: set[str] = set()
    rewards: list[str] = []
    for _, path in files:
        read, rewards, ignored = read_completions_file(path, known, budget)
        records += read
        unused |= ignored
    return Dump(records, [p for _, p in files], completion_rules(rewards), unused)


def completions_file(directory: str | Path, global_step: int) -> Path:
    """The file ``GRPOTrainer.log`` writes at ``global_step`` with ``log_completions=True``."""
    return Path(directory) / f"completions_{global_step:05d}.parquet"


def completion_rules(rewards: list[str]) -> list[str]:
    """How a TRL completions file's columns become the rollouts' columns, in words (the manifest keeps them)."""
    summed = (
        f"reward = the reward function {rewards[0]!r}'s column"
        if len(rewards) == 1
        else "reward = the sum of the reward functions' columns (TRL's default reward_weights = 1; a run with "
        "other weights: read reward.<name>)"
    )
    return [
        summed,
        "every row is split train (TRL names eval completions alike)",
        "correct, length, truncated: not recorded by TRL (null)",
    ]


def read_completions_file(
    path: Path, known: list[str], budget: Budget
) -> tuple[list[CompletionRecord], list[str], set[str]]:
    """One ``completions_NNNNN.parquet`` -> its records (one per row, in file order), the reward functions'
    columns and the columns not imported. ``known``: the reward functions' names (``rewards/<name>/mean`` in
    TRL's logs); none known: every numeric column but ``step`` and ``advantage``. ``budget`` counts the run's
    rows and text (over its limit: :class:`ImportSourceError`, as is a file that is not TRL's)."""
    from workbench.safe_io import read_parquet  # deferred: pyarrow

    try:
        table = read_parquet(
            read_bytes(path, limit=MAX_COMPLETIONS_FILE_BYTES, what="TRL completions file"),
            str(path),
            max_rows=MAX_IMPORTED_COMPLETIONS,
        )
    except UserFileError as e:
        raise ImportSourceError(str(e)) from None
    columns = table.column_names
    missing = [c for c in ("step", "prompt", "completion", "advantage") if c not in columns]
    if missing:
        raise ImportSourceError(f"{path}: not a TRL completions file (no column {', '.join(missing)})")
    rewards = (
        [c for c in columns if c in known]
        if known
        else [c for c in columns if c not in ("step", "advantage") and _numeric(table.schema.field(c).type)]
    )
    if not rewards:
        raise ImportSourceError(
            f"{path}: no reward function column (the trainer state logs rewards for {', '.join(known) or 'none'})"
        )
    unused = set(columns) - {"step", "prompt", "completion", "advantage", *rewards}
    records: list[CompletionRecord] = []
    for i, row in enumerate(table.to_pylist()):
        where = f"{path}: row {i}"
        step = row["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            raise ImportSourceError(f"{where}: step {str(step)[:40]!r} is not a step number")
        terms = {name: finite_number(row[name], f"reward {name!r}", where) for name in rewards}
        finite = [v for v in terms.values() if not math.isnan(v)]
        record = CompletionRecord(
            split="train",
            step=step,
            prompt=_text(row["prompt"], "prompt", where),
            text=_text(row["completion"], "completion", where),
            reward=sum(finite) if finite else math.nan,
            terms=terms if len(terms) > 1 else {},
            advantage=finite_number(row["advantage"], "advantage", where),
        )
        budget.add(record, where)
        records.append(record)
    return records, rewards, unused


def _numeric(kind: Any) -> bool:
    import pyarrow as pa  # deferred: pyarrow

    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


ADAPTERS.register("trl")(
    Adapter(
        framework="trl",
        version="1.16.0",
        mappings=MAPPINGS,
        file_reader=read_trainer_state,
        file_kind="a TRL trainer_state.json",
        completions_reader=read_completions,
        completions_beside=completions_beside,
        completion_splits=("train",),
    )
)
