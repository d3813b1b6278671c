"""Which runs: the runs of a study a command runs (``--only``), and those a comparison compares (one
outcome per run, in the study file's order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workbench.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd


def filter_specs(specs: Sequence[Any], only: str) -> list[Any]:
    """The run specs ``--only`` keeps: ``variant=dapo,seed=0,lr=1e-4`` (a grid key by its name); every
    pair must match. A part that is no ``key=value``: :class:`AnalysisError`."""
    wanted = {}
    for part in only.split(","):
        key, _, value = part.partition("=")
        if not value:
            raise AnalysisError(f"--only expects key=value pairs, got {part!r}")
        wanted[key.strip()] = value.strip()

    def keep(spec: Any) -> bool:
        values = {
            "variant": spec.variant,
            "seed": str(spec.seed),
            **{k: str(v) for k, v in spec.grid.items()},
            **({} if getattr(spec, "cold_start", None) is None else {"cold_start": str(spec.cold_start)}),
        }
        return all(values.get(k) == v for k, v in wanted.items())

    return [s for s in specs if keep(s)]


#: Statuses of runs that ended: all are compared (a FAILED or KILLED run is a result, ranked worst;
#: :mod:`workbench.compare.outcomes`). Runs still RUNNING (or SCHEDULED) are left out unless asked.
ENDED_STATUSES = ("FINISHED", "FAILED", "KILLED")

SUPERSEDED = "superseded by a re-run"


def select_runs(runs: pd.DataFrame, include_unfinished: bool) -> tuple[pd.DataFrame, dict[str, int]]:
    """One outcome per run: runs that ended (FINISHED, FAILED, KILLED: failures count against
    their arm), plus the still-running ones with ``include_unfinished``; and the count of the
    runs left out, by reason.

    A run (one ``run_key`` under one run name: a variant at one seed) executed more than once,
    e.g. stopped by hand and resumed, counts once: its FINISHED attempt if it has one, else its
    latest attempt. The earlier attempts are counted as superseded, not compared as failures of
    their arm.
    """
    keep = runs["status"].isin(ENDED_STATUSES) | include_unfinished
    excluded = {} if include_unfinished else runs.loc[~keep, "status"].value_counts().to_dict()
    runs = runs[keep]
    if "run_key" in runs.columns and runs["run_key"].notna().any():
        keyed = runs[runs["run_key"].notna()]
        order = keyed.assign(
            _finished=keyed["status"].eq("FINISHED"), _start=keyed["start_time"] if "start_time" in keyed.columns else 0
        )
        attempts_of = ["run_key", "run_name"] if "run_name" in keyed.columns else ["run_key"]
        latest = order.sort_values(["_finished", "_start"]).groupby(attempts_of, dropna=False).tail(1).index
        superseded = keyed.index.difference(latest)
        if len(superseded):
            excluded[SUPERSEDED] = len(superseded)
            runs = runs.drop(index=superseded)
    return runs.reset_index(drop=True), excluded


def in_study_order(runs: pd.DataFrame, variants_order: Sequence[str]) -> pd.DataFrame:
    """Runs ordered by variant (the study file's order, then the others as loaded), then arm (as
    loaded: the reader orders arms by their first run), then seed."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.compare.arms import arm_column  # deferred: pandas

    variants = list(pd.unique(runs["variant"]))
    ordered = [v for v in variants_order if v in variants] + [v for v in variants if v not in variants_order]
    arms = arm_column(runs)
    return (
        runs.assign(
            _o=runs["variant"].map({v: i for i, v in enumerate(ordered)}),
            _a=arms.map({a: i for i, a in enumerate(pd.unique(arms))}),
        )
        .sort_values(["_o", "_a", "seed"], kind="stable")
        .drop(columns=["_o", "_a"])
        .reset_index(drop=True)
    )


def labelled_by_arm(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with ``variant`` replaced by the arm, for ``health_cells``, which labels a run
    ``<variant>/seed=N``: with a grid that label is not unique, ``<arm>/seed=N`` (the run name) is."""
    from workbench.compare.arms import arm_column  # deferred: pandas

    return runs.assign(variant=arm_column(runs))
