"""The planned seeds of ``workbench plan STUDY``: per compared metric, the seeds per arm for 80% power
at the study's ``compare.sesoi`` (:mod:`workbench.compare.planning`).

The noise SD (of a run's value across seeds) is ``compare.noise_sd`` when declared; otherwise it
is measured on the finished runs of the baseline variant already in the study's store (a pilot:
run the baseline with a few seeds first), and the output says which runs it came from. Nothing is
planned without a SESOI or an SD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.analysis.comparison import comparison_metrics, secondary_metrics, smallest_effects
from workbench.analysis.selection import select_runs
from workbench.results.reader import StudyReader
from workbench.study.expand import arm_of_label
from workbench.tracking.redact import redact_uri
from workbench.tracking.store import sqlite_file

if TYPE_CHECKING:
    from workbench.compare.planning import SeedPlan

__all__ = ["MetricSeedPlan", "seed_plan"]

MIN_PILOT_RUNS = 3  # an SD from 2 runs has 1 degree of freedom: too noisy to plan on


@dataclass(frozen=True)
class MetricSeedPlan:
    """The planned seeds of one compared metric, and whether the study declares it secondary."""

    plan: SeedPlan
    secondary: bool
    pedigree: dict[str, Any] | None = None  # compare.sesoi_pedigree of the metric (phenomenon, published, ...)

    def as_dict(self) -> dict[str, Any]:
        """As ``workbench plan --format json`` shows it: the plan's fields, ``secondary``, ``sesoi_pedigree``."""
        return self.plan.as_dict() | {"secondary": self.secondary, "sesoi_pedigree": self.pedigree}


def seed_plan(study: Any, specs: list, uri: str, experiment: str, where: str) -> list[MetricSeedPlan]:
    """The seed plan of ``study`` (expanded into ``specs``, read from ``where``), one per compared
    metric. A bad ``compare.sesoi``: :class:`workbench.errors.AnalysisError`."""
    from workbench.compare.planning import comparisons_per_metric, plan_seeds  # deferred: scipy

    compare = dict(study.compare or {})
    metrics = comparison_metrics(None, compare)
    sesoi = smallest_effects(compare, None, where)
    baseline = compare.get("baseline") or next(iter(study.variants))
    arms = list(dict.fromkeys((s.variant, arm_of_label(s.label)) for s in specs))
    m = comparisons_per_metric(arms, baseline)
    declared = {k: (float(v), "declared in compare.noise_sd") for k, v in (compare.get("noise_sd") or {}).items()}
    wanted = [x for x in metrics if x in sesoi and x not in declared]
    measured = _pilot_sd(uri, experiment, baseline, wanted) if wanted else {}
    last_look_alpha, cap = None, len(study.seeds)
    if compare.get("sequential") is not None:  # tested at the last look's α, up to its seeds (#52)
        from workbench.compare.sequential import design_from_settings  # deferred: scipy

        try:
            design = design_from_settings(compare.get("sequential"))
        except ValueError:
            design = None  # `plan` reports a bad design elsewhere; plan as without one
        if design is not None:
            last_look_alpha, cap = float(design.look_alpha[-1]), int(design.looks[-1])
    secondary = set(secondary_metrics(metrics, compare))
    # Holm's families as compare forms them (#52): every primary metric's comparisons together, each secondary
    # metric on its own; the first step of a family tests at alpha over its size
    primary = [x for x in metrics if x not in secondary]
    sds = {**measured, **declared}
    by_metric = {
        p.metric: p
        for p in plan_seeds(
            primary,
            sesoi,
            sds,
            comparisons=m * len(primary),
            seeds_in_study=len(study.seeds),
            last_look_alpha=last_look_alpha,
            cap=cap,
        )
    }
    by_metric |= {
        p.metric: p
        for p in plan_seeds(
            [x for x in metrics if x in secondary],
            sesoi,
            sds,
            comparisons=m,
            seeds_in_study=len(study.seeds),
            last_look_alpha=last_look_alpha,
            cap=cap,
        )
    }
    plans = [by_metric[x] for x in metrics]
    from workbench.compare.summary import summary_name  # deferred: scipy

    pedigree = {summary_name(m): dict(e) for m, e in (compare.get("sesoi_pedigree") or {}).items()}
    return [MetricSeedPlan(p, p.metric in secondary, pedigree.get(p.metric)) for p in plans]


def _pilot_sd(uri: str, experiment: str, baseline: str, metrics: list[str]) -> dict[str, tuple[float, str]]:
    """SD across seeds of each metric over the FINISHED runs of the baseline variant in the store
    (pooled within its arms when it has a grid); none when the store or the runs do not exist."""
    from workbench.compare import resolve_summary, summarize_runs  # deferred: scipy
    from workbench.compare.arms import arm_column  # deferred: scipy

    if uri.startswith("sqlite:///") and not sqlite_file(uri).exists():
        return {}
    reader = StudyReader(uri)
    if not reader.has_study(experiment):
        return {}
    frames = reader.load(experiment, sorted({r for x in metrics for r in resolve_summary(x).reads}))
    runs, _ = select_runs(frames.runs, include_unfinished=False)
    runs = runs[(runs["variant"] == baseline) & (runs["status"] == "FINISHED")]
    if len(runs) < MIN_PILOT_RUNS:
        return {}
    summary = summarize_runs(frames.history[frames.history["run_id"].isin(set(runs["run_id"]))], runs, metrics)
    arms = arm_column(summary).to_numpy()
    out = {}
    for x in metrics:
        values = summary[x].to_numpy(dtype=float)
        ok = np.isfinite(values)
        groups = [values[ok & (arms == a)] for a in dict.fromkeys(arms[ok])]
        dof = sum(g.size - 1 for g in groups if g.size >= 2)
        if ok.sum() < MIN_PILOT_RUNS or dof < 2:
            continue
        pooled = sum(((g - g.mean()) ** 2).sum() for g in groups if g.size >= 2) / dof
        out[x] = (float(np.sqrt(pooled)), f"measured on {int(ok.sum())} finished {baseline} runs in {redact_uri(uri)}")
    return out
