"""How big a study may be, known before anything is materialised.

A study's run count is variants x grid points x zip length x seeds; it is computed here by
arithmetic on the raw field lengths, before validation walks the lists or expansion builds a
config per run, and refused above ``WORKBENCH_MAX_RUNS`` (default :data:`DEFAULT_MAX_RUNS`) with
the count and its factors in the message. ``include:`` chains are bounded in depth
(:data:`MAX_INCLUDE_DEPTH`) and in the bytes of all their files together
(:data:`MAX_INCLUDE_TOTAL_BYTES`): each file is already at most 1 MiB, but a chain of them multiplies.
"""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = [
    "DEFAULT_MAX_RUNS",
    "MAX_INCLUDE_DEPTH",
    "MAX_INCLUDE_TOTAL_BYTES",
    "MAX_RUNS_ENV",
    "max_runs",
    "run_count_factors",
    "run_count_issue",
]

MAX_RUNS_ENV = "WORKBENCH_MAX_RUNS"
#: The shipped studies have a few dozen runs. Expanding validates one config per run (about 2 ms
#: each, twice: at load and at expand), so `plan` of 1,000 runs takes a few seconds; 10,000 took
#: 42 CPU-seconds and 560 MB (measured on this 2-core machine).
DEFAULT_MAX_RUNS = 1_000
MAX_INCLUDE_DEPTH = 16  # files in one include: chain, the top-level file included
MAX_INCLUDE_TOTAL_BYTES = 2 << 20  # all files of a chain together: parsing 1 MiB of YAML takes ~2 s here


def max_runs() -> int:
    """The run-count limit: ``$WORKBENCH_MAX_RUNS`` if set (a positive integer), else the default."""
    text = os.environ.get(MAX_RUNS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_RUNS
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_RUNS_ENV}={text[:40]!r}: expected a positive integer (the most runs a study may have)")
    return value


def _length(value: Any) -> int:
    """A field's number of entries as written; a wrongly typed field counts 1 (the schema reports it)."""
    return len(value) if isinstance(value, (list, dict)) else 1


def run_count_factors(data: dict[str, Any]) -> dict[str, int]:
    """``{"variants": n, "grid": points, "zip": length, "seeds": n}`` of a raw study mapping.

    An upper bound on the runs (``exclude:`` only removes some); O(number of fields), never
    walking a list. Missing fields take their defaults (one variant, no grid, seeds [0])."""
    variants = data.get("variants")
    grid = data.get("grid")
    zipped = data.get("zip")
    grid_points = math.prod(_length(v) for v in grid.values()) if isinstance(grid, dict) else 1
    zip_length = max((_length(v) for v in zipped.values()), default=1) if isinstance(zipped, dict) else 1
    return {
        "variants": _length(variants) if variants else 1,
        "grid": grid_points,
        "zip": zip_length,
        "seeds": _length(data["seeds"]) if data.get("seeds") is not None else 1,
    }


def run_count_issue(data: Any, limit: int | None = None) -> str | None:
    """Why a raw study mapping is too big to expand (one line, with the count), or None."""
    if not isinstance(data, dict):
        return None
    limit = max_runs() if limit is None else limit
    factors = run_count_factors(data)
    count = math.prod(factors.values())
    if count <= limit:
        return None
    shown = " x ".join(f"{n:,} {name}" for name, n in factors.items() if n != 1) or "1"
    return (
        f"the study expands to {count:,} runs ({shown}), over the limit of {limit:,}; "
        f"split it into smaller studies, or raise the limit with {MAX_RUNS_ENV}=N"
    )
