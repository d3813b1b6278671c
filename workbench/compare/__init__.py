"""Which variant wins, by how much, with what confidence: seed statistics over per-run summaries.

Public surface::

    from workbench.compare import summarize_runs, align_curves, compare_variants

    summary = summarize_runs(history, runs, ["final_eval_accuracy", "final_length_ratio"])
    table = compare_variants(summary, baseline="grpo",
                             metrics=["final_eval_accuracy", "final_length_ratio"])
    table.df                     # tidy: variant, metric, runs per outcome, mean [CI], IQM [CI],
                                 # delta [CI], P(improve) [CI], p, p_adjusted, verdict, status, mde, ...
    table.to_markdown(); table.to_csv(); table.to_json()
    bands = curve_bands(align_curves(history, "eval/accuracy", x="tokens"))   # for plots

Modules: ``summary`` (registered per-run summaries, curve alignment), ``stats`` (t and trimmed-mean
t intervals, bootstrap CIs, P(improvement), t-tests, the rank test, Holm, power; the statistical
choices are documented there), ``outcomes`` (finished / failed / stopped / censored / missing runs
and the one policy for them), ``report`` (the comparison table), ``wording`` (its verdicts in
words: "better", "equivalent (|Δ| < 0.03)", "inconclusive with 5 seeds (MDE 0.041)", "withheld: ..."), ``arms`` (the units
compared: one per variant and grid point, each matched with the baseline at its grid point), ``activity``
(the knob-activity gate: "not testable" when the knobs an arm changes barely acted), ``panels`` (what a dashboard panel shows: curves
with their bands, summaries, marker positions; :mod:`workbench.viz` only draws them). Pure pandas/numpy/scipy: no plotting, no MLflow.
"""

from .outcomes import OUTCOMES, arm_outcomes, run_outcomes
from .panels import CurvePanel, SummaryPanel, curve_panel, summary_panel
from .report import COLUMNS, ComparisonTable, compare_variants
from .stats import (
    CORRECTIONS,
    STATISTICS,
    Difference,
    Estimate,
    adjust_pvalues,
    bootstrap_ci,
    curve_bands,
    iqm,
    iqm_ci,
    mean_ci,
    mean_difference,
    minimum_detectable_effect,
    paired_improvement_ci,
    planned_seeds,
    probability_of_improvement,
    probability_of_improvement_ci,
    rank_test,
    significant,
    simultaneous_levels,
    t_interval,
    t_test_power,
    tost_p,
)
from .summary import (
    SUMMARY_METRICS,
    RunCurves,
    SummaryMetric,
    align_curves,
    iter_runs,
    resolve_summary,
    summarize_runs,
    summary_metric,
)
from .wording import verdict

__all__ = [
    "COLUMNS",
    "CORRECTIONS",
    "OUTCOMES",
    "STATISTICS",
    "SUMMARY_METRICS",
    "ComparisonTable",
    "CurvePanel",
    "Difference",
    "Estimate",
    "RunCurves",
    "SummaryMetric",
    "SummaryPanel",
    "adjust_pvalues",
    "align_curves",
    "arm_outcomes",
    "bootstrap_ci",
    "compare_variants",
    "curve_bands",
    "curve_panel",
    "iqm",
    "iqm_ci",
    "iter_runs",
    "mean_ci",
    "mean_difference",
    "minimum_detectable_effect",
    "paired_improvement_ci",
    "planned_seeds",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "rank_test",
    "resolve_summary",
    "run_outcomes",
    "significant",
    "simultaneous_levels",
    "summarize_runs",
    "summary_metric",
    "summary_panel",
    "t_interval",
    "t_test_power",
    "tost_p",
    "verdict",
]
