"""Run artifacts that other parts read back, with their format: written by the run
(:mod:`workbench.execution.run`), read by :class:`workbench.results.reader.StudyReader`.

``eval/problems.csv.gz``: one row per eval step and held-out problem, long format, gzip-compressed
CSV with a header: ``step`` (the RL step of the eval), ``problem_id`` (stable across seeds and arms
scored on the same eval set: :func:`workbench.train.evaluate.problem_ids`), ``correct``,
``truncated`` (0/1) and ``length`` (response tokens).

``mismatch.json``: a JSON list, one object per recorded step (``health.mismatch_record_every``): ``step``,
``edges`` (log-ratio bin edges, nats; the first and last bins are open), ``counts`` (response tokens per
bin, one more than the edges), ``tokens`` and ``worst_tokens`` (``sequence``, ``position``, ``token_id``,
``learner_logp``, ``sampler_logp``, ``log_ratio``, largest |log_ratio| first):
:func:`workbench.metrics.mismatch.mismatch_record`.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Mapping, Sequence

import pandas as pd

PROBLEMS_ARTIFACT = "eval/problems.csv.gz"
MISMATCH_ARTIFACT = "mismatch.json"
PROBLEM_COLUMNS: tuple[str, ...] = ("step", "problem_id", "correct", "length", "truncated")
PROBLEM_DTYPES = {"step": "int64", "problem_id": "string", "correct": "int8", "length": "int64",
                  "truncated": "int8"}


def encode_problem_rows(columns: Mapping[str, Sequence]) -> bytes:
    """The artifact's bytes from equal-length columns :data:`PROBLEM_COLUMNS` (``mtime=0``: the same
    rows always give the same bytes)."""
    text = io.StringIO()
    text.write(",".join(PROBLEM_COLUMNS) + "\n")
    for row in zip(*(columns[name] for name in PROBLEM_COLUMNS), strict=True):
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
    return frame[list(PROBLEM_COLUMNS)].astype(PROBLEM_DTYPES)


def empty_problem_rows() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in PROBLEM_DTYPES.items()})
