"""Run artifacts that other parts read back, with their format: written by the run
(:mod:`workbench.execution.run`), read by :class:`workbench.results.reader.StudyReader`.

``eval/problems.csv.gz``: one row per eval step and held-out problem, long format, gzip-compressed
CSV with a header: ``step`` (the RL step of the eval), ``problem_id`` (stable across seeds and arms
scored on the same eval set: :func:`workbench.train.evaluate.problem_ids`), ``correct``,
``truncated`` (0/1) and ``length`` (response tokens). With ``rollout.eval_samples`` n > 1 these describe
each problem's first sampled answer, and two more columns follow: ``samples`` (n) and ``n_correct`` (how
many of the n answers were judged correct, the c of the unbiased pass@k: :mod:`workbench.metrics.passk`).
A run with one answer per problem writes the five columns only (the same bytes as before the two existed).

``adapter/`` (LoRA runs, ``learner.lora``): the trained adapters as ``peft``'s ``save_pretrained`` writes them,
``adapter_config.json`` and ``adapter_model.safetensors`` (kilobytes to megabytes: the adapters only). Load
them onto the run's base model with ``PeftModel.from_pretrained`` (the base loaded from ``base_dir``, then
``adapter_dir``), where ``base_dir`` is ``model.path`` or the tiny model's cache directory.

``mismatch.json``: a JSON list, one object per recorded step (``health.mismatch_record_every``): ``step``,
``edges`` (log-ratio bin edges, nats; the first and last bins are open), ``counts`` (response tokens per
bin, one more than the edges), ``tokens`` and ``worst_tokens`` (``sequence``, ``position``, ``token_id``,
``learner_logp``, ``sampler_logp``, ``log_ratio``, largest |log_ratio| first):
:func:`workbench.metrics.mismatch.mismatch_record`.
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

PROBLEMS_ARTIFACT = "eval/problems.csv.gz"
ADAPTER_ARTIFACT = "adapter"  # a LoRA run's adapters: peft's save_pretrained files (see the module docstring)
MISMATCH_ARTIFACT = "mismatch.json"
PROBLEM_COLUMNS: tuple[str, ...] = ("step", "problem_id", "correct", "length", "truncated")
PROBLEM_DTYPES = {"step": "int64", "problem_id": "string", "correct": "int8", "length": "int64", "truncated": "int8"}
PASS_AT_K_COLUMNS: tuple[str, ...] = ("samples", "n_correct")  # only when rollout.eval_samples > 1
WORST_TOKEN_FIELDS: tuple[str, ...] = ("sequence", "position", "token_id", "learner_logp", "sampler_logp", "log_ratio")


def encode_problem_rows(columns: Mapping[str, Sequence]) -> bytes:
    """The artifact's bytes from equal-length columns :data:`PROBLEM_COLUMNS`, then those of
    :data:`PASS_AT_K_COLUMNS` that ``columns`` holds non-empty (``mtime=0``: the same rows always give the
    same bytes)."""
    names = [*PROBLEM_COLUMNS, *(c for c in PASS_AT_K_COLUMNS if columns.get(c))]
    text = io.StringIO()
    text.write(",".join(names) + "\n")
    for row in zip(*(columns[name] for name in names), strict=True):
        text.write(",".join(map(str, row)) + "\n")
    return gzip.compress(text.getvalue().encode(), mtime=0)


def decode_problem_rows(data: bytes) -> pd.DataFrame:
    """The artifact as a frame with columns :data:`PROBLEM_COLUMNS` and :data:`PROBLEM_DTYPES`;
    ``ValueError`` if it is not one."""
    try:
        frame = pd.read_csv(io.BytesIO(data), compression="gzip", dtype={"problem_id": str})
    except (OSError, EOFError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise ValueError(f"{PROBLEMS_ARTIFACT} is not a gzip-compressed CSV: {error}") from None
    missing = [c for c in PROBLEM_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{PROBLEMS_ARTIFACT} lacks columns {missing} (has {list(frame.columns)})")
    extra = [c for c in PASS_AT_K_COLUMNS if c in frame.columns]
    return frame[[*PROBLEM_COLUMNS, *extra]].astype(PROBLEM_DTYPES | dict.fromkeys(extra, "int64"))


def empty_problem_rows() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in PROBLEM_DTYPES.items()})


def decode_mismatch_records(data: Any) -> list[dict[str, Any]]:
    """``mismatch.json`` (parsed JSON) as its records in step order, each checked against the format above;
    ``ValueError`` with one line naming the first record and field that is not."""
    if not isinstance(data, list):
        raise ValueError(f"{MISMATCH_ARTIFACT} is not a list of records (got {type(data).__name__})")
    for i, record in enumerate(data):
        _check_mismatch_record(record, f"{MISMATCH_ARTIFACT} record {i}")
    return sorted(data, key=lambda record: record["step"])


def _check_mismatch_record(record: Any, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where} is not an object")
    missing = [k for k in ("step", "edges", "counts", "tokens", "worst_tokens") if k not in record]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    edges, counts = record["edges"], record["counts"]
    if not isinstance(record["step"], int) or not isinstance(record["tokens"], int):
        raise ValueError(f"{where}: step and tokens must be integers")
    if not (isinstance(edges, list) and all(isinstance(e, (int, float)) and math.isfinite(e) for e in edges)):
        raise ValueError(f"{where}: edges must be a list of finite numbers")
    if not (
        isinstance(counts, list)
        and len(counts) == len(edges) + 1
        and all(isinstance(c, int) and c >= 0 for c in counts)
    ):
        raise ValueError(f"{where}: counts must be {len(edges) + 1} non-negative integers (one more than the edges)")
    if sum(counts) != record["tokens"]:
        raise ValueError(f"{where}: counts sum to {sum(counts)}, not its {record['tokens']} tokens")
    worst = record["worst_tokens"]
    if not isinstance(worst, list) or not all(
        isinstance(w, dict) and all(k in w for k in WORST_TOKEN_FIELDS) for w in worst
    ):
        raise ValueError(f"{where}: worst_tokens must be objects with {', '.join(WORST_TOKEN_FIELDS)}")
