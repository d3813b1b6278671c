"""Variant-vs-baseline comparison of per-run summaries: a tidy, ranked table of estimates, CIs,
P(improvement), corrected tests and verdicts. Pure data (no plotting, MLflow or terminal
styling); the CLI and ``viz`` render it.

The units compared are **arms**, one per (variant, grid point) (:mod:`workbench.compare.arms`):
with an ``arm`` column in the summary (the reader provides it) each arm is compared with the
baseline variant's arm at the same grid point; without a grid (or without the column) an arm is
a variant and everything below reads "variant".

    table = compare_variants(summary, baseline="grpo",
                             metrics=["final_eval_accuracy", "final_length_ratio"],
                             higher_is_better={"final_length_ratio": False})
    print(table.to_markdown())

The statistical choices are documented in :mod:`workbench.compare.stats`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import activity as _activity
from . import arms as _arms
from . import outcomes as _outcomes
from . import problems as _problems
from . import stats, wording
from .summary import resolve_summary

__all__ = ["COLUMNS", "COUNT_COLUMNS", "ComparisonTable", "compare_variants", "runs_phrase"]

#: Columns of :attr:`ComparisonTable.df`, in order.
COLUMNS: tuple[str, ...] = (
    "metric",
    "rank",
    "variant",
    "n_seeds",
    "n_nan",
    "n_runs",
    "n_finished",
    "n_failed",
    "n_stopped",
    "n_censored",
    "n_missing",
    "mean",
    "mean_lo",
    "mean_hi",
    "iqm",
    "iqm_lo",
    "iqm_hi",
    "delta",
    "delta_lo",
    "delta_hi",
    "delta_level",
    "paired",
    "p_improve",
    "p_improve_lo",
    "p_improve_hi",
    "p_value",
    "p_adjusted",
    "verdict",
    "status",
    "mde",
    "sesoi",
    "p_equivalence",
    "higher_is_better",
    "test",
    "note",
    "baseline_arm",
    "mean_method",
    "iqm_method",
    *_problems.TWO_WAY_COLUMNS,
    "activity",
    "activity_min",
)
#: Per-outcome run counts (:mod:`workbench.compare.outcomes`), as shown in every output.
COUNT_COLUMNS: tuple[str, ...] = ("n_finished", "n_failed", "n_stopped", "n_censored", "n_missing")


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if v is None or v is pd.NA:
        return None
    return v


def runs_phrase(r: Mapping[str, Any]) -> str:
    """A row's runs per outcome: ``"6: 3 finished, 3 failed"`` (``"5 finished"`` when all did)."""
    counts = {c[2:]: int(r.get(c) or 0) for c in COUNT_COLUMNS}
    total = int(r.get("n_runs") or sum(counts.values()))
    if counts["finished"] == total:
        return f"{total} finished"
    return f"{total}: " + ", ".join(f"{n} {o}" for o, n in counts.items() if n)


def _fmt(v: Any) -> str:
    """Compact number: 4 significant digits, thousands separators from 10,000."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    v = float(v)
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if abs(v) >= 10_000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _fmt_ci(est: Any, lo: Any, hi: Any) -> str:
    if isinstance(lo, float) and math.isnan(lo):
        return _fmt(est)
    if math.isfinite(lo) and math.isfinite(hi) and abs(float(est)) < 1e-9 * (hi - lo):
        # the rounding residue of an exact 0 (paired differences that cancel leave ~n * eps * |x|,
        # e.g. 5.551e-18) would read as an effect; at 1e-9 of the interval's width no digit shown is one
        est = 0.0
    return f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]"


def _fmt_p(p: Any) -> str:
    if isinstance(p, float) and math.isnan(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


@dataclass
class ComparisonTable:
    """The result of :func:`compare_variants`: a tidy DataFrame plus the settings that made it.

    ``df`` is sorted by metric (in the order requested), then rank (best first), baseline rows
    placed by their rank too.

    Columns (one row per metric x arm; an arm is a variant in a study without a grid, see
    :mod:`workbench.compare.arms`; each baseline arm has a row too, with verdict "baseline"):

    - ``variant``: the arm's name (the variant's name without a grid; ``dr_grpo/lr=3e-05`` with one).
    - ``baseline_arm``: the arm this row is compared with (its own name on a baseline row; empty
      when its grid point has no baseline run: verdict "no baseline at this grid point").

    - ``rank``: 1 = best mean in the metric's direction (ties share the lower rank; NaN for a metric
      without a direction or a variant without data).
    - ``n_seeds``: finished runs with a finite value (what mean, IQM and the t-test use);
      ``n_nan``: the other runs (not in those estimates, never dropped from the verdict).
    - ``n_runs`` and ``n_finished``/``n_failed``/``n_stopped``/``n_censored``/``n_missing``: the runs
      per outcome (:mod:`workbench.compare.outcomes`, which states the policy for them).
    - ``mean``/``iqm`` with ``_lo``/``_hi``: CIs at ``confidence`` made by ``mean_method`` (t) and
      ``iqm_method`` (trimmed-mean t of Tukey-McLaughlin; t below 4 seeds, where the IQM is the
      mean; BCa bootstrap with strata).
    - ``delta`` = mean(variant) - mean(baseline) (paired: mean of per-seed differences), raw sign;
      ``delta_lo``/``delta_hi`` its **simultaneous** t interval at level ``delta_level`` =
      ``1 - alpha/m`` (Bonferroni over the ``m`` comparisons of its family): all intervals of a
      family cover their Δ together with probability >= ``1 - alpha``. Holm decides the verdict
      at its own, less strict, step level, so a Holm-rejected Δ can have a simultaneous interval
      touching 0 (the note says so). No interval when the test is the rank test (runs failed,
      stopped or censored).
    - ``paired``: seeds matched with the baseline (paired t) or not (Welch t).
    - ``p_improve``: P(variant improves on baseline) in the metric's direction (for a metric
      without a direction, P(variant > baseline)): paired, the share of seeds where the variant
      beats the baseline at the same seed (exact Clopper-Pearson CI); unpaired, over all pairs of
      runs (percentile bootstrap CI).
    - ``p_value``/``p_adjusted``: the t-test's two-sided p-value, and after the correction.
    - ``verdict``: better / worse (higher / lower without a direction) / equivalent (|Δ| < e) /
      inconclusive with N seeds (MDE x) / withheld: <why> / not testable: <knob> acted on <x>% of
      tokens (min <y>%) / no data / no baseline at this grid
      point / baseline; ``status``: the verdict as one word of :data:`wording.STATUSES`
      (``baseline`` on a baseline row).
    - ``mde``: the minimum detectable effect of the test at the seeds run (``power``, the Holm level
      it was tested at, its SD); ``sesoi``: the metric's smallest effect of interest (NaN if none
      declared); ``p_equivalence``: the TOST p-value at the SESOI, Holm-adjusted over the family.
    - ``test``: the test behind ``p_value``; ``note``: anything unusual (1 seed, NaNs dropped, ...).
    - ``n_problems``, ``mean_2way_lo``/``mean_2way_hi``, ``delta_2way_lo``/``delta_2way_hi``,
      ``two_way_method``: with per-problem results (``compare_variants(problems=...)``), for
      eval-based summaries, the intervals over seeds *and* eval problems (the mean's at
      ``confidence``, Δ's at ``delta_level``) and their method (:mod:`workbench.compare.problems`);
      NaN and "" otherwise (the row's note says why when the summary is eval-based).
    - ``activity``/``activity_min``: the activity of the knob the arm changes and its minimum, when
      the knob-activity gate applies (:mod:`workbench.compare.activity`); NaN otherwise.
    """

    df: pd.DataFrame
    baseline: str
    metrics: list[str]
    higher_is_better: dict[str, bool | None]
    confidence: float = 0.95
    correction: str = "holm"
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def by_arm(self) -> bool:
        """Whether the units are arms of a grid (some arm's name is more than its variant)."""
        return bool(self.settings.get("arms", False))

    @property
    def unit(self) -> str:
        """What a row is: ``"arm"`` in a study with a grid, else ``"variant"`` (for headings)."""
        return "arm" if self.by_arm else "variant"

    @property
    def baseline_arms(self) -> list[str]:
        """The arms compared with themselves (one per grid point with a baseline run), in order."""
        return list(pd.unique(self.df.loc[self.df["verdict"] == "baseline", "variant"]))

    @property
    def per_grid_point(self) -> bool:
        """Whether arms were compared with the baseline variant's arm at their own grid point
        (rather than all with one baseline)."""
        col = self.df["baseline_arm"] if "baseline_arm" in self.df.columns else pd.Series([], dtype=str)
        return bool((col.fillna("").astype(str).replace("", self.baseline) != self.baseline).any())

    def baseline_phrase(self) -> str:
        """``grpo`` or ``grpo at the same grid point`` (for titles)."""
        return f"{self.baseline} at the same grid point" if self.per_grid_point else str(self.baseline)

    def for_metric(self, metric: str) -> pd.DataFrame:
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r} not in this table (has {self.metrics})")
        return self.df[self.df["metric"] == metric].reset_index(drop=True)

    def ranking(self, metric: str) -> list[str]:
        """Arms (variants) best first by mean in the metric's direction (without a direction: table order)."""
        return self.for_metric(metric)["variant"].tolist()

    def verdicts(self) -> dict[tuple[str, str], str]:
        """``(metric, arm) -> verdict`` for every arm that is not a baseline."""
        rows = self.df[self.df["verdict"] != "baseline"]
        return {(m, v): x for m, v, x in zip(rows["metric"], rows["variant"], rows["verdict"], strict=True)}

    def winners(self, metric: str) -> list[str]:
        """Arms (variants) declared better than their baseline (after correction) on ``metric``."""
        rows = self.for_metric(metric)
        return rows.loc[rows["verdict"] == "better", "variant"].tolist()

    # ---- serialisation ----------------------------------------------------------------------

    def to_csv(self, path: str | Path | None = None) -> str | None:
        """CSV of :attr:`df` (returned as a string when ``path`` is ``None``)."""
        return self.df.to_csv(path, index=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "headline": self.headlines(),  # first: what a reader wants first
            "definitions": self.definitions(),
            "baseline": self.baseline,
            "metrics": list(self.metrics),
            "higher_is_better": dict(self.higher_is_better),
            "confidence": self.confidence,
            "alpha": self.alpha,
            "correction": self.correction,
            "settings": {k: _jsonable(v) for k, v in self.settings.items()},
            "columns": list(self.df.columns),
            "rows": [{k: _jsonable(v) for k, v in r.items()} for r in self.df.to_dict("records")],
        }

    def to_json(self, path: str | Path | None = None, *, indent: int | None = 2) -> str:
        """JSON ``{baseline, metrics, higher_is_better, confidence, alpha, correction, settings,
        columns, rows}``; NaN as ``null``, infinities as ``"inf"``/``"-inf"``. Written to
        ``path`` if given; always returned."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComparisonTable:
        """Inverse of :meth:`to_dict` (``"inf"`` strings back to floats)."""

        def back(v: Any) -> Any:
            if v == "inf":
                return math.inf
            if v == "-inf":
                return -math.inf
            return math.nan if v is None else v

        text = {"metric", "variant", "verdict", "status", "note", "test", "higher_is_better", "paired", "baseline_arm",
                "mean_method", "iqm_method", "two_way_method"}
        rows = [{k: v if k in text else back(v) for k, v in r.items()} for r in d["rows"]]
        df = pd.DataFrame(rows, columns=d["columns"])
        if "paired" in df.columns:
            df["paired"] = df["paired"].astype("boolean")
        return cls(
            df=df,
            baseline=d["baseline"],
            metrics=list(d["metrics"]),
            higher_is_better=dict(d["higher_is_better"]),
            confidence=d["confidence"],
            correction=d["correction"],
            settings=dict(d.get("settings", {})),
        )

    # ---- in words ----------------------------------------------------------------------------

    def headlines(self) -> list[str]:
        """One plain sentence per comparison (metric x compared arm, in table order), the first
        lines of every output of ``compare``: effect, its interval at the level shown in the table,
        and the verdict in words (:func:`workbench.compare.wording.headline`)."""
        lines = []
        for metric in self.metrics:
            rows = self.for_metric(metric)
            seeds_of = dict(zip(rows["variant"], rows["n_seeds"], strict=True))
            points = _value_bounds(metric) == (0.0, 1.0)  # a rate: differences in percentage points
            for r in rows.to_dict("records"):
                if r["verdict"] == "baseline":
                    continue
                base = r["baseline_arm"] or self.baseline
                lines.append(self._secondary_mark(metric) + wording.headline(
                    variant=str(r["variant"]), baseline=str(base), metric=metric, status_word=str(r["status"]),
                    verdict_text=str(r["verdict"]), delta=float(r["delta"]), lo=float(r["delta_lo"]),
                    hi=float(r["delta_hi"]), level=float(r["delta_level"]), n_x=int(r["n_seeds"]),
                    n_y=int(seeds_of.get(base, 0)), mde=float(r["mde"]), sesoi=float(r["sesoi"]), points=points,
                    ranked=str(r["test"]).startswith("Mann-Whitney")))
        return lines

    def is_secondary(self, metric: str) -> bool:
        """Whether the study declared ``metric`` secondary (``compare.primary`` names the others):
        reported, but not what the study was designed to decide."""
        return metric in (self.settings.get("secondary") or ())

    def _secondary_mark(self, metric: str) -> str:
        return "(secondary) " if self.is_secondary(metric) else ""

    def title_role(self, metric: str) -> str:
        """What opens a metric's table title in every format: ``"secondary; "`` or nothing."""
        return "secondary; " if self.is_secondary(metric) else ""

    def definitions(self) -> list[str]:
        """What each compared summary is, one line per metric (``final_eval_accuracy: Final
        eval/accuracy: the mean of its last 3 evals after step 0 ...``), so every output that says
        "final" says which final."""
        out = []
        for metric in self.metrics:
            try:
                spec = resolve_summary(metric)
            except ValueError:  # a column the caller computed: nothing registered to say
                continue
            text = spec.description
            for name, default in spec.params.items():  # "the last ``window`` steps" -> "the last 10 steps"
                text = text.replace(f"``{name}``", str(default))
            out.append(f"{metric}: {' '.join(text.replace('``', '').split())}")
        return out

    def two_way(self, metric: str) -> str:
        """What the metric's intervals over seeds and problems are, in one sentence ("" if none)."""
        rows = self.for_metric(metric)
        rows = rows[rows["two_way_method"].fillna("") != ""] if "two_way_method" in rows.columns else rows[:0]
        if rows.empty:
            return ""
        n = ", ".join(str(int(k)) for k in pd.unique(rows["n_problems"]))
        return (f"Intervals over seeds and problems ({n} eval problems): {rows['two_way_method'].iloc[0]}; they "
                "add the draw of the eval problems to the seed-only intervals (docs/reports.md).")

    def _repr_markdown_(self) -> str:  # a notebook shows the table as `--format md` prints it
        return self.to_markdown()

    def to_markdown(self) -> str:
        """The headline (one sentence per comparison, each its own paragraph: the first line is the
        first comparison's), what each metric is, then one GitHub-flavoured markdown table per
        metric, best first."""
        level = wording.level_percent(self.confidence)
        out = io.StringIO()
        for line in self.headlines():
            out.write(line + "\n\n")
        for line in self.definitions():
            out.write(f"*{line}*\n\n")
        for metric in self.metrics:
            hib = self.higher_is_better.get(metric)
            direction = {True: "higher is better", False: "lower is better", None: "no preferred direction"}[hib]
            out.write(f"### {metric} ({self.title_role(metric)}{direction}; baseline: {self.baseline_phrase()})\n\n")
            vs = self.per_grid_point
            head = [
                "rank",
                self.unit,
                *(["baseline arm"] if vs else []),
                "n_seeds",
                "runs",
                f"mean [{level} CI]",
                f"IQM [{level} CI]",
                "Δ vs baseline [simultaneous CI]",
                f"P(improve) [{level} CI]",
                f"p ({self.correction})",
                "verdict",
                "status",
            ]
            two_way = self.two_way(metric)
            if two_way:
                head += [f"mean [{level} CI over seeds and problems]", "Δ [corrected CI over seeds and problems]"]
            out.write("| " + " | ".join(head) + " |\n")
            out.write("|" + "|".join("---" for _ in head) + "|\n")
            for r in self.for_metric(metric).to_dict("records"):
                cells = _markdown_cells(r, with_baseline_arm=vs)
                if two_way:
                    cells += _two_way_cells(r)
                out.write("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
            notes = [f"{r['variant']}: {r['note']}" for r in self.for_metric(metric).to_dict("records") if r["note"]]
            if notes:
                out.write("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
            if two_way:
                out.write(f"\n{two_way}\n")
            out.write("\n")
        for key in ("sequential", "seeds_added"):  # set by `workbench compare` from the study's recorded looks
            if self.settings.get(key):
                out.write(f"**{self.settings[key]}**\n\n")
        out.write(
            f"Δ = {self.unit} − baseline; CIs of Δ are simultaneous t intervals over seeds (Bonferroni over the m "
            f"comparisons of a family, family: {self.settings.get('family', 'metric')}); verdicts by "
            f"{self.correction}-corrected tests; equivalent: TOST at the metric's SESOI, {self.correction}-"
            f"corrected; MDE: minimum detectable effect at the seeds run ({self.settings.get('power', 0.8):.0%} "
            f"power); mean CIs: t interval; IQM CIs: trimmed-mean t (Tukey-McLaughlin; t below 4 seeds); P(improve): "
            f"paired by seed with an exact binomial CI, else over all run pairs with a percentile bootstrap CI "
            f"({self.settings.get('n_resamples', '?')} resamples). n_seeds = "
            f"the number of finished runs with a value; runs failed, stopped early or censored are ranked worst "
            f"(Mann-Whitney) and can withhold a verdict (docs/reports.md).\n"
        )
        return out.getvalue()


def _markdown_cells(r: Mapping[str, Any], *, with_baseline_arm: bool) -> list[str]:
    """One table row's cells in :meth:`ComparisonTable.to_markdown` (a baseline row: its own
    estimates, dashes for the comparison)."""
    base = r["verdict"] == "baseline"
    return [
        "—" if isinstance(r["rank"], float) and math.isnan(r["rank"]) else str(int(r["rank"])),
        f"**{r['variant']}**" if base else str(r["variant"]),
        *([("—" if base else (r["baseline_arm"] or "—"))] if with_baseline_arm else []),
        str(r["n_seeds"]),
        runs_phrase(r),
        _fmt_ci(r["mean"], r["mean_lo"], r["mean_hi"]),
        _fmt_ci(r["iqm"], r["iqm_lo"], r["iqm_hi"]),
        "—" if base else _fmt_ci(r["delta"], r["delta_lo"], r["delta_hi"]),
        "—" if base else _fmt_ci(r["p_improve"], r["p_improve_lo"], r["p_improve_hi"]),
        "—" if base else _fmt_p(r["p_adjusted"]),
        str(r["verdict"]),
        str(r["status"]),
    ]


def _two_way_cells(r: Mapping[str, Any]) -> list[str]:
    """A row's intervals over seeds and problems (markdown): mean, then Δ (dashes where none)."""
    base = r["verdict"] == "baseline"
    mean = "—" if not r.get("two_way_method") else _fmt_ci(r["mean"], r["mean_2way_lo"], r["mean_2way_hi"])
    delta = "—" if base or not math.isfinite(r.get("delta_2way_lo", math.nan)) else \
        _fmt_ci(r["delta"], r["delta_2way_lo"], r["delta_2way_hi"])
    return [mean, delta]


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


def _value_bounds(metric: str) -> tuple[float, float]:
    """The range a summary's values lie in (its registered ``bounds``); unbounded if unknown."""
    try:
        return resolve_summary(metric).bounds
    except ValueError:
        return (-math.inf, math.inf)


def _cut(estimate: stats.Estimate, bounds: tuple[float, float]) -> stats.Estimate:
    """The interval intersected with the values' range. The estimand (a mean or IQM of values in
    the range) lies in it, so every interval that covered it still does: coverage is unchanged."""
    lo, hi = np.clip([estimate.lo, estimate.hi], *bounds)  # NaN (no interval) stays NaN
    return dataclasses.replace(estimate, lo=float(lo), hi=float(hi))


def _ranked_values(arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes,
                   hib: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both arms' runs as ranks, failed/stopped/censored runs tied at the worst rank (for P(improve))."""
    worst = -math.inf if hib else math.inf
    x = np.concatenate([arm.values, np.full(arm.n_worst, worst)])
    y = np.concatenate([base.values, np.full(base.n_worst, worst)])
    ranks = stats.sps.rankdata(np.concatenate([x, y]))
    return ranks[: x.size], ranks[x.size:]


def _success_rates(arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes) -> str:
    """"got there" (not censored) in each arm among runs that ended with a value, compared with
    Boschloo's exact test (``scipy.stats.boschloo_exact``): a second view of a censored metric."""
    def got(a: _outcomes.ArmOutcomes) -> tuple[int, int]:
        return a.counts["finished"], a.counts["finished"] + a.counts["censored"]

    (kx, nx), (ky, ny) = got(arm), got(base)
    text = f"got there in {kx}/{nx} vs baseline {ky}/{ny} runs"
    if nx and ny:
        p = stats.sps.boschloo_exact([[kx, ky], [nx - kx, ny - ky]]).pvalue
        text += f" (Boschloo exact p = {float(min(p, 1.0)):.3g})"
    return text


def compare_variants(
    summary_df: pd.DataFrame,
    baseline: str,
    metrics: Sequence[str],
    higher_is_better: Mapping[str, bool | None] | None = None,
    *,
    variant_col: str = "variant",
    arm_col: str | None = _arms.ARM_COLUMN,
    seed_col: str = "seed",
    strata: str | None = None,
    confidence: float = 0.95,
    correction: str = "holm",
    family: str = "metric",
    pairing: str = "auto",
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    power: float = 0.8,
    sesoi: Mapping[str, float] | None = None,
    rng: int | np.random.Generator | None = 0,
    problems: pd.DataFrame | None = None,
    activity: Mapping[str, _activity.Gate] | None = None,
) -> ComparisonTable:
    """Compare every arm (variant) with its baseline on each metric column of ``summary_df``.

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
    with the reason); P(improvement) with a
    exact binomial CI when paired, else a bootstrap CI; p-values corrected with ``correction``
    (``holm``/``bonferroni``/``none``) across the variants of each metric (``family="metric"``) or
    across all metrics and variants (``family="all"``); simultaneous (Bonferroni) CIs of the
    differences over the family; with ``sesoi`` (metric -> smallest effect of interest, in the
    metric's units) the TOST equivalence test, corrected the same way; the verdict and its
    ``status``; and the minimum detectable effect at ``power``. With arms, "variant" above
    reads "arm": the correction runs across all arm comparisons of a metric (or of the table).

    ``activity``: ``arm -> Gate`` (:func:`workbench.compare.activity.activity_gates`): an arm whose
    changed knobs acted below their minimum gets the verdict "not testable: <knob> acted on <x>% of
    tokens (min <y>%)" on every metric but the knob's own activity metric.

    ``n_resamples=0`` skips the bootstraps (IQM and P(improvement) without intervals; verdicts do
    not use them): for simulations. ``rng`` seeds every bootstrap (each cell gets its own stream derived from ``rng``, metric and
    arm, so a cell does not change when arms or metrics are added).

    ``problems``: per-problem eval results (``run_id, step, problem_id, correct``, e.g.
    :meth:`workbench.results.reader.StudyReader.problem_results`; ``summary_df`` then needs its
    ``run_id`` column). For eval-based summaries the table then also has intervals over seeds *and*
    problems (``mean_2way_*``, ``delta_2way_*``, ``two_way_method``; :mod:`workbench.compare.problems`).
    Verdicts do not use them.
    """
    metrics = list(metrics)
    _check_arguments(summary_df, metrics, family=family, confidence=confidence, correction=correction,
                     columns=[variant_col, seed_col, *metrics] + ([strata] if strata else []))
    arm_variant = _arms.arm_variants(summary_df, variant_col, arm_col or "")  # arm -> variant
    baselines = _arms.match_baselines(arm_variant, baseline)  # arm -> its baseline arm (None: none)
    base_arms = [a for a, b in baselines.items() if a == b]
    others = [a for a in arm_variant if baselines[a] != a]
    plan = _CellPlan(confidence=confidence, pairing=pairing, n_resamples=n_resamples, power=power,
                     seed=_table_seed(rng), strata=strata)
    directions = {m: _direction(m, higher_is_better) for m in metrics}
    bounds = {m: _value_bounds(m) for m in metrics}
    units = _arms.arm_column(summary_df, variant_col, arm_col or "")
    groups = {a: g for a, g in summary_df.groupby(units.to_numpy(), sort=False)}
    censored_as = dict(getattr(summary_df, "attrs", {}).get("censored", {}))
    outcomes = {(metric, arm): _outcomes.arm_outcomes(groups[arm], metric, seed_col=seed_col,
                                                      censored_as=censored_as.get(metric, ""))
                for metric in metrics for arm in arm_variant}

    cells = [
        _compare_cell(metric, variant, groups[variant], outcomes, baseline=baseline, base_arm=baselines[variant],
                      variant_of=arm_variant[variant], higher_is_better=directions[metric],
                      bounds=bounds[metric], plan=plan)
        for metric in metrics
        for variant in [*base_arms, *others]  # an arm; named variant as in a study without a grid
    ]
    sesoi = _check_sesoi(sesoi, metrics)
    for cell in cells:
        if cell.diff is not None and not cell.by_rank:
            cell.row["sesoi"] = sesoi.get(cell.row["metric"], math.nan)
            cell.tost_p = stats.tost_p(cell.diff, cell.row["sesoi"])
    _correct(cells, correction=correction, family=family, alpha=plan.alpha)
    for cell in cells:
        _decide(cell, outcomes, confidence=confidence, alpha=plan.alpha, power=power)
        if activity and cell.diff is not None:
            _activity.apply_gate(cell.row, activity.get(cell.row["variant"]), _summary_reads(cell.row["metric"]))
    for cell in cells:
        cell.row["status"] = cell.row.get("status") or wording.status(cell.row["verdict"])
    if problems is not None:  # intervals over seeds and problems, beside the seed-only ones
        _problems.add_intervals([c.row for c in cells], summary_df, problems, units=units, seed_col=seed_col,
                                confidence=confidence)
    rows = _ranked_rows([c.row for c in cells], metrics, directions)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["paired"] = df["paired"].astype("boolean")
    settings = {
        "family": family, "pairing": pairing, "n_resamples": n_resamples, "power": power, "rng": plan.seed,
        "delta_ci": "simultaneous (Bonferroni over the family)", "equivalence": "TOST at sesoi",
        "strata": strata, "bootstrap": "percentile (P(improve)); BCa (IQM with strata)",
        "iqm_ci": stats.IQM_T_METHOD, "mean_ci": "t", "arms": any(a != v for a, v in arm_variant.items()),
        "two_way_ci": _problems.TWO_WAY_METHOD if (df["two_way_method"] != "").any() else "",
    }
    return ComparisonTable(df=df, baseline=baseline, metrics=metrics, higher_is_better=directions,
                           confidence=confidence, correction=correction, settings=settings)


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


def _check_arguments(summary_df: pd.DataFrame, metrics: list[str], *, family: str, confidence: float,
                     correction: str, columns: list[str]) -> None:
    """``ValueError`` naming the problem with :func:`compare_variants`' arguments, if any."""
    if not metrics:
        raise ValueError("no metrics to compare")
    if family not in ("metric", "all"):
        raise ValueError(f"unknown family {family!r} (valid: all, metric)")
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


def _estimates(arm: _outcomes.ArmOutcomes, strata: np.ndarray | None, bounds: tuple[float, float],
               plan: _CellPlan, *keys: str) -> tuple[stats.Estimate, stats.Estimate]:
    """Mean and IQM of an arm's finished runs with their CIs, cut to the values' range."""
    mean = _cut(stats.mean_ci(arm.values, confidence=plan.confidence), bounds)
    if plan.n_resamples <= 0:  # no bootstrap asked for (simulations): the IQM without its interval
        value = float(stats.iqm(arm.values)) if arm.values.size else math.nan
        return mean, stats.Estimate(value, math.nan, math.nan, n=arm.values.size)
    iqm = stats.iqm_ci(arm.values, strata=strata, confidence=plan.confidence, n_resamples=plan.n_resamples,
                       rng=_child_rng(plan.seed, *keys, "iqm"))
    return mean, _cut(iqm, bounds)


def _estimate_row(metric: str, variant: str, base_arm: str | None, arm: _outcomes.ArmOutcomes,
                  mean: stats.Estimate, iqm: stats.Estimate, higher_is_better: bool | None) -> dict[str, Any]:
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


def _compare_cell(metric: str, variant: str, runs: pd.DataFrame,
                  outcomes: Mapping[tuple[str, str], _outcomes.ArmOutcomes], *, baseline: str,
                  base_arm: str | None, variant_of: str, higher_is_better: bool | None,
                  bounds: tuple[float, float], plan: _CellPlan) -> _Cell:
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


def _test_against(row: dict[str, Any], arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes,
                  plan: _CellPlan) -> tuple[stats.Difference, bool]:
    """Fill ``row``'s comparison with ``base``: delta, the test and its p-value, P(improvement).
    Returns the difference and whether the rank test decides (some runs failed,
    stopped or censored: ranked worst)."""
    metric, variant, hib = row["metric"], row["variant"], row["higher_is_better"]
    diff = stats.mean_difference(arm.values, base.values, x_seeds=arm.seeds, y_seeds=base.seeds,
                                 pairing=plan.pairing, rng=_child_rng(plan.seed, metric, variant, "perm"))
    by_rank = bool(arm.n_worst or base.n_worst)  # missing values alone: t-test, verdict may be withheld
    if by_rank and hib is not None:
        p_value, _ = stats.rank_test(arm.values, base.values, x_worst=arm.n_worst, y_worst=base.n_worst,
                                     higher_is_better=hib, rng=_child_rng(plan.seed, metric, variant, "rank"))
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
        poi = _improvement(x_ranked, y_ranked, higher_is_better=hib is not False, plan=plan,
                           rng=_child_rng(plan.seed, metric, variant, "poi"))
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


def _improvement(x: np.ndarray, y: np.ndarray, *, higher_is_better: bool, plan: _CellPlan,
                 rng: np.random.Generator) -> stats.Estimate:
    """P(improvement) of X over Y, with its percentile bootstrap CI unless no resamples are asked for."""
    if plan.n_resamples <= 0:
        value = stats.probability_of_improvement(x, y, higher_is_better=higher_is_better)
        return stats.Estimate(value, math.nan, math.nan, n=0)
    return stats.probability_of_improvement_ci(x, y, higher_is_better=higher_is_better,
                                               confidence=plan.confidence, n_resamples=plan.n_resamples,
                                               method="percentile", rng=rng)


def _comparison_notes(cell: _Cell, arm: _outcomes.ArmOutcomes, base: _outcomes.ArmOutcomes,
                      earlier: list[str]) -> list[str]:
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


def _correct(cells: list[_Cell], *, correction: str, family: str, alpha: float) -> None:
    """Correct every comparison for multiplicity, per metric (``family="metric"``) or across the
    table (``"all"``): ``p_adjusted`` and the level each difference was tested at
    (``cell.holm_level``); ``delta_level``, the simultaneous (Bonferroni) level of the family's
    reported intervals; and ``p_equivalence``, the TOST p-values corrected the same way over the
    comparisons that have one."""
    families: dict[str, list[_Cell]] = {}
    for cell in cells:
        if cell.diff is not None:
            families.setdefault(cell.row["metric"] if family == "metric" else "all", []).append(cell)
    for members in families.values():
        adj, div = stats.adjust_pvalues([c.row["p_value"] for c in members], correction, alpha=alpha)
        n_tested = int(np.isfinite(div).sum())
        for c, a, d in zip(members, adj, div, strict=True):
            c.row["p_adjusted"] = float(a)
            c.holm_level = 1.0 - alpha / d if math.isfinite(d) else math.nan
            c.row["delta_level"] = (stats.simultaneous_levels(n_tested, alpha) if correction != "none"
                                    else 1.0 - alpha) if math.isfinite(d) else math.nan
        eq_adj, _ = stats.adjust_pvalues([c.tost_p for c in members], correction, alpha=alpha)
        for c, a in zip(members, eq_adj, strict=True):
            c.row["p_equivalence"] = float(a)


def _decide(cell: _Cell, outcomes: Mapping[tuple[str, str], _outcomes.ArmOutcomes], *, confidence: float,
            alpha: float, power: float) -> None:
    """Fill a compared row's simultaneous CI of delta, its minimum detectable effect and its
    verdict (after :func:`_correct`). The verdict is the corrected test's, with the interval at
    the level it was tested at (which excludes 0 exactly when it rejects)."""
    r, diff = cell.row, cell.diff
    if diff is None:
        return
    arm, base = outcomes[r["metric"], r["variant"]], outcomes[r["metric"], r["baseline_arm"]]
    level = cell.holm_level if math.isfinite(cell.holm_level) else confidence
    t_lo, t_hi = diff.interval(level)
    if cell.by_rank:
        r["delta_level"] = math.nan
        r["verdict"] = wording.ranked_verdict(arm, base, higher_is_better=r["higher_is_better"],
                                              p_adjusted=r["p_adjusted"], p_improve=r["p_improve"],
                                              t_lo=t_lo, t_hi=t_hi, alpha=alpha)
        return
    shown = r["delta_level"] if math.isfinite(r["delta_level"]) else confidence
    r["delta_lo"], r["delta_hi"] = diff.interval(shown)
    if not (math.isfinite(r["delta_lo"]) or math.isinf(r["delta_lo"])):
        r["delta_level"] = math.nan
    r["mde"] = stats.minimum_detectable_effect(diff, alpha=1.0 - level, power=power)
    equivalent = math.isfinite(r["p_equivalence"]) and r["p_equivalence"] < alpha
    r["verdict"] = wording.verdict(
        diff.delta, t_lo, t_hi, r["p_adjusted"], alpha=alpha, higher_is_better=r["higher_is_better"],
        n_x=r["n_seeds"], n_y=base.counts["finished"], mde=r["mde"], sesoi=r["sesoi"], equivalent=equivalent,
    )
    decided = stats.significant(t_lo, t_hi, r["p_adjusted"], alpha=alpha)
    if decided and r["delta_lo"] <= 0.0 <= r["delta_hi"]:
        r["note"] = "; ".join(x for x in (r["note"], f"{r['verdict']} by the step-down test at "
                                          f"{level:.4g}; the simultaneous interval, wider, includes 0") if x)
    unknown = [x for x in (arm.reason(), f"baseline: {base.reason()}" if base.reason() else "") if x]
    if unknown and wording.status(r["verdict"]) in ("better", "worse", "higher", "lower", "equivalent"):
        r["verdict"] = wording.withheld("; ".join(unknown))  # missing values could go either way


def _ranked_rows(rows: list[dict[str, Any]], metrics: list[str],
                 directions: Mapping[str, bool | None]) -> list[dict[str, Any]]:
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
    return sorted(rows, key=lambda r: (order[r["metric"]], math.isnan(r["rank"]),
                                       0.0 if math.isnan(r["rank"]) else r["rank"]))
