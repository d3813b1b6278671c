"""Which variant wins, by how much, with what confidence: seed statistics over per-run summaries.

Public surface::

    from workbench.compare import summarize_runs, align_curves, compare_variants

    summary = summarize_runs(history, runs, ["final_eval_accuracy", "final_length_ratio"])
    table = compare_variants(summary, baseline="grpo",
                             metrics=["final_eval_accuracy", "final_length_ratio"])
    table.df                     # tidy: variant, metric, mean [CI], IQM [CI], delta [CI], P(improve) [CI],
                                 # p, p_adjusted, verdict, seeds_needed, rank, ...
    table.to_markdown(); table.to_csv(); table.to_json()
    bands = curve_bands(align_curves(history, "eval/accuracy", x="tokens"))   # for plots

Modules: ``summary`` (registered per-run summaries, curve alignment), ``stats`` (bootstrap CIs,
P(improvement), t-tests, Holm, power; the statistical choices are documented there), ``report``
(the comparison table), ``arms`` (the units compared: one per variant and grid point, each
matched with the baseline at its grid point). Pure pandas/numpy/scipy: no plotting, no MLflow.
"""

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
    mean_difference,
    probability_of_improvement,
    probability_of_improvement_ci,
    seeds_needed,
    t_test_power,
    verdict,
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

__all__ = [
    "COLUMNS",
    "CORRECTIONS",
    "STATISTICS",
    "SUMMARY_METRICS",
    "ComparisonTable",
    "Difference",
    "Estimate",
    "RunCurves",
    "SummaryMetric",
    "adjust_pvalues",
    "align_curves",
    "bootstrap_ci",
    "compare_variants",
    "curve_bands",
    "iqm",
    "iter_runs",
    "mean_difference",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "resolve_summary",
    "seeds_needed",
    "summarize_runs",
    "summary_metric",
    "t_test_power",
    "verdict",
]
