"""Deciding which arm wins: variant-vs-baseline comparison of per-run summaries, giving a tidy, ranked
table (:class:`~workbench.compare.table.ComparisonTable`) of estimates, CIs, P(improvement), corrected
tests and verdicts. Pure data (no plotting, MLflow or terminal styling); the table renders itself, the
CLI and ``viz`` draw it.

The units compared are **arms**, one per (variant, grid point) (:mod:`workbench.compare.arms`):
with an ``arm`` column in the summary (the reader provides it) each arm is compared with the
baseline variant's arm at the same grid point; without a grid (or without the column) an arm is
a variant and everything below reads "variant".

    table = compare_variants(summary, baseline="grpo",
                             metrics=["final_eval_accuracy", "final_length_ratio"],
                             settings=CompareSettings(higher_is_better={"final_length_ratio": False}))
    print(table.to_markdown())

The statistical choices are documented in :mod:`workbench.compare.stats`.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import activity as _activity
from . import arms as _arms
from . import checkpoints as _checkpoints
from . import outcomes as _outcomes
from . import problems as _problems
from . import stats, wording
from .summary import resolve_summary
from .table import COLUMNS, ComparisonTable, value_bounds

__all__ = ["FAMILIES", "INTERVAL_OF", "TOST_INTERVAL", "CompareSettings", "compare_variants"]

#: What a row's interval of Δ is (its ``delta_ci``), by the correction that tested it: the level the
#: row's own test used, so that the interval excludes 0 exactly when the corrected test rejects.
INTERVAL_OF = {"holm": "Holm step-down", "bonferroni": "Bonferroni", "none": "uncorrected"}
#: The families a table can correct over (``CompareSettings.family``): "primary" (default), every comparison
#: of every primary metric together (one study-wide family), each secondary metric its own; "metric", each
#: metric's comparisons; "all", the whole table.
FAMILIES = ("primary", "metric", "all")
#: ``delta_ci`` beside "equivalent": the TOST's ``1 - 2 alpha / d`` interval, inside ±SESOI exactly when it rejects.
TOST_INTERVAL = "TOST"


@dataclass(frozen=True)
class CompareSettings:
    """How :func:`compare_variants` compares: which columns hold what, the level and the correction, the
    resampling, and the smallest effects of interest. The defaults are ``workbench compare``'s."""

    higher_is_better: Mapping[str, bool | None] | None = None  # metric -> direction; else its summary's
    variant_col: str = "variant"
    arm_col: str | None = _arms.ARM_COLUMN  # None, or a column the frame lacks: every variant is one arm
    seed_col: str = "seed"
    # a run's cold start: when it varies within an arm, the checkpoint is the unit (compare/checkpoints.py)
    checkpoint_col: str | None = _checkpoints.CHECKPOINT_COLUMN
    strata: str | None = None  # a column to stratify the IQM's BCa bootstrap by
    confidence: float = 0.95
    correction: str = "holm"  # holm | bonferroni | none (stats.CORRECTIONS)
    family: str = "primary"  # corrected together: "primary" (study-wide over primaries), each "metric"'s, or "all"
    secondary: Sequence[str] = ()  # metrics outside the primary family: each its own family, labelled exploratory
    pairing: str = "auto"  # auto: paired by seed when the seeds match (stats.mean_difference)
    n_resamples: int = stats.DEFAULT_RESAMPLES  # 0: no bootstrap (simulations)
    power: float = 0.8  # of the minimum detectable effect
    sesoi: Mapping[str, float] | None = None  # metric -> smallest effect of interest (the TOST's margin)
    rng: int | np.random.Generator | None = 0  # seeds every bootstrap


def compare_variants(
    summary_df: pd.DataFrame,
    baseline: str,
    metrics: Sequence[str],
    settings: CompareSettings | None = None,
    *,
    problems: pd.DataFrame | None = None,
    activity: Mapping[str, _activity.Gate] | None = None,
) -> ComparisonTable:
    """Compare every arm (variant) with its baseline on each metric column of ``summary_df``, as
    ``settings`` say (:class:`CompareSettings`: the options named below are its fields).

    ``summary_df`` has one row per run (e.g. from :func:`summarize_runs`) with ``variant_col``,
    ``seed_col`` and the ``metrics`` columns, and optionally ``arm_col`` (the run's arm: its label
    without ``/seed=N``; :mod:`workbench.compare.arms`). The units are the arms (the variants
    when there is no arm column or no grid). ``baseline`` names a variant: each arm is compared
    with the baseline variant's arm at its own grid point (none there: verdict "no baseline at
    this grid point"); or it names one arm, which every other arm is compared with.
    ``higher_is_better`` maps a metric to its direction; a metric not in it takes its registered
    summary metric's direction (``None`` if unknown or undirected: then the verdict says
    higher/lower, never better/worse).

    Runs are classified per metric as finished / failed / stopped / censored / missing
    (:mod:`workbench.compare.outcomes`, which states the policy; ``status``, ``stopped_early`` and
    ``health_reasons`` columns are read when present). Per metric and arm: mean (t interval) and
    IQM (trimmed-mean t interval; BCa bootstrap stratified by the ``strata`` column if given) of
    the finished runs; against
    the baseline, when both arms' runs all finished, the mean difference with a paired t-test
    when the seeds are matched (``pairing="auto"``) else Welch's t-test, otherwise Mann-Whitney
    with failed/stopped/censored runs ranked worst (a verdict it does not support is withheld,
    with the reason); P(improvement) with an
    exact binomial CI when paired, else over all run pairs with Newcombe's score interval; p-values corrected with ``correction``
    (``holm``/``bonferroni``/``none``) across every comparison of every primary metric, one
    study-wide family (``family="primary"``, the default; each metric of ``secondary`` is its own
    family, labelled exploratory), across the arms of each metric (``"metric"``) or across the
    whole table (``"all"``); each difference's CI at the level its own test used (one interval per
    word: the correction's level, or the TOST's ``1 - 2 alpha/d`` beside "equivalent"); with ``sesoi`` (metric -> smallest effect of interest, in the
    metric's units) the TOST equivalence test, corrected the same way; the verdict and its
    ``status``; and the minimum detectable effect at ``power``. With arms, "variant" above
    reads "arm": the correction runs across all arm comparisons of a metric (or of the table).

    ``activity``: ``arm -> Gate`` (:func:`workbench.compare.activity.activity_gates`): an arm whose
    changed knobs acted below their minimum gets the verdict "not testable: <knob> acted on <x>% of
    tokens (min <y>%)" on every metric but the knob's own activity metric.

    ``n_resamples=0`` skips the bootstraps (the IQM without its interval; verdicts do
    not use them): for simulations. ``rng`` seeds every bootstrap (each cell gets its own stream derived from ``rng``, metric and
    arm, so a cell does not change when arms or metrics are added).

    ``problems``: per-problem eval results (``run_id, step, problem_id, correct``, e.g.
    :meth:`workbench.results.reader.StudyReader.problem_results`; ``summary_df`` then needs its
    ``run_id`` column). For eval-based summaries the table then also has intervals over seeds *and*
    problems (``mean_2way_*``, ``delta_2way_*``, ``two_way_method``; :mod:`workbench.compare.problems`).
    Verdicts do not use them.
    """
    settings = settings or CompareSettings()
    higher_is_better, variant_col, arm_col, seed_col = (
        settings.higher_is_better,
        settings.variant_col,
        settings.arm_col,
        settings.seed_col,
    )
    strata, confidence, correction, family = settings.strata, settings.confidence, settings.correction, settings.family
    pairing, n_resamples, power, sesoi, rng = (
        settings.pairing,
        settings.n_resamples,
        settings.power,
        settings.sesoi,
        settings.rng,
    )
    metrics = list(metrics)
    _check_arguments(
        summary_df,
        metrics,
        family=family,
        confidence=confidence,
        correction=correction,
        columns=[variant_col, seed_col, *metrics] + ([strata] if strata else []),
    )
    summary_df, replication = _checkpoints.checkpoint_level(
        summary_df,
        metrics,
        variant_col=variant_col,
        arm_col=arm_col,
        seed_col=seed_col,
        checkpoint_col=settings.checkpoint_col,
        keep=[strata] if strata else [],
    )
    unit = replication.unit
    if unit == "checkpoint":
        problems = None  # the seeds x problems intervals have no checkpoint level: not shown rather than too narrow
    arm_variant = _arms.arm_variants(summary_df, variant_col, arm_col or "")  # arm -> variant
    baselines = _arms.match_baselines(arm_variant, baseline)  # arm -> its baseline arm (None: none)
    base_arms = [a for a, b in baselines.items() if a == b]
    others = [a for a in arm_variant if baselines[a] != a]
    plan = _CellPlan(
        confidence=confidence,
        pairing=pairing,
        n_resamples=n_resamples,
        power=power,
        seed=_table_seed(rng),
        strata=strata,
        unit=unit,
    )
    directions = {m: _direction(m, higher_is_better) for m in metrics}
    bounds = {m: value_bounds(m) for m in metrics}
    units = _arms.arm_column(summary_df, variant_col, arm_col or "")
    groups = {a: g for a, g in summary_df.groupby(units.to_numpy(), sort=False)}
    censored_as = dict(getattr(summary_df, "attrs", {}).get("censored", {}))
    outcomes = {
        (metric, arm): _outcomes.arm_outcomes(
            groups[arm], metric, seed_col=seed_col, censored_as=censored_as.get(metric, "")
        )
        for metric in metrics
        for arm in arm_variant
    }

    cells = [
        _compare_cell(
            metric,
            variant,
            groups[variant],
            outcomes,
            baseline=baseline,
            base_arm=baselines[variant],
            variant_of=arm_variant[variant],
            higher_is_better=directions[metric],
            bounds=bounds[metric],
            plan=plan,
        )
        for metric in metrics
        for variant in [*base_arms, *others]  # an arm; named variant as in a study without a grid
    ]
    sesoi = _check_sesoi(sesoi, metrics)
    for cell in cells:
        if cell.diff is not None and not cell.by_rank:
            cell.row["sesoi"] = sesoi.get(cell.row["metric"], math.nan)
            cell.tost_p = stats.tost_p(cell.diff, cell.row["sesoi"])
    secondary = [m for m in dict.fromkeys(settings.secondary) if m in metrics]
    _correct(cells, correction=correction, family=family, alpha=plan.alpha, secondary=set(secondary))
    for cell in cells:
        _decide(cell, outcomes, confidence=confidence, alpha=plan.alpha, power=power, correction=correction, unit=unit)
        if activity and cell.diff is not None:
            _activity.apply_gate(cell.row, activity.get(cell.row["variant"]), _summary_reads(cell.row["metric"]))
    for cell in cells:
        cell.row["status"] = cell.row.get("status") or wording.status(cell.row["verdict"])
    if problems is not None:  # intervals over seeds and problems, beside the seed-only ones
        _problems.add_intervals(
            [c.row for c in cells], summary_df, problems, units=units, seed_col=seed_col, confidence=confidence
        )
    rows = _ranked_rows([c.row for c in cells], metrics, directions)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["paired"] = df["paired"].astype("boolean")
    settings = {
        "family": family,
        "pairing": pairing,
        "n_resamples": n_resamples,
        "power": power,
        "rng": plan.seed,
        "delta_ci": "the level each row's test used: the correction's (Holm: step-down) for better/worse/"
        "inconclusive, the TOST's 1 - 2 alpha / d for equivalent",
        "equivalence": "TOST at sesoi",
        "strata": strata,
        "bootstrap": "BCa (IQM with strata)",
        "p_improve_ci": "paired: Clopper-Pearson over seeds; unpaired: Mann-Whitney, Newcombe score interval",
        "iqm_ci": stats.IQM_T_METHOD,
        "mean_ci": "t",
        "arms": any(a != v for a, v in arm_variant.items()),
        "two_way_ci": _problems.TWO_WAY_METHOD if (df["two_way_method"] != "").any() else "",
        "unit": unit,
        "replication": replication.sentence(),
    }
    if secondary:
        settings["secondary"] = secondary
    return ComparisonTable(
        df=df,
        baseline=baseline,
        metrics=metrics,
        higher_is_better=directions,
        confidence=confidence,
        correction=correction,
        settings=settings,
    )


# --------------------------------------------------------------------------------------------
# The pieces of compare_variants: one cell (metric x arm), then correction, verdicts, ranks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CellPlan:
    """How every cell of one table is computed (the arguments of :func:`compare_variants`)."""

    confidence: float
    pairing: str
    n_resamples: int
    power: float
    seed: int  # every cell's RNG streams derive from it (:func:`_child_rng`)
    strata: str | None
    unit: str = "seed"  # what n_seeds counts: "seed" (of one checkpoint) or "checkpoint"

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence


@dataclass
class _Cell:
    """One row of the table while it is computed: the row, and its comparison with its baseline
    (``diff`` is ``None`` for a baseline arm or an arm without one; ``by_rank``: decided by the
    rank test because some runs did not finish, not by the t-test)."""

    row: dict[str, Any]
    diff: stats.Difference | None = None
    by_rank: bool = False
    tost_p: float = math.nan  # the equivalence test's p-value before correction (NaN: none)
    holm_level: float = math.nan  # the confidence at which the correction tested this comparison
    tost_level: float = math.nan  # the confidence of the TOST interval that matches its corrected test


def _check_arguments(
    summary_df: pd.DataFrame, metrics: list[str], *, family: str, confidence: float, correction: str, columns: list[str]
) -> None:
    """``ValueError`` naming the problem with :func:`compare_variants`' arguments, if any."""
    if not metrics:
        raise ValueError("no metrics to compare")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} (valid: {', '.join(sorted(FAMILIES))})")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    stats.CORRECTIONS.get(correction)  # unknown name -> ValueError with the valid ones
    missing = [c for c in columns if c not in summary_df.columns]
    if missing:
        raise ValueError(f"summary_df is missing columns {missing} (has {list(summary_df.columns)})")


def _check_sesoi(sesoi: Mapping[str, float] | None, metrics: list[str]) -> dict[str, float]:
    """The smallest effects of interest by metric, each a positive finite number (``ValueError``
    naming the metric otherwise). A SESOI for a metric not compared is ignored (``--metric`` may
    pick a subset of the study's metrics)."""
    out = {}
    for metric, value in (sesoi or {}).items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise ValueError(f"sesoi of {metric!r} must be a positive number in the metric's units, got {value!r}")
        if metric in metrics:
            out[metric] = float(value)
    return out


def _table_seed(rng: int | np.random.Generator | None) -> int:
    """The one integer seed of a table (a generator gives one draw; ``None`` is 0)."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**31))
    return 0 if rng is None else int(rng)


def _estimates(
    arm: _outcomes.ArmOutcomes, strata: np.ndarray | None, bounds: tuple[float, float], plan: _CellPlan, *keys: str
) -> tuple[stats.Estimate, stats.Estimate]:
    """Mean and IQM of an arm's finished runs with their CIs, cut to the values' range."""
    mean = _cut(stats.mean_ci(arm.values, confidence=plan.confidence), bounds)
    if plan.n_resamples <= 0:  # no bootstrap asked for (simulations): the IQM without its interval
        value = float(stats.iqm(arm.values)) if arm.values.size else math.nan
        return mean, stats.Estimate(value, math.nan, math.nan, n=arm.values.size)
    iqm = stats.iqm_ci(
        arm.values,
        strata=strata,
        confidence=plan.confidence,
        n_resamples=plan.n_resamples,
        rng=_child_rng(plan.seed, *keys, "iqm"),
    )
    return mean, _cut(iqm, bounds)


def _estimate_row(
    metric: str,
    variant: str,
    base_arm: str | None,
    arm: _outcomes.ArmOutcomes,
    mean: stats.Estimate,
    iqm: stats.Estimate,
    higher_is_better: bool | None,
) -> dict[str, Any]:
    """A row with the arm's own estimates; the comparison's columns empty (NaN) until filled."""
    return {
        "metric": metric,
        "variant": variant,
        "n_seeds": mean.n,
        "n_nan": arm.n_runs - mean.n,
        "n_runs": arm.n_runs,
        **{f"n_{o}": arm.counts[o] for o in _outcomes.OUTCOMES},
        "mean": mean.value,
        "mean_lo": mean.lo,
        "mean_hi": mean.hi,
        "iqm": iqm.value,
        "iqm_lo": iqm.lo,
        "iqm_hi": iqm.hi,
        "delta": math.nan,
        "delta_lo": math.nan,
        "delta_hi": math.nan,
        "delta_level": math.nan,
        "delta_ci": "",
        "paired": pd.NA,
        "p_improve": math.nan,
        "p_improve_lo": math.nan,
        "p_improve_hi": math.nan,
        "p_value": math.nan,
        "p_adjusted": math.nan,
        "verdict": "baseline" if base_arm == variant else "" if base_arm else _arms.NO_BASELINE,
        "status": "",
        "mde": math.nan,
        "sesoi": math.nan,
        "p_equivalence": math.nan,
        "higher_is_better": higher_is_better,
        "test": "",
        "baseline_arm": base_arm or "",
        "mean_method": mean.method,
        "iqm_method": iqm.method,
        **{c: "" if c == "two_way_method" else math.nan for c in _problems.TWO_WAY_COLUMNS},  # problems.py fills
        "activity": math.nan,
        "activity_min": math.nan,
    }


def _compare_cell(
    metric: str,
    variant: str,
    runs: pd.DataFrame,
    outcomes: Mapping[tuple[str, str], _outcomes.ArmOutcomes],
    *,
    baseline: str,
    base_arm: str | None,
    variant_of: str,
    higher_is_better: bool | None,
    bounds: tuple[float, float],
    plan: _CellPlan,
) -> _Cell:
    """One arm on one metric: its estimates and, against its baseline arm, the test (p-value not
    yet corrected), P(improvement) and the notes."""
    arm = outcomes[metric, variant]
    labels = None
    if plan.strata:
        labels = runs[plan.strata].to_numpy()[_outcomes.run_outcomes(runs, metric) == "finished"]
    mean, iqm = _estimates(arm, labels, bounds, plan, metric, variant)
    notes = []
    if base_arm is None:
        notes.append(f"no {baseline} run at {_arms.grid_point(variant, variant_of) or 'its grid point'}")
    if arm.reason():
        notes.append(arm.reason())
    if mean.note:
        notes.append(mean.note)
    if iqm.note and iqm.note != mean.note:
        notes.append(f"IQM: {iqm.note}")
    cell = _Cell(_estimate_row(metric, variant, base_arm, arm, mean, iqm, higher_is_better))
    if base_arm is not None and base_arm != variant:
        base = outcomes[metric, base_arm]
        cell.diff, cell.by_rank = _test_against(cell.row, arm, base, plan)
        notes += _comparison_notes(cell, arm, base, earlier=notes)
    cell.row["note"] = "; ".join(notes)
    return cell


def _test_against(
    row: dict[str, Any], arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes, plan: _CellPlan
) -> tuple[stats.Difference, bool]:
    """Fill ``row``'s comparison with ``base``: delta, the test and its p-value, P(improvement).
    Returns the difference and whether the rank test decides (some runs failed,
    stopped or censored: ranked worst)."""
    metric, variant, hib = row["metric"], row["variant"], row["higher_is_better"]
    diff = stats.mean_difference(
        arm.values,
        base.values,
        x_seeds=arm.seeds,
        y_seeds=base.seeds,
        pairing=plan.pairing,
        rng=_child_rng(plan.seed, metric, variant, "perm"),
    )
    by_rank = bool(arm.n_worst or base.n_worst)  # missing values alone: t-test, verdict may be withheld
    if by_rank and hib is not None:
        p_value, _ = stats.rank_test(
            arm.values,
            base.values,
            x_worst=arm.n_worst,
            y_worst=base.n_worst,
            higher_is_better=hib,
            rng=_child_rng(plan.seed, metric, variant, "rank"),
        )
        x_ranked, y_ranked = _ranked_values(arm, base, hib)
        test = "Mann-Whitney (failed/stopped/censored runs ranked worst)"
    else:
        p_value = math.nan if by_rank else diff.p_value
        x_ranked, y_ranked = arm.values, base.values
        test = "none (no direction to rank incomplete runs)" if by_rank else diff.method
    if diff.paired and not by_rank:  # by seed, as the paired t-test pairs them
        xm, ym, _ = stats.matched_by_seed(arm.values, base.values, arm.seeds, base.seeds)
        poi = stats.paired_improvement_ci(xm, ym, higher_is_better=hib is not False, confidence=plan.confidence)
    else:
        poi = _improvement(x_ranked, y_ranked, higher_is_better=hib is not False, plan=plan)
    row.update(
        delta=diff.delta,
        paired=diff.paired and not by_rank,
        p_value=p_value,
        p_improve=poi.value,
        p_improve_lo=poi.lo,
        p_improve_hi=poi.hi,
        test=test,
    )
    return diff, by_rank


def _improvement(x: np.ndarray, y: np.ndarray, *, higher_is_better: bool, plan: _CellPlan) -> stats.Estimate:
    """P(improvement) of X over Y over all pairs of runs (the Mann-Whitney probability), with
    Newcombe's score interval: closed form, so it needs no resamples and does not collapse to
    ``0 [0, 0]`` when the arms' runs are separated (as the percentile bootstrap did)."""
    return stats.mann_whitney_improvement_ci(x, y, higher_is_better=higher_is_better, confidence=plan.confidence)


def _comparison_notes(
    cell: _Cell, arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes, earlier: list[str]
) -> list[str]:
    """What a reader needs to know about a comparison, after the ``earlier`` notes of the arm
    itself: the baseline's incomplete runs, the success rates of a censored metric, the
    difference's own note (once), and that the rank test decided."""
    notes = []
    if base.reason():
        notes.append(f"baseline {cell.row['baseline_arm']}: {base.reason()}")
    if arm.counts["censored"] or base.counts["censored"]:
        notes.append(_success_rates(arm, base))
    if cell.diff.note and cell.diff.note not in earlier + notes and not cell.by_rank:
        notes.append(cell.diff.note)
    if cell.by_rank:
        notes.append("Δ of finished runs only; no t interval (rank test decides)")
    return notes


def _family_of(metric: str, family: str, secondary: set[str]) -> str:
    """The family a metric's comparisons are corrected in (:data:`FAMILIES`)."""
    if family == "all":
        return "all"
    if family == "primary" and metric not in secondary:
        return "primary"
    return f"metric:{metric}"


def _correct(cells: list[_Cell], *, correction: str, family: str, alpha: float, secondary: set[str]) -> None:
    """Correct every comparison for multiplicity: across every primary metric's comparisons and
    each secondary metric's own (``family="primary"``), per metric (``"metric"``) or across the
    table (``"all"``): ``p_adjusted`` and the level each difference was tested at
    (``cell.holm_level``: Holm's step-down level, ``1 - alpha / d``); and ``p_equivalence``, the
    TOST p-values corrected the same way over the comparisons that have one, with the level of
    each TOST's interval (``cell.tost_level``, ``1 - 2 alpha / d``: inside ±SESOI exactly when the
    corrected TOST rejects)."""
    families: dict[str, list[_Cell]] = {}
    for cell in cells:
        if cell.diff is not None:
            families.setdefault(_family_of(cell.row["metric"], family, secondary), []).append(cell)
    for members in families.values():
        adj, div = stats.adjust_pvalues([c.row["p_value"] for c in members], correction, alpha=alpha)
        for c, a, d in zip(members, adj, div, strict=True):
            c.row["p_adjusted"] = float(a)
            c.holm_level = 1.0 - alpha / d if math.isfinite(d) else math.nan
        eq_adj, eq_div = stats.adjust_pvalues([c.tost_p for c in members], correction, alpha=alpha)
        for c, a, d in zip(members, eq_adj, eq_div, strict=True):
            c.row["p_equivalence"] = float(a)
            c.tost_level = 1.0 - 2.0 * alpha / d if math.isfinite(d) else math.nan


def _decide(
    cell: _Cell,
    outcomes: Mapping[tuple[str, str], _outcomes.ArmOutcomes],
    *,
    confidence: float,
    alpha: float,
    power: float,
    correction: str,
    unit: str = "seed",
) -> None:
    """Fill a compared row's interval of delta, its minimum detectable effect and its verdict
    (after :func:`_correct`). The verdict is the corrected test's, and the interval shown is the
    one that test used, one interval per word: beside better/worse/inconclusive the t interval at
    the level the correction tested the row at (Holm's step-down level, which excludes 0 exactly
    when Holm rejects), beside "equivalent" the TOST's ``1 - 2 alpha / d`` interval (inside ±SESOI
    exactly when the corrected TOST rejects). ``delta_level`` and ``delta_ci`` say which."""
    r, diff = cell.row, cell.diff
    if diff is None:
        return
    arm, base = outcomes[r["metric"], r["variant"]], outcomes[r["metric"], r["baseline_arm"]]
    level = cell.holm_level if math.isfinite(cell.holm_level) else confidence
    t_lo, t_hi = diff.interval(level)
    if cell.by_rank:
        r["delta_level"] = math.nan
        r["verdict"] = wording.ranked_verdict(
            arm,
            base,
            higher_is_better=r["higher_is_better"],
            p_adjusted=r["p_adjusted"],
            p_improve=r["p_improve"],
            t_lo=t_lo,
            t_hi=t_hi,
            alpha=alpha,
            unit=unit,
        )
        return
    r["mde"] = stats.minimum_detectable_effect(diff, alpha=1.0 - level, power=power)
    equivalent = math.isfinite(r["p_equivalence"]) and r["p_equivalence"] < alpha
    r["verdict"] = wording.verdict(
        diff.delta,
        t_lo,
        t_hi,
        r["p_adjusted"],
        alpha=alpha,
        higher_is_better=r["higher_is_better"],
        n_x=r["n_seeds"],
        n_y=base.counts["finished"],
        mde=r["mde"],
        sesoi=r["sesoi"],
        equivalent=equivalent,
        unit=unit,
        # an arm stopped at an earlier look is paired on its common seeds: its words count the pairs tested
        n_pairs=diff.n_x if diff.paired and diff.note == stats.COMMON_SEEDS else None,
    )
    if wording.status(r["verdict"]) == "equivalent" and math.isfinite(cell.tost_level):
        r["delta_level"], r["delta_ci"] = cell.tost_level, TOST_INTERVAL
    else:
        r["delta_level"], r["delta_ci"] = level, INTERVAL_OF.get(correction, correction)
    r["delta_lo"], r["delta_hi"] = diff.interval(r["delta_level"])
    if not (math.isfinite(r["delta_lo"]) or math.isinf(r["delta_lo"])):
        r["delta_level"], r["delta_ci"] = math.nan, ""
    unknown = [x for x in (arm.reason(), f"baseline: {base.reason()}" if base.reason() else "") if x]
    if unknown and wording.status(r["verdict"]) in ("better", "worse", "higher", "lower", "equivalent"):
        r["verdict"] = wording.withheld("; ".join(unknown))  # missing values could go either way


def _ranked_rows(
    rows: list[dict[str, Any]], metrics: list[str], directions: Mapping[str, bool | None]
) -> list[dict[str, Any]]:
    """``rows`` with their ``rank`` (best mean first in the metric's direction, ties sharing the
    lower rank; NaN without a direction), sorted by metric as requested, then rank."""
    for metric in metrics:
        part = [r for r in rows if r["metric"] == metric]
        hib = directions[metric]
        ranks = (
            pd.Series([r["mean"] for r in part]).rank(ascending=not hib, method="min").to_numpy()
            if hib is not None
            else np.full(len(part), math.nan)
        )
        for r, k in zip(part, ranks, strict=True):
            r["rank"] = float(k)
    order = {m: j for j, m in enumerate(metrics)}
    return sorted(
        rows, key=lambda r: (order[r["metric"]], math.isnan(r["rank"]), 0.0 if math.isnan(r["rank"]) else r["rank"])
    )


def _child_rng(seed: int, *keys: str) -> np.random.Generator:
    """An RNG for one table cell, independent of the order cells are computed in."""
    return np.random.default_rng([seed, *(zlib.crc32(k.encode()) for k in keys)])


def _direction(metric: str, given: Mapping[str, bool | None] | None) -> bool | None:
    if given is not None and metric in given:
        return given[metric]
    try:
        return resolve_summary(metric).higher_is_better
    except ValueError:
        return None


def _summary_reads(metric: str) -> tuple[str, ...]:
    """The logged metrics a summary reads (none if it is not a registered summary)."""
    try:
        return tuple(resolve_summary(metric).reads)
    except ValueError:
        return ()


def _cut(estimate: stats.Estimate, bounds: tuple[float, float]) -> stats.Estimate:
    """The interval intersected with the values' range. The estimand (a mean or IQM of values in
    the range) lies in it, so every interval that covered it still does: coverage is unchanged."""
    lo, hi = np.clip([estimate.lo, estimate.hi], *bounds)  # NaN (no interval) stays NaN
    return dataclasses.replace(estimate, lo=float(lo), hi=float(hi))


def _ranked_values(arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes, hib: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both arms' runs as ranks, failed/stopped/censored runs tied at the worst rank (for P(improve))."""
    worst = -math.inf if hib else math.inf
    x = np.concatenate([arm.values, np.full(arm.n_worst, worst)])
    y = np.concatenate([base.values, np.full(base.n_worst, worst)])
    ranks = stats.sps.rankdata(np.concatenate([x, y]))
    return ranks[: x.size], ranks[x.size :]


def _success_rates(arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes) -> str:
    """ "got there" (not censored) in each arm among runs that ended with a value, compared with
    Boschloo's exact test (``scipy.stats.boschloo_exact``): a second view of a censored metric."""

    def got(a: _outcomes.ArmOutcomes) -> tuple[int, int]:
        return a.counts["finished"], a.counts["finished"] + a.counts["censored"]

    (kx, nx), (ky, ny) = got(arm), got(base)
    text = f"got there in {kx}/{nx} vs baseline {ky}/{ny} runs"
    if nx and ny:
        p = stats.sps.boschloo_exact([[kx, ky], [nx - kx, ny - ky]]).pvalue
        text += f" (Boschloo exact p = {float(min(p, 1.0)):.3g})"
    return text
