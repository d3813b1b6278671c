"""``workbench run STUDY --until-decided [--max-seeds N]``: seeds in rounds, every comparison decided
at planned looks by a group-sequential design (:mod:`workbench.compare.sequential`).

One round per look: the runs of the arms still needed at the look's seeds (the study's declared
seeds, then ``max + 1, + 2, ...``: :func:`workbench.execution.study.seed_schedule`) are executed
(those FINISHED earlier are skipped, so running again resumes: every look is re-derived from the
store, in order, on the same runs); then every comparison is decided on the first ``n_k`` seeds of
every arm, in ``compare``'s Holm families (one study-wide family of the primary metrics' comparisons,
each secondary metric its own, exploratory: :func:`decide_metrics`). The design and every look (seeds, alpha spent, decisions) are recorded
on the study's parent MLflow run as ``sequential.json`` (tag ``workbench.sequential``: the one-line
phrase), and the decisions are printed and logged there as ``sequential.log``.

What ``compare`` makes of the record: :mod:`workbench.analysis.looks`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from workbench.analysis.looks import (
    DESIGN_TAG,
    FIRST_LOOK_TAG,
    LOG,
    RECORD,
    Look,
    LookDecision,
    SequentialRecord,
    read_record,
)
from workbench.analysis.metric_roles import comparison_metrics, secondary_metrics
from workbench.analysis.selection import select_runs
from workbench.errors import AnalysisError, UserFileError
from workbench.tracking.store import sqlite_file


@dataclass
class Plan:
    """What a sequential run of one study compares: its metrics, baseline, arms and their baselines."""

    metrics: list[str]
    baseline: str
    arm_variant: dict[str, str]  # every arm of the study -> its variant
    baseline_of: dict[str, str | None]  # arm -> the arm it is compared with (itself for a baseline arm)
    status: dict[tuple[str, str], str] = field(default_factory=dict)  # (metric, arm) -> "" while open
    sesoi: dict[str, Any] = field(default_factory=dict)  # compare.sesoi: metric -> smallest effect of interest
    activity: dict[str, Any] = field(default_factory=dict)  # compare.activity, parsed: variant -> its gate setting
    secondary: list[str] = field(default_factory=list)  # metrics not in compare.primary: decided if the data allow
    futility: str = "improvement"  # compare.sequential.futility: the side a futility stop excludes
    # the Holm families (compare.sequential.FAMILIES): "primary", one study-wide family of the primary metrics'
    # comparisons (each secondary metric its own, exploratory); "metric" only to replay a record taken so
    family: str = "primary"

    @property
    def compared(self) -> list[str]:
        return [a for a, b in self.baseline_of.items() if b is not None and b != a]

    @property
    def primary(self) -> list[str]:
        return [m for m in self.metrics if m not in self.secondary]

    def open_arms(self, metric: str | None = None) -> list[str]:
        return [a for a in self.compared if any(self.status[m, a] == "" for m in self.metrics if metric in (None, m))]

    def needed_arms(self) -> set[str]:
        """Arms with an open comparison on a primary metric, and their baselines: secondary metrics
        get no seeds of their own."""
        arms = {a for m in self.primary for a in self.open_arms(m)}
        return arms | {self.baseline_of[a] for a in arms}

    def done(self) -> bool:
        """Every primary comparison has stopped (a secondary one still open then ends with the study)."""
        return all(s != "" for (m, _), s in self.status.items() if m not in self.secondary)


# --------------------------------------------------------------------------------------------
# The rounds
# --------------------------------------------------------------------------------------------


def run_until_decided(
    study,
    *,
    max_seeds: int | None,
    select: Callable[[list], list] | None,
    progress: bool,
    parallel: int,
    say: Callable[[str], None] = lambda line: None,
    ray=None,
    export_to=None,
    export_rollouts: bool = True,
    reuse: bool = True,
) -> list:
    """Run ``study`` look by look until every comparison is decided or the last look; returns the
    outcomes of every run executed or skipped. ``select``: the ``--only`` filter of the runs.
    ``export_to``: the study's export, written after each run and again after each look's record
    (without the runs' stored completions if ``export_rollouts`` is False).
    ``reuse``: runs FINISHED in another study of the store are copied (counted at a look like computed ones).
    ``say``: receives the design's line, then each look's lines, as they are decided.
    A bad design, or one that differs from the design recorded when the study was first run this way:
    :class:`AnalysisError` with one line."""
    from workbench.compare.arms import match_baselines  # deferred: scipy
    from workbench.compare.sequential import design_from_settings, futility_side  # deferred: scipy
    from workbench.execution.study import (  # deferred: pydantic, torch, transformers
        StudyExportHook,
        arm_of,
        round_specs,
        run_study,
        seed_schedule,
        study_tracking_uri,
        with_seeds,
    )
    from workbench.study import StudyError, expand  # deferred: pydantic

    where = study.source or study.name
    compare_cfg = dict(study.compare or {})
    try:
        design = design_from_settings(compare_cfg.get("sequential"), max_seeds=max_seeds)
        futility = futility_side(compare_cfg.get("sequential"))
        metrics = comparison_metrics(None, compare_cfg)
    except ValueError as e:
        raise AnalysisError(f"{where}: {e}") from e
    seeds = seed_schedule(list(study.seeds), design.looks[-1])
    extended = with_seeds(study, seeds)
    try:
        all_specs = expand(extended)
    except StudyError as e:
        raise AnalysisError(str(e)) from e
    if select is not None:
        all_specs = select(all_specs)
    arm_variant = {arm_of(s): s.variant for s in all_specs}
    baseline = compare_cfg.get("baseline") or next(iter(study.variants))
    try:
        baseline_of = match_baselines(arm_variant, baseline)
    except ValueError as e:
        raise AnalysisError(f"{where}: compare.baseline: {e}") from e
    sesoi = compare_cfg.get("sesoi") if isinstance(compare_cfg.get("sesoi"), dict) else {}
    from workbench.compare.activity import parse_settings  # deferred: scipy

    try:
        activity = parse_settings(compare_cfg, list(study.variants))
    except ValueError as e:
        raise AnalysisError(f"{where}: {e}") from e
    plan = Plan(
        metrics,
        baseline,
        arm_variant,
        baseline_of,
        sesoi=sesoi,
        activity=activity,
        secondary=secondary_metrics(metrics, compare_cfg),
        futility=futility,
    )
    if not plan.compared:
        raise AnalysisError(
            f"{where}: --until-decided needs at least one variant to compare with the baseline {baseline!r}"
        )
    plan.status = {(m, a): "" for m in metrics for a in plan.compared}
    uri = study_tracking_uri(all_specs)
    record = _new_record(design, plan, list(study.seeds), seeds)
    record.arms = sorted(arm_variant)
    record.amendments = list((compare_cfg.get("sequential") or {}).get("amendments") or [])
    record.rebuilt = _check_recorded_design(uri, extended, all_specs, record, where)

    outcomes: dict[str, Any] = {}
    roles = (
        f"primary metrics {', '.join(plan.primary)}; secondary {', '.join(plan.secondary)}"
        if plan.secondary
        else f"metrics {', '.join(metrics)}"
    )
    lines: list[str] = [
        f"sequential design: {design.phrase()}; {roles}; baseline {baseline}"
        + ("" if futility == "improvement" else f"; futility stops: {futility}")
    ]
    say(lines[0])
    if record.rebuilt:
        lines.append(f"note: {record.rebuilt}")
        say(lines[-1])
    for k, n in enumerate(design.looks):
        todo = round_specs(all_specs, seeds[:n], plan.needed_arms())
        for o in run_study(
            extended,
            todo,
            progress=progress,
            parallel=parallel,
            ray=ray,
            export_to=export_to,
            export_rollouts=export_rollouts,
            reuse=reuse,
        ):
            outcomes[o.run_key] = o
        if any(getattr(o, "tracking_lost", False) for o in outcomes.values()):
            break  # MLflow is gone: no look can be read; running again resumes
        look = decide_look(uri, _experiment(extended, all_specs), plan, design, k, seeds[:n])
        record.looks.append(look)
        lines += _look_lines(look, design, plan.secondary)
        for line in _look_lines(look, design, plan.secondary):
            say(line)
        _save_record(uri, extended, all_specs, record, lines, n_seeds=seeds[:n])
        if export_to is not None:  # the look's record (sequential.json) is part of the export
            StudyExportHook(uri, _experiment(extended, all_specs), export_to, rollouts=export_rollouts)()
        if plan.done():
            break
    return list(outcomes.values())


def decide_look(uri: str, experiment: str, plan: Plan, design, k: int, seeds: list[int]) -> Look:
    """Read the study's runs at ``seeds`` from the store, decide every open comparison at look ``k``
    (updating ``plan.status``) and return the look's record."""
    from workbench.compare import summarize_runs  # deferred: scipy
    from workbench.compare.arms import arm_column  # deferred: scipy
    from workbench.results.reader import StudyReader  # deferred: mlflow, sqlalchemy

    reader = StudyReader(uri)
    from workbench.compare import resolve_summary  # deferred: scipy

    needed = sorted({m for name in plan.metrics for m in resolve_summary(name).reads})
    frames = reader.load(experiment, needed)
    runs, _ = select_runs(frames.runs, include_unfinished=False)
    runs = runs[runs["seed"].isin(seeds)].reset_index(drop=True)
    runs = runs.assign(arm=arm_column(runs))
    history = frames.history[frames.history["run_id"].isin(set(runs["run_id"]))]
    summary = summarize_runs(history, runs, plan.metrics)
    gates = _activity_gates(reader, experiment, runs, history, plan)
    levels, decisions = decide_metrics(summary, plan, design, k, gates)
    decided = {d.metric for d in decisions}
    levels = {m: level for m, level in levels.items() if m in decided}
    spent = float(design.cumulative_alpha[k])
    return Look(
        look=k + 1,
        seeds=len(seeds),
        seed_list=list(seeds),
        alpha=float(design.look_alpha[k]),
        alpha_spent=spent,
        levels=levels,
        decisions=decisions,
        time=int(time.time() * 1000),
    )


def _activity_gates(reader, experiment: str, runs: pd.DataFrame, history: pd.DataFrame, plan: Plan) -> dict[str, Any]:
    """Each compared arm's knob-activity gate, as ``compare`` builds it: a knob that barely acted
    makes its comparisons "not testable", which stops them at this look."""
    from workbench.compare.activity import activity_gates  # deferred: scipy

    return activity_gates(
        runs,
        history,
        plan.baseline,
        plan.activity,
        read_more=lambda metrics: reader.load(experiment, metrics, run_ids=runs["run_id"].tolist()).history,
    )


def decide_metrics(
    summary: pd.DataFrame, plan: Plan, design, k: int, gates: dict[str, Any] | None = None
) -> tuple[dict[str, float], list[LookDecision]]:
    """Decide the open comparisons of every metric at look ``k`` in the plan's Holm families
    (:func:`~workbench.compare.sequential.family_of`: one study-wide family of every primary metric's
    comparisons, each secondary metric its own, exploratory): per metric, the compare machinery at
    :meth:`Design.compare_level` on its open arms and their baselines, then
    :func:`~workbench.compare.sequential.decide_families` over all of them. Returns the level passed
    to compare per metric with an open comparison, and one record per comparison decided or still
    open at this look (metrics in the plan's order, arms in its order)."""
    levels, out, _ = _decide_metrics(summary, plan, design, k, gates)
    return levels, out


def _decide_metrics(
    summary: pd.DataFrame, plan: Plan, design, k: int, gates: dict[str, Any] | None = None
) -> tuple[dict[str, float], list[LookDecision], dict[tuple[str, str], dict]]:
    """:func:`decide_metrics`, with compare's row of each comparison open at the look ((metric, arm) -> row)."""
    from workbench.compare import CompareSettings, compare_variants  # deferred: scipy
    from workbench.compare.sequential import (  # deferred: scipy
        REJECTED,
        decide_families,
        family_of,
        futility_confidence,
    )

    arms = plan.compared
    cells = [(m, a) for m in plan.metrics for a in arms]
    family = {m: family_of(m, plan.secondary, plan.family) for m in plan.metrics}
    before = {c: plan.status[c] for c in cells}
    # the family's size at this look: its comparisons not yet rejected (a rejected one has left it)
    n_family: dict[str, int] = {}
    for (m, _), s in before.items():
        n_family[family[m]] = n_family.get(family[m], 0) + (s not in REJECTED)
    levels: dict[str, float] = {}
    rows: dict[tuple[str, str], dict] = {}
    inputs: dict[tuple[str, str], tuple[float, str, str, bool, tuple[float, float]]] = {}
    for metric in plan.metrics:
        open_arms = [a for a in arms if before[metric, a] == ""]
        if not open_arms:
            continue
        level = design.compare_level(k, len(open_arms), n_family[family[metric]])
        keep = set(open_arms) | {plan.baseline_of[a] for a in open_arms}
        sub = summary[summary["arm"].isin(keep)].reset_index(drop=True)
        sesoi = _sesoi(plan, metric)
        # with a SESOI, "equivalent" (TOST at the same level) stops a comparison too; an arm that stopped at an
        # earlier look (a secondary question outlives it) is paired with its baseline on their common seeds
        settings = CompareSettings(
            confidence=1.0 - level,
            sesoi={metric: sesoi} if sesoi is not None else None,
            pairing="paired",
        )
        table = compare_variants(sub, plan.baseline, [metric], settings, activity=gates)
        by_arm = {r["variant"]: r for r in table.df.to_dict("records")}
        levels[metric] = level
        for a in open_arms:
            inputs[metric, a] = look_inputs(
                by_arm.get(a),
                sub,
                plan.baseline_of[a],
                metric,
                sesoi=sesoi,
                confidence=futility_confidence(design),
                side=plan.futility,
            )
            if a in by_arm:
                # the one-sided bounds the futility decision compared with the SESOI (what a futile verdict prints)
                rows[metric, a] = {
                    **by_arm[a],
                    FUTILITY_BOUNDS: inputs[metric, a][4],
                    FUTILITY_LEVEL: futility_confidence(design),
                }
    none = (math.nan, "", "", False, (math.nan, math.nan))  # a closed comparison: decide_families keeps its status
    ins = [inputs.get(c, none) for c in cells]
    after = decide_families(
        design,
        k,
        [family[m] for m, _ in cells],
        [before[c] for c in cells],
        [x[0] for x in ins],
        [x[1] for x in ins],
        [x[2] for x in ins],
        [x[3] for x in ins],
    ).tolist()
    out = []
    for c, s in zip(cells, after, strict=True):
        plan.status[c] = s
        row = rows.get(c)
        if before[c] == "" and row is not None:
            out.append(
                LookDecision(
                    metric=c[0],
                    arm=c[1],
                    status=s or "open",
                    p_value=_num(row["p_value"]),
                    delta=_num(row["delta"]),
                    n_seeds=int(row["n_seeds"]),
                    verdict=str(row["verdict"]),
                )
            )
    return levels, out, rows


def look_inputs(
    row: dict[str, Any] | None,
    summary: pd.DataFrame,
    base_arm: str | None,
    metric: str,
    *,
    sesoi: float | None,
    confidence: float,
    side: str = "improvement",
) -> tuple[float, str, str, bool, tuple[float, float]]:
    """``(p_value, rejection, compare status, futility, bounds)`` of one compared row for
    :func:`~workbench.compare.sequential.decide_family` (a closed comparison: no row). ``bounds``: the
    one-sided ``confidence`` bounds ``(lower, upper)`` of the difference (arm - baseline, the metric's units)
    that the futility decision compared with ``sesoi``, on the side(s) it asked about (NaN on a side it did
    not ask about, or without a futility test): ``futility`` is exactly "each asked bound lies strictly inside
    the SESOI on its side" (the lower one above ``-sesoi``, the upper one below ``+sesoi``:
    :func:`~workbench.compare.sequential.futility_bound`), so a futile verdict that prints them never
    contradicts itself."""
    from workbench.compare import stats  # deferred: scipy
    from workbench.compare.sequential import futile, futility_bound, rejection_name, row_status  # deferred: scipy

    no_bounds = (math.nan, math.nan)
    if row is None:
        return math.nan, "", "", False, no_bounds
    hib = row["higher_is_better"]
    by_rank = str(row["test"]).startswith("Mann-Whitney")
    if by_rank:  # the rank test decides in the direction of P(improvement) (in the metric's direction)
        rejection = "better" if row["p_improve"] > 0.5 else "worse"
    else:
        rejection = rejection_name(row["delta"], hib)
    futility = False
    bounds = [math.nan, math.nan]
    if sesoi is not None and hib is not None and not by_rank and base_arm is not None and side != "none":
        x = summary[summary["arm"] == row["variant"]]
        y = summary[summary["arm"] == base_arm]
        diff = stats.mean_difference(x[metric], y[metric], x_seeds=x["seed"], y_seeds=y["seed"], pairing="paired")
        better = 1.0 if hib else -1.0
        # the sides whose SESOI-sized effect must be excluded: both for "do they differ?", each at the
        # same one-sided confidence (a true effect of the SESOI on either side is stopped <= 5% over the looks)
        signs = {"improvement": (better,), "worsening": (-better,), "difference": (better, -better)}[side]
        futility = all(
            bool(futile(diff.delta, diff.se, diff.df, sesoi=sesoi, improvement_sign=sign, confidence=confidence))
            for sign in signs
        )
        for sign in signs:  # +1: the difference's upper bound (index 1), -1: its lower bound (index 0)
            bound = futility_bound(diff.delta, diff.se, diff.df, improvement_sign=sign, confidence=confidence)
            bounds[int(sign > 0)] = float(bound)
    return _num(row["p_value"]), rejection, row_status(row), futility, (bounds[0], bounds[1])


def _sesoi(plan: Plan, metric: str) -> float | None:
    """The metric's smallest effect of interest (``compare.sesoi``), if declared."""
    value = plan.sesoi.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _look_lines(look: Look, design, secondary: list[str]) -> list[str]:
    head = (
        f"look {look.look} of {len(design.looks)}: {look.seeds} seeds, α {look.alpha:.2g} at this look "
        f"(spent {look.alpha_spent:.2g} of {design.alpha:g})"
    )
    out = [head]
    for d in look.decisions:
        p = "—" if d.p_value is None else f"{d.p_value:.3g}"
        role = " (secondary, exploratory)" if d.metric in secondary else ""
        out.append(f"  {d.metric}{role}  {d.arm}: {d.status} (p = {p}; compare: {d.verdict})")
    return out


# --------------------------------------------------------------------------------------------
# The design's verdicts, as compare reports them (issue 52: one verdict per sequential question)
# --------------------------------------------------------------------------------------------


UNRUN = "unrun"  # a replayed question whose next look's seeds its arms never ran
#: Keys of a look's compared row (:func:`decide_metrics`) that hold the one-sided bounds ``(lower, upper)`` of
#: the difference the futility decision compared with the SESOI (NaN on a side it did not ask about) and
#: their confidence (:func:`~workbench.compare.sequential.futility_confidence`): what a futile verdict prints.
FUTILITY_BOUNDS = "futility_bounds"
FUTILITY_LEVEL = "futility_level"


@dataclass(frozen=True)
class DesignVerdict:
    """The decision a sequential design took on one question (metric x arm), the look it took it at,
    and compare's row at that look (its difference, interval, level and seeds: paired on the look's
    common seeds, as the look tested it)."""

    metric: str
    arm: str
    status: str  # better | worse | higher | lower | equivalent | futile | not testable | inconclusive | open
    look: int  # 1-based: the look the question stopped at (the last look taken while it is open)
    n_looks: int  # the design's looks
    row: dict[str, Any]  # compare's row at that look
    recorded: str | None  # the status sequential.json holds for it (None: the record has no decision on it)
    sesoi: float | None  # the SESOI it was decided with (the study's now)
    primary: bool = True  # a primary question (an open secondary one ends with the study)
    next_seeds: int | None = None  # seeds per arm of the design's next look (None after its last)
    unrun: str = ""  # why a look the question needed could not be taken: its arms lack the look's seeds
    futility: str = "improvement"  # the side a futility stop excludes (compare.sequential.futility)


def design_verdicts(
    record: dict[str, Any],
    summary: pd.DataFrame,
    compare_cfg: dict[str, Any],
    effects: dict[str, float],
    gates_at: Callable[[list[int]], dict[str, Any] | None] | None = None,
    family: str = "primary",
) -> dict[tuple[str, str], DesignVerdict]:
    """Each question's decision, replayed look by look from ``summary`` (one row per compared run: the
    study's runs, all seeds) on the seeds every recorded look used, with the recorded design, metrics,
    primary metrics, baseline and futility side, and the SESOIs ``effects`` the study declares now
    (:func:`decide_metrics`, the code that takes the decisions), in the Holm families ``family``
    (:data:`~workbench.compare.sequential.FAMILIES`; ``primary``, the study-wide family, is the rule now).
    With the SESOIs and the family the record was taken with, the replay is the record; a SESOI or family
    changed since (a re-decision: records before issue 52 hold per-metric families) is said in
    :attr:`DesignVerdict.recorded`. ``gates_at(seeds)``: the activity gates of the runs at those seeds
    (None: no gates). Metrics of the record not in ``summary`` are left out."""
    from workbench.compare.arms import arm_column, match_baselines  # deferred: scipy
    from workbench.compare.sequential import Design  # deferred: scipy

    if not record.get("looks"):
        return {}
    design = Design.from_dict(record["design"])
    summary = summary.assign(arm=arm_column(summary).to_numpy())
    arm_variant = dict(zip(summary["arm"].astype(str), summary["variant"].astype(str), strict=True))
    metrics = [m for m in record["metrics"] if m in summary.columns]
    try:
        baseline_of = match_baselines(arm_variant, record["baseline"])
    except ValueError as e:
        raise AnalysisError(f"{RECORD}: baseline {record['baseline']!r}: {e}") from e
    plan = Plan(
        metrics,
        record["baseline"],
        arm_variant,
        baseline_of,
        sesoi=dict(effects),
        secondary=[m for m in metrics if m not in record.get("primary", record["metrics"])],
        futility=str(record.get("futility") or "improvement"),
        family=family,
    )
    plan.status = {(m, a): "" for m in metrics for a in plan.compared}
    recorded: dict[tuple[str, str], str] = {}
    last_row: dict[tuple[str, str], tuple[int, dict]] = {}
    have = {a: {int(x) for x in summary.loc[summary["arm"] == a, "seed"].dropna()} for a in arm_variant}
    unrun: dict[tuple[str, str], str] = {}
    for k, look in enumerate(record["looks"]):
        seeds = [int(s) for s in look["seed_list"]]
        sub = summary[summary["seed"].isin(seeds)].reset_index(drop=True)
        gates = gates_at(seeds) if gates_at is not None else None
        # a primary question re-opened by a new SESOI may need seeds its arm never ran (a secondary one gets no
        # seeds of its own: it is tested on those its arms have, as the run tested it)
        for metric in plan.primary:
            for a in plan.compared:
                short = [b for b in (a, baseline_of[a]) if b is not None and not set(seeds) <= have[b]]
                if plan.status[metric, a] == "" and short:
                    plan.status[metric, a] = UNRUN  # closed for the replay: it counts in Holm's m, never rejects
                    unrun[metric, a] = f"look {k + 1} needs {len(seeds)} seeds per arm; " + ", ".join(
                        f"{b} has {len(have[b] & set(seeds))}" for b in short
                    )
        _, _, rows = _decide_metrics(sub, plan, design, k, gates)
        for (metric, arm), row in rows.items():
            last_row[metric, arm] = (k + 1, row)
        for d in look["decisions"]:
            recorded[d["metric"], d["arm"]] = str(d["status"])
    out = {}
    for (metric, arm), (look, row) in last_row.items():
        status = plan.status[metric, arm]
        out[metric, arm] = DesignVerdict(
            metric,
            arm,
            "open" if status in ("", UNRUN) else status,
            look,
            len(design.looks),
            row,
            recorded.get((metric, arm)),
            _sesoi(plan, metric),
            primary=metric not in plan.secondary,
            next_seeds=int(design.looks[look]) if look < len(design.looks) else None,
            unrun=unrun.get((metric, arm), ""),
            futility=plan.futility,
        )
    return out


# --------------------------------------------------------------------------------------------
# The record on the parent run
# --------------------------------------------------------------------------------------------


def _new_record(design, plan: Plan, declared: list[int], seeds: list[int]) -> SequentialRecord:
    # futility is recorded, not checked against an earlier record: a non-binding stop never spends α
    return SequentialRecord(
        design=design.to_dict(),
        metrics=plan.metrics,
        primary=plan.primary,
        baseline=plan.baseline,
        family=plan.family,
        futility=plan.futility,
        declared_seeds=declared,
        seeds=seeds,
    )


def _parent(uri: str, experiment: str, *, create: bool):
    from mlflow import MlflowClient

    from workbench.tracking.store import ensure_store, get_or_create_experiment  # deferred: mlflow

    client = MlflowClient(uri)
    if create:
        ensure_store(uri)
        eid = get_or_create_experiment(client, experiment, uri)
    else:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return client, None
        eid = exp.experiment_id
    found = client.search_runs(
        [eid], "tags.`workbench.role` = 'study'", max_results=1, order_by=["attributes.start_time ASC"]
    )
    return client, (found[0] if found else None)


def _experiment(study, specs) -> str:
    return (specs[0].config.tracking.experiment if specs else None) or study.name


def _check_recorded_design(uri: str, study, specs, record: SequentialRecord, where: str) -> str:
    """:class:`AnalysisError` when the study was run sequentially before with another design, metrics or
    baseline (changing them after a look would make its p-values invalid again), or with other arms
    and no new ``compare.sequential.amendments`` entry declaring the change. Returns why the record is
    rebuilt ("" normally): a damaged ``sequential.json`` is rebuilt from the store's runs, each look
    decided again from them, and the design it held cannot be compared with this one (said so)."""
    if uri.startswith("sqlite:///") and not sqlite_file(uri).exists():
        return ""
    client, parent = _parent(uri, _experiment(study, specs), create=False)
    try:
        old = read_record(client, parent)
    except UserFileError as e:
        return (
            f"{RECORD} on the study's parent run could not be read ({e}); it is rebuilt from the store's runs, "
            "each look decided again from them, but the design it held cannot be compared with this one"
        )
    if old is None:
        return ""
    new = record.to_dict()
    for key in ("design", "metrics", "primary", "baseline"):
        if old.get(key, old.get("metrics") if key == "primary" else None) != new[key]:  # before compare.primary: all
            raise AnalysisError(
                f"{where}: this study was run with --until-decided with {key} {old.get(key)}; "
                f"{new[key]} would change the sequential design after looking (start a new study)"
            )
    old_arms, old_amendments = old.get("arms"), list(old.get("amendments") or [])
    if old_arms is not None and sorted(old_arms) != new["arms"] and len(new["amendments"]) <= len(old_amendments):
        added = sorted(set(new["arms"]) - set(old_arms))
        removed = sorted(set(old_arms) - set(new["arms"]))
        change = "; ".join(
            part
            for part in (
                f"added {', '.join(added)}" if added else "",
                f"removed {', '.join(removed)}" if removed else "",
            )
            if part
        )
        raise AnalysisError(
            f"{where}: the compared arms changed after a look ({change}): declare it under "
            "compare.sequential.amendments (what changed and why; the record keeps it), or start "
            "a new study"
        )
    return ""


def _save_record(uri: str, study, specs, record: SequentialRecord, lines: list[str], *, n_seeds: list[int]) -> None:
    from workbench.compare.sequential import Design  # deferred: scipy

    client, parent = _parent(uri, _experiment(study, specs), create=True)
    if parent is None:  # the round ran no run (all finished earlier) and the study has no parent yet
        return
    run_id = parent.info.run_id
    design = Design.from_dict(record.design)
    client.log_text(run_id, json.dumps(record.to_dict(), indent=2), RECORD)
    client.log_text(run_id, "\n".join(lines) + "\n", LOG)
    client.set_tag(run_id, DESIGN_TAG, design.phrase(len(record.looks)))
    if FIRST_LOOK_TAG not in parent.data.tags:
        client.set_tag(
            run_id,
            FIRST_LOOK_TAG,
            json.dumps({"seeds": sorted(n_seeds), "time": int(time.time() * 1000), "by": "run --until-decided"}),
        )


#: Columns of a compared row that the design's decision replaces with its look's (the rest, e.g. the arm's
#: mean over all its seeds, stay the table's).
DESIGN_COLUMNS = (
    "delta",
    "delta_lo",
    "delta_hi",
    "delta_level",
    "delta_ci",
    "paired",
    "p_value",
    "p_adjusted",
    "mde",
    "p_equivalence",
    "test",
)


def apply_design_verdicts(table: Any, verdicts: dict[tuple[str, str], DesignVerdict]) -> int:
    """Make each compared row of ``table`` (a ComparisonTable of a sequential study's runs) say its
    design's decision: status, verdict "<status> at look k of K", and the look's difference, interval,
    level and test (paired on the look's seeds); the table's own test on all seeds (the re-test, at the
    last look's level, unpaired where arms stopped at different looks) goes to the row's note, labelled as
    such. Returns the number of rows replaced."""
    from workbench.compare.sequential import row_status  # deferred: scipy
    from workbench.compare.stats import COMMON_SEEDS  # deferred: scipy
    from workbench.compare.wording import futile_text, level_percent  # deferred: scipy

    df = table.df
    done = 0
    looks: dict[str, dict[str, str]] = {}  # metric -> arm -> the look that decided it
    futile_of: dict[str, dict[str, dict[str, Any]]] = {}  # metric -> arm -> a futile decision's bounds
    for i in df.index:
        row = df.loc[i]
        v = verdicts.get((str(row["metric"]), str(row["variant"])))
        if v is None or row["status"] == "baseline":
            continue
        look = v.row
        paired = _is_true(look.get("paired"))
        p = row["p_value"]
        note = str(row["note"]) if isinstance(row["note"], str) else ""
        # compare pairs a sequential study's arms on their common seeds: an arm stopped at an earlier look has fewer
        common = f" on their {int(row['n_seeds'])} common seeds" if COMMON_SEEDS in note else ""
        # an inconclusive verdict already says "6 paired seeds (the baseline has 9; ...)": the count is said once
        said_paired = bool(common) and f"{int(row['n_seeds'])} paired " in str(row["verdict"])
        pairing = "unpaired" if not _is_true(row["paired"]) else "" if said_paired else "paired" + common
        retest = (
            f"re-test on all seeds (not the design's decision): {row['verdict']}"
            + (f", {pairing}" if pairing else "")
            + (f", p = {p:.3g}" if isinstance(p, float) and math.isfinite(p) else "")
            + (
                f", {level_percent(float(row['delta_level']))} CI {row['delta_lo']:.4g} to {row['delta_hi']:.4g}"
                if math.isfinite(float(row["delta_level"])) and math.isfinite(float(row["delta_lo"]))
                else ""
            )
        )
        if (
            v.status in ("better", "worse", "higher", "lower", "equivalent", "inconclusive", "not testable")
            and row_status(look) == v.status
        ):
            said = str(look["verdict"])  # compare's words at the look (e.g. "better (but |Δ| < 0.1)")
        elif v.status == "futile" and v.sesoi is not None:
            # the bound(s) that decided, as the decision computed them: strictly inside the SESOI on the asked side(s)
            bounds = [_num(b) for b in look.get(FUTILITY_BOUNDS, (math.nan, math.nan))]
            futility = {
                "side": v.futility,
                "sesoi": v.sesoi,
                "bounds": bounds,
                "level": float(look.get(FUTILITY_LEVEL, math.nan)),
            }
            said = futile_text(**futility)
            if any(b is not None for b in bounds):  # the headline says them in its own units (points)
                futile_of.setdefault(str(row["metric"]), {})[str(row["variant"])] = futility
        elif v.status == "open" and not v.primary:
            said = "open (the design stopped when its primary questions were decided)"
        elif v.status == "open" and v.unrun:  # re-decided at a new SESOI: its arm had stopped earlier
            said = f"open (undecided: {v.unrun}: not run)"
        elif v.status == "open":  # re-decided at a new SESOI: the design would go on; its next look was never run
            said = f"open (undecided: the design's next look, {v.next_seeds} seeds per arm, was not run)"
        else:
            said = v.status
        # a look pairs on the common seeds (an arm that stopped earlier has fewer): only the rank test is unpaired
        verdict = f"{said} at look {v.look} of {v.n_looks}, {int(look['n_seeds'])} seeds " + (
            "paired" if paired else "unpaired (the rank test decided: some runs did not finish)"
        )
        if v.recorded is not None and v.recorded != v.status:
            verdict += (
                f" (re-decided with the study's SESOIs and rules now; {RECORD} holds {v.recorded}, decided with "
                "those of its run)"
            )
        for column in DESIGN_COLUMNS:
            if column in look and column in df.columns:
                df.at[i, column] = look[column]
        df.at[i, "n_seeds"] = int(look["n_seeds"])
        df.at[i, "status"] = v.status
        df.at[i, "verdict"] = verdict
        note = "; ".join(n for n in note.split("; ") if n != COMMON_SEEDS)  # said in the re-test's words
        df.at[i, "note"] = f"{note}; {retest}" if note else retest
        looks.setdefault(str(row["metric"]), {})[str(row["variant"])] = f"look {v.look} of {v.n_looks}"
        done += 1
    if looks:  # the headlines name the look of each decision (ComparisonTable.headlines)
        table.settings["design_looks"] = looks
    if futile_of:
        table.settings["design_futility"] = futile_of
    return done


def _is_true(value: Any) -> bool:
    """A table cell that may be a bool, a numpy bool, NA or NaN: whether it is true."""
    try:
        return bool(value) and value == value and value is not pd.NA
    except TypeError:  # pd.NA in a boolean context
        return False
