"""The comparison table: what :func:`workbench.compare.decide.compare_variants` decided, as a tidy frame,
and its renderings (markdown, CSV, JSON) and sentences (headlines, definitions). It decides nothing:
every number and verdict comes in :attr:`ComparisonTable.df`.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import problems as _problems
from . import wording
from .summary import resolve_summary

__all__ = ["COLUMNS", "COUNT_COLUMNS", "DELTA_HEADER", "ComparisonTable", "delta_cell", "runs_phrase", "value_bounds"]

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
    "delta_ci",
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


def _fmt_ci(est: Any, lo: Any, hi: Any, *, thresholds: tuple[float, ...] = ()) -> str:
    """``est [lo, hi]`` with the bounds rounded outward, never onto or across a threshold
    (:func:`workbench.compare.wording.ci_text`)."""
    return wording.ci_text(float(est), float(lo), float(hi), thresholds=thresholds)


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
      ``delta_lo``/``delta_hi`` its t interval at level ``delta_level``, the interval of the row's
      word (``delta_ci`` names it): beside better / worse / inconclusive the level the correction
      tested the row at (``Holm step-down``: ``1 - alpha/d``, ``d`` Holm's divisor at the row's step,
      so the interval excludes 0 exactly when Holm rejects; ``Bonferroni``: ``1 - alpha/m``;
      ``uncorrected``: ``1 - alpha``), beside equivalent the TOST's ``1 - 2 alpha/d`` (``TOST``:
      inside ±SESOI exactly when the corrected TOST rejects). No interval when the test is the rank
      test (runs failed, stopped or censored). Printed bounds are rounded outward, never onto or
      across 0 or ±SESOI (:func:`workbench.compare.wording.interval_texts`).
    - ``paired``: seeds matched with the baseline (paired t) or not (Welch t).
    - ``p_improve``: P(variant improves on baseline) in the metric's direction (for a metric
      without a direction, P(variant > baseline)): paired, the share of seeds where the variant
      beats the baseline at the same seed (exact Clopper-Pearson CI); unpaired, over all pairs of
      runs, the Mann-Whitney probability (Newcombe's score interval, 2006, method 5: no ``0 [0, 0]`` when
      the arms' runs are separated).
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
        """``grpo`` or ``grpo at the same grid point`` (for titles); a control arm says so."""
        name = self.arm_label(str(self.baseline))
        return f"{name} at the same grid point" if self.per_grid_point else name

    @property
    def controls(self) -> dict[str, str]:
        """``{arm or variant: reward control}`` of the control arms (``settings["controls"]``, set by
        ``workbench compare`` from the runs' ``reward.control``)."""
        return dict(self.settings.get("controls") or {})

    def arm_label(self, name: str) -> str:
        """An arm's name in every table and headline: ``random (control: random reward)`` for a control arm."""
        return wording.control_label(name, self.controls.get(name))

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

        text = {
            "metric",
            "variant",
            "verdict",
            "status",
            "note",
            "test",
            "higher_is_better",
            "paired",
            "baseline_arm",
            "mean_method",
            "iqm_method",
            "two_way_method",
            "delta_ci",
        }
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
        and the verdict in words (:func:`workbench.compare.wording.headline`); an inconclusive one
        of a primary metric is followed, on its next line, by what would decide it (the seeds
        ``workbench plan`` sizes it at and the ``--until-decided`` command), when ``compare`` set it."""
        lines = []
        for metric in self.metrics:
            rows = self.for_metric(metric)
            seeds_of = dict(zip(rows["variant"], rows["n_seeds"], strict=True))
            points = value_bounds(metric) == (0.0, 1.0)  # a rate: differences in percentage points
            looks = (self.settings.get("design_looks") or {}).get(metric, {})
            futility = (self.settings.get("design_futility") or {}).get(metric, {})
            for r in rows.to_dict("records"):
                if r["verdict"] == "baseline":
                    continue
                base = r["baseline_arm"] or self.baseline
                controls = self.controls
                # a sequential design's decision: its look tested both arms on the look's seeds (n_seeds is the look's)
                look = str(looks.get(str(r["variant"]), ""))
                lines.append(
                    wording.headline(
                        variant=str(r["variant"]),
                        baseline=str(base),
                        metric=metric,
                        status_word=str(r["status"]),
                        verdict_text=str(r["verdict"]),
                        delta=float(r["delta"]),
                        lo=float(r["delta_lo"]),
                        hi=float(r["delta_hi"]),
                        level=float(r["delta_level"]),
                        n_x=int(r["n_seeds"]),
                        n_y=int(r["n_seeds"]) if look else int(seeds_of.get(base, 0)),
                        mde=float(r["mde"]),
                        sesoi=float(r["sesoi"]),
                        points=points,
                        ranked=str(r["test"]).startswith("Mann-Whitney"),
                        interval=_tost_word(r),
                        exploratory=self.is_secondary(metric),
                        unit=self.replicate_unit,
                        variant_control=controls.get(str(r["variant"])),
                        baseline_control=controls.get(str(base)),
                        look=look,
                        futility=futility.get(str(r["variant"])),
                    )
                    + self._to_decide(metric, r)
                )
        return lines

    @property
    def replicate_unit(self) -> str:
        """What the comparison's replicates are: ``"checkpoint"`` (independent cold starts, seeds averaged in
        each) or ``"seed"`` (RL seeds of one checkpoint per arm); :mod:`workbench.compare.checkpoints`."""
        return str(self.settings.get("unit") or "seed")

    def _replicates_words(self) -> str:
        if self.replicate_unit == "checkpoint":
            return "checkpoints (independent cold starts, each the mean of its RL seeds)"
        return "seeds of one checkpoint" if self.settings.get("replication") else "seeds"

    def _to_decide(self, metric: str, r: Mapping[str, Any]) -> str:
        """What would decide an inconclusive comparison, as the line after its headline ("" when none
        is known: ``workbench compare`` sets ``settings["to_decide"]`` from the study's seed plan)."""
        line = (self.settings.get("to_decide") or {}).get(metric, "")
        return f"\n{line}" if line and r["status"] == "inconclusive" else ""

    def is_secondary(self, metric: str) -> bool:
        """Whether the study declared ``metric`` secondary (``compare.primary`` names the others):
        reported, but not what the study was designed to decide."""
        return metric in (self.settings.get("secondary") or ())

    def family_words(self) -> str:
        """Which comparisons were corrected together, in words (every output's footnote)."""
        family = self.settings.get("family", "metric")
        if family == "primary":
            if self.settings.get("secondary"):
                return (
                    "family: every comparison of the primary metrics together, study-wide; each secondary "
                    "metric on its own, exploratory"
                )
            return "family: every comparison of every metric together, study-wide"
        return {"metric": "family: each metric's comparisons", "all": "family: the whole table"}.get(family, family)

    def title_role(self, metric: str) -> str:
        """What opens a metric's table title in every format: ``"secondary, exploratory; "`` or nothing
        (a secondary metric is outside the study-wide family of the primary metrics)."""
        return "secondary, exploratory; " if self.is_secondary(metric) else ""

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
        if self.settings.get("replication"):  # every output prints these lines under its headline
            out.append(str(self.settings["replication"]))
        return out

    def two_way(self, metric: str) -> str:
        """What the metric's intervals over seeds and problems are, in one sentence ("" if none)."""
        rows = self.for_metric(metric)
        rows = rows[rows["two_way_method"].fillna("") != ""] if "two_way_method" in rows.columns else rows[:0]
        if rows.empty:
            return ""
        n = ", ".join(str(int(k)) for k in pd.unique(rows["n_problems"]))
        return (
            f"Intervals over seeds and problems ({n} eval problems): {rows['two_way_method'].iloc[0]}; they "
            "add the draw of the eval problems to the seed-only intervals (docs/reports.md)."
        )

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
                "n_checkpoints" if self.replicate_unit == "checkpoint" else "n_seeds",
                "runs",
                f"mean [{level} CI]",
                f"IQM [{level} CI]",
                DELTA_HEADER,
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
                cells = _markdown_cells(r | {"variant": self.arm_label(str(r["variant"]))}, with_baseline_arm=vs)
                if two_way:
                    cells += _two_way_cells(r)
                out.write("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
            notes = [f"{r['variant']}: {r['note']}" for r in self.for_metric(metric).to_dict("records") if r["note"]]
            if notes:
                out.write("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
            if two_way:
                out.write(f"\n{two_way}\n")
            out.write("\n")
        for key in (
            "sequential",
            "seeds_added",
            "earlier_design",
        ):  # set by `workbench compare` from the recorded looks
            if self.settings.get(key):
                out.write(f"**{self.settings[key]}**\n\n")
        out.write(
            f"Δ = {self.unit} − baseline; the CI of Δ is the t interval over {self._replicates_words()} at the level the row's own test "
            f"used ({self.family_words()}): the {self.correction}-corrected test's level "
            f"beside better/worse/inconclusive, the TOST's 1 − 2α/d interval beside equivalent (equivalent: TOST "
            f"at the metric's SESOI, {self.correction}-corrected); bounds rounded outward; MDE: minimum detectable effect at the seeds run ({self.settings.get('power', 0.8):.0%} "
            f"power); mean CIs: t interval; IQM CIs: trimmed-mean t (Tukey-McLaughlin; t below 4 seeds); P(improve): "
            f"paired by seed with an exact binomial CI, else over all run pairs (Mann-Whitney) with Newcombe's score "
            f"interval. n_seeds = "
            f"the number of finished runs with a value; runs failed, stopped early or censored are ranked worst "
            f"(Mann-Whitney) and can withhold a verdict (docs/reports.md).\n"
        )
        return out.getvalue()


#: The header of the Δ column in every table (markdown, HTML report, terminal).
DELTA_HEADER = "Δ vs baseline [CI at tested level]"


def _tost_word(r: Mapping[str, Any]) -> str:
    return "TOST" if r.get("delta_ci") == "TOST" else ""


def delta_cell(r: Mapping[str, Any]) -> str:
    """A compared row's Δ with its interval, as every table prints it: bounds rounded outward, never onto
    or across 0 or ±SESOI, and the level the row used (``TOST`` beside an equivalent row's)."""
    text = _fmt_ci(
        r["delta"], r["delta_lo"], r["delta_hi"], thresholds=wording.delta_thresholds(float(r.get("sesoi", math.nan)))
    )
    level = float(r.get("delta_level", math.nan))
    if math.isfinite(level) and not math.isnan(float(r["delta_lo"])):
        text += f" ({wording.level_percent(level)}{' TOST' if _tost_word(r) else ''})"
    return text


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
        "—" if base else delta_cell(r),
        "—" if base else _fmt_ci(r["p_improve"], r["p_improve_lo"], r["p_improve_hi"], thresholds=(0.5,)),
        "—" if base else _fmt_p(r["p_adjusted"]),
        str(r["verdict"]),
        str(r["status"]),
    ]


def _two_way_cells(r: Mapping[str, Any]) -> list[str]:
    """A row's intervals over seeds and problems (markdown): mean, then Δ (dashes where none)."""
    base = r["verdict"] == "baseline"
    mean = "—" if not r.get("two_way_method") else _fmt_ci(r["mean"], r["mean_2way_lo"], r["mean_2way_hi"])
    delta = (
        "—"
        if base or not math.isfinite(r.get("delta_2way_lo", math.nan))
        else _fmt_ci(
            r["delta"],
            r["delta_2way_lo"],
            r["delta_2way_hi"],
            thresholds=wording.delta_thresholds(float(r.get("sesoi", math.nan))),
        )
    )
    return [mean, delta]


def value_bounds(metric: str) -> tuple[float, float]:
    """The range a summary's values lie in (its registered ``bounds``); unbounded if unknown."""
    try:
        return resolve_summary(metric).bounds
    except ValueError:
        return (-math.inf, math.inf)
