"""What happened to each run, per summary metric, and the one policy for runs that did not
finish or never reached a value.

Every run of an arm gets one **outcome** per metric:

* ``finished``: the run FINISHED, was not stopped early, and its summary is a finite number;
* ``failed``: the run did not finish (MLflow status FAILED, KILLED, or still RUNNING);
* ``stopped``: a health rule (or a pruner) stopped it early (tag ``workbench.stopped_early=true``):
  its curve is truncated, so its summary is not comparable with a whole run's;
* ``censored``: the run finished but its summary is ``inf``: it never got there (threshold never
  reached, nothing correct: see ``SummaryMetric.censored``);
* ``missing``: the run finished but logged nothing the summary needs (NaN).

The policy (``docs/reports.md``, "Runs that did not finish"): no run is dropped silently.

1. Every table row counts its runs per outcome (``n_runs``, ``n_finished``, ``n_failed``,
   ``n_stopped``, ``n_censored``, ``n_missing``), and every output shows them.
2. When both arms' runs are all ``finished``, the comparison is the t-test of
   :mod:`workbench.compare.stats` on their values.
3. Otherwise failed, stopped and censored runs are **ranked worst** (a failure, a collapse or
   never reaching the threshold is a bad outcome, not an absent one) and the test is Mann-Whitney's
   over all runs with a value or a worst rank (:func:`workbench.compare.stats.rank_test`; exact
   permutation p-values, ties handled). For time-to-threshold this is Gehan's generalisation of
   the Wilcoxon test when every run is censored at the same horizon. There is no t interval of
   Δ then (Δ is of the finished runs only, shown for information).
4. A verdict the t-test on the finished runs would give but the ranked test does not support is
   **withheld**, and says why in words ("withheld: 3/6 runs failed", "withheld: never reached
   0.5 in 4/6 runs"). An arm whose runs are all failed/stopped/censored gets no verdict either
   ("withheld: all 5 runs stopped early by entropy_collapse").
5. ``missing`` runs cannot be ranked (nothing says whether they were good or bad): they are
   counted and named in the note, and a better/worse verdict is withheld when an arm has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["OUTCOMES", "RANKED_WORST", "ArmOutcomes", "arm_outcomes", "run_outcomes"]

#: The outcomes, in the order outputs list them.
OUTCOMES: tuple[str, ...] = ("finished", "failed", "stopped", "censored", "missing")
#: Outcomes ranked worst by the comparison.
RANKED_WORST: frozenset[str] = frozenset({"failed", "stopped", "censored"})


def _stopped(frame: pd.DataFrame) -> np.ndarray:
    if "stopped_early" not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    col = frame["stopped_early"]
    return col.map(lambda v: v is True or str(v).lower() == "true").to_numpy(dtype=bool)


def run_outcomes(frame: pd.DataFrame, metric: str) -> np.ndarray:
    """One outcome (see module docstring) per row of a summary frame for ``metric``.

    Rows without a status (no ``status`` column: hand-built frames; an empty one: runs known only
    from the history) count as FINISHED; without ``stopped_early`` as not stopped.
    """
    values = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    status = (
        frame["status"].fillna("FINISHED").astype(str).str.upper().to_numpy()
        if "status" in frame.columns
        else np.full(len(frame), "FINISHED")
    )
    out = np.full(len(frame), "finished", dtype=object)
    out[np.isnan(values)] = "missing"
    out[np.isinf(values)] = "censored"
    out[_stopped(frame)] = "stopped"
    out[status != "FINISHED"] = "failed"
    return out


def _stop_rules(frame: pd.DataFrame) -> list[str]:
    """Rule names from ``health_reasons`` (``rule@step,...``) of stopped runs, most frequent first."""
    if "health_reasons" not in frame.columns:
        return []
    names: list[str] = []
    for text in frame["health_reasons"].dropna().astype(str):
        names += [r.split("@")[0] for r in text.split(",") if r.strip()]
    return list(pd.Series(names, dtype=object).value_counts().index) if names else []


@dataclass(frozen=True)
class ArmOutcomes:
    """One arm's runs for one metric: the finite values of its finished runs (``values``, with
    their ``seeds``), how many were ranked worst, and the counts per outcome."""

    values: np.ndarray
    seeds: list
    counts: Mapping[str, int]
    stop_rules: tuple[str, ...] = ()
    censored_as: str = ""

    @property
    def n_runs(self) -> int:
        return int(sum(self.counts.values()))

    @property
    def n_worst(self) -> int:
        return int(sum(self.counts[o] for o in RANKED_WORST))

    @property
    def complete(self) -> bool:
        """Every run finished with a value: the t-test applies."""
        return self.counts["finished"] == self.n_runs

    def reason(self) -> str:
        """Why this arm's runs could change a verdict, in words ("" when complete)."""
        n, parts = self.n_runs, []
        by = f" by {', '.join(self.stop_rules)}" if self.stop_rules else ""
        if n and self.counts["stopped"] == n:
            return f"all {n} runs stopped early{by}"
        if n and self.counts["failed"] == n:
            return f"all {n} runs failed"
        if self.counts["failed"]:
            parts.append(f"{self.counts['failed']}/{n} runs failed")
        if self.counts["stopped"]:
            parts.append(f"{self.counts['stopped']}/{n} runs stopped early{by}")
        if self.counts["censored"]:
            parts.append(f"{self.censored_as or 'no finite value'} in {self.counts['censored']}/{n} runs")
        if self.counts["missing"]:
            parts.append(f"no value in {self.counts['missing']}/{n} runs")
        return ", ".join(parts)

    def counts_phrase(self) -> str:
        """``"6 runs: 3 finished, 3 failed"`` (only outcomes that occur)."""
        rest = ", ".join(f"{self.counts[o]} {o}" for o in OUTCOMES if self.counts[o])
        return f"{self.n_runs} run{'s' if self.n_runs != 1 else ''}: {rest or 'none'}"


def arm_outcomes(frame: pd.DataFrame, metric: str, *, seed_col: str = "seed", censored_as: str = "") -> ArmOutcomes:
    """:class:`ArmOutcomes` of the rows of one arm."""
    outcome = run_outcomes(frame, metric)
    values = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    done = outcome == "finished"
    counts = {o: int((outcome == o).sum()) for o in OUTCOMES}
    stopped = frame[outcome == "stopped"]
    return ArmOutcomes(
        values=values[done],
        seeds=frame[seed_col].to_numpy()[done].tolist(),
        counts=counts,
        stop_rules=tuple(_stop_rules(stopped)),
        censored_as=censored_as,
    )
