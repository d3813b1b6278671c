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
and the one policy for them), ``decide`` (``compare_variants``: estimates, tests, corrections, verdicts), ``table``
(the comparison table it returns, and its markdown, CSV and JSON), ``wording`` (its verdicts in
words: "better", "equivalent (|Δ| < 0.03)", "inconclusive with 5 seeds (MDE 0.041)", "withheld: ..."), ``arms`` (the units
compared: one per variant and grid point, each matched with the baseline at its grid point), ``activity``
(the knob-activity gate: "not testable" when the knobs an arm changes barely acted), ``checkpoints`` (the unit
of replication: RL seeds of one checkpoint, or independent cold starts with the seeds averaged in each), ``panels`` (what a dashboard panel shows: curves
with their bands, summaries, marker positions; :mod:`workbench.viz` only draws them). Pure pandas/numpy/scipy: no plotting, no MLflow.

The names below load their submodule on first use (PEP 562 module ``__getattr__``): a module that needs
only the summaries' registry (dashboard specs, an import's health check) does not pay for scipy and
statsmodels (~55 MB and a second of start-up).
"""

from __future__ import annotations

import importlib
from typing import Any

#: submodule -> the names it defines that the package hands on, imported on first access
_EXPORTS = {
    "decide": ("CompareSettings", "compare_variants"),
    "outcomes": ("OUTCOMES", "arm_outcomes", "run_outcomes"),
    "panels": ("CurvePanel", "SummaryPanel", "curve_panel", "summary_panel"),
    "stats": (
        "CORRECTIONS",
        "Difference",
        "Estimate",
        "STATISTICS",
        "adjust_pvalues",
        "bootstrap_ci",
        "curve_bands",
        "iqm",
        "iqm_ci",
        "mean_ci",
        "mean_difference",
        "minimum_detectable_effect",
        "paired_improvement_ci",
        "planned_seeds",
        "probability_of_improvement",
        "probability_of_improvement_ci",
        "mann_whitney_improvement_ci",
        "rank_test",
        "significant",
        "simultaneous_levels",
        "t_interval",
        "t_test_power",
        "tost_p",
    ),
    "summary": (
        "RunCurves",
        "SUMMARY_METRICS",
        "SummaryMetric",
        "align_curves",
        "iter_runs",
        "resolve_summary",
        "summarize_runs",
        "summary_metric",
    ),
    "table": ("COLUMNS", "ComparisonTable"),
    "wording": ("verdict",),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value  # the next access is a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
