"""Panel data of the mismatch record (dashboard panels of ``kind: mismatch_record``): per run, the
histogram of the sampler/learner token log-ratio Δ = log π_learner − log π_sampler at the run's first and
last recorded steps, and its worst tokens (largest |Δ|) at the last one, from the runs' ``mismatch.json``
(:meth:`workbench.results.reader.StudyReader.mismatch_records`; format in
:mod:`workbench.tracking.artifacts`).

Why the first and the last recorded step, overlaid, one pair per run: the question a researcher brings to
this record is whether sampler and learner drift apart as training goes on (stale weights, a precision
mismatch that grows as the policy sharpens, a broken weight sync after a resume). One pair of lines on the
same axes shows both the bulk moving and a tail appearing at once; small multiples of every recorded step
would have to be compared across panels, and the step-by-step trend is already on the ``mismatch/*``
curves. Per run, never pooled: a pooled histogram hides the one seed whose sampler went off. The y value
is the share of the step's response tokens in each bin (the count is kept beside it), so steps with
different numbers of tokens compare.

    from workbench.compare.mismatch_panel import mismatch_panel

    panel = mismatch_panel(runs, reader.mismatch_records(runs).records)
    panel.histograms   # run_id, arm, seed, step, which (first/last/only), bin, lo, hi, count, tokens, share
    panel.worst        # run_id, step, rank, sequence, position, token_id, token, learner_logp, sampler_logp, log_ratio
    panel.missing      # run_id -> NO_RECORD, or why its artifact could not be read

Pure pandas: no plotting, no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .arms import arm_column

__all__ = ["HISTOGRAM_COLUMNS", "NO_RECORD", "WORST_COLUMNS", "MismatchPanel", "mismatch_panel"]

NO_RECORD = "no mismatch record (health.mismatch_record_every = 0 or an imported run)"
HISTOGRAM_COLUMNS: tuple[str, ...] = (
    "run_id",
    "arm",
    "seed",
    "step",
    "which",
    "bin",
    "lo",
    "hi",
    "count",
    "tokens",
    "share",
)
WORST_COLUMNS: tuple[str, ...] = (
    "run_id",
    "step",
    "rank",
    "sequence",
    "position",
    "token_id",
    "token",
    "learner_logp",
    "sampler_logp",
    "log_ratio",
)


@dataclass
class MismatchPanel:
    """What a ``mismatch_record`` panel shows (module docstring)."""

    histograms: pd.DataFrame  # HISTOGRAM_COLUMNS: one row per run, drawn step and bin
    worst: pd.DataFrame  # WORST_COLUMNS: the last recorded step's worst tokens of each run, largest |Δ| first
    missing: dict[str, str]  # run_id -> what the panel says instead of its record
    edges: list[float]  # the bin edges (nats) the x axis is labelled with: the first recorded run's
    problems: list[str] = field(default_factory=list)  # e.g. runs whose bins differ from ``edges``


def mismatch_panel(
    runs: pd.DataFrame,
    records: Mapping[str, list[dict[str, Any]]],
    unreadable: Mapping[str, str] | None = None,
    decoders: Mapping[str, Callable[[int], str] | None] | None = None,
) -> MismatchPanel:
    """The panel data of ``runs`` (a ``runs`` frame: ``run_id``, ``variant``, ``seed``, ``arm`` where the study
    has a grid) from their ``records`` (run_id -> records in step order). ``unreadable``: run_id -> why its
    artifact could not be read; ``decoders``: run_id -> token id to text, where the run's tokenizer is at
    hand (:func:`workbench.models.tokenizer.token_decoder`); without one the token's text is None and its id
    is what is shown. Every run of ``runs`` is either drawn or in ``missing``: none is dropped silently."""
    unreadable, decoders = unreadable or {}, decoders or {}
    hist_rows: list[dict[str, Any]] = []
    worst_rows: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    edges: list[float] | None = None
    problems: list[str] = []
    arms = arm_column(runs) if len(runs) else pd.Series([], dtype=object)
    for rid, arm, seed in zip(runs["run_id"], arms, runs["seed"], strict=True):
        recs = records.get(rid)
        if not recs:
            missing[rid] = f"unreadable mismatch record: {unreadable[rid]}" if rid in unreadable else NO_RECORD
            continue
        first, last = recs[0], recs[-1]
        if edges is None:
            edges = list(last["edges"])
        elif list(last["edges"]) != edges or list(first["edges"]) != edges:
            problems.append(f"run {rid}: its histogram bins differ from the first run's; drawn by bin number")
        drawn = [("only", last)] if len(recs) == 1 else [("first", first), ("last", last)]
        for which, rec in drawn:
            hist_rows += _histogram_rows(rec, run_id=rid, arm=arm, seed=seed, which=which)
        decode = decoders.get(rid)
        for rank, w in enumerate(last["worst_tokens"], start=1):
            worst_rows.append(
                {
                    "run_id": rid,
                    "step": last["step"],
                    "rank": rank,
                    **{k: w[k] for k in ("sequence", "position", "token_id")},
                    "token": None if decode is None else decode(int(w["token_id"])),
                    **{k: w[k] for k in ("learner_logp", "sampler_logp", "log_ratio")},
                }
            )
    return MismatchPanel(
        pd.DataFrame(hist_rows, columns=list(HISTOGRAM_COLUMNS)),
        pd.DataFrame(worst_rows, columns=list(WORST_COLUMNS)),
        missing,
        edges or [],
        problems,
    )


def _histogram_rows(record: dict[str, Any], **keys: Any) -> list[dict[str, Any]]:
    """One row per bin of a record: its bounds (the first and last bins are open: ±inf), count and share
    of the step's response tokens (NaN for a step with none)."""
    bounds = [-math.inf, *record["edges"], math.inf]
    tokens = record["tokens"]
    return [
        {
            **keys,
            "step": record["step"],
            "bin": k,
            "lo": bounds[k],
            "hi": bounds[k + 1],
            "count": count,
            "tokens": tokens,
            "share": count / tokens if tokens else math.nan,
        }
        for k, count in enumerate(record["counts"])
    ]
