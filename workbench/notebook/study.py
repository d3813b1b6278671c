"""The notebook API: a study's runs as pandas frames, and the comparison and health tables the CLI
prints, as objects.

    from workbench import load_study

    study = load_study("grpo-vs-dr-grpo")      # a study name (its MLflow experiment) or its YAML file
    study.history                              # one row per logged value: run_id, variant, seed, step, metric, value
    study.runs                                 # one row per run: status, health, tags, params
    table = study.compare()                    # the ComparisonTable `workbench compare` prints
    table.headlines()                          # its first lines: one sentence per comparison
    table.df                                   # the tidy table (mean, CIs, Δ, p, verdict, ...)
    study.health()                             # runs × health rules, as `workbench health` shows them
    study.rollouts(variant="dapo", outcome="incorrect", longest=10)   # stored completions, as `workbench rollouts`
    study.same_prompts("grpo", "dapo", differing=True)                # two variants' answers to the same problems

``compare`` and ``health`` are methods of the loaded study rather than names of their own:
``workbench.compare`` and ``workbench.health`` are the statistics and health-rule packages, and
Python gives one name to one thing.

Errors: what the CLI reports as one line and exit code 2 (an unknown study, metric or baseline)
raises :class:`workbench.errors.AnalysisError` (a ``ValueError``) with that line. Nothing here writes to
the store. The computing is :mod:`workbench.analysis`'s, as the CLI's is; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from workbench.analysis.comparison import compare_loaded, comparison_metrics, load_comparison
from workbench.analysis.health_table import health_cells, recheck_reports
from workbench.analysis.next_step import add_next_steps
from workbench.analysis.rollouts import query_rollouts, same_prompts
from workbench.analysis.target import Target, resolve_target
from workbench.compare import ComparisonTable, summarize_runs

__all__ = ["Study", "load_study"]


@dataclass
class Study:
    """A study loaded from its MLflow store: frames, and the tables of ``compare`` and ``health``."""

    name: str
    tracking_uri: str
    history: pd.DataFrame  # tidy: run_id, variant, seed, step, metric, value (workbench.results.reader)
    runs: pd.DataFrame  # one row per child run: run_id, variant, seed, status, health, params, tags
    settings: Mapping[str, Any] = field(default_factory=dict)  # the study's `compare:` section, if logged
    _target: Target | None = field(default=None, repr=False)

    def summary(self, metrics: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per run, one column per summary metric (default: the study's ``compare.metrics``,
        else ``final_eval_accuracy``), as ``compare`` computes them from every run loaded."""
        names = comparison_metrics(metrics, dict(self.settings))
        return summarize_runs(self.history, self.runs, names)

    def compare(
        self,
        metrics: Sequence[str] | None = None,
        *,
        baseline: str | None = None,
        sesoi: Mapping[str, float] | None = None,
        include_unfinished: bool = False,
    ) -> ComparisonTable:
        """The comparison ``workbench compare`` prints, with the same defaults (the study's
        ``compare:`` metrics, baseline and SESOI): a :class:`~workbench.compare.ComparisonTable`;
        ``.headlines()`` are its first lines, ``.df`` its table. Records nothing in the store."""
        options = [f"{m}={v}" for m, v in (sesoi or {}).items()]
        loaded = load_comparison(self._target, metrics, sesoi=options, include_unfinished=include_unfinished)
        done = compare_loaded(loaded, baseline=baseline, record_look=False)
        add_next_steps(loaded, done)  # an inconclusive verdict says what would decide it, as in `compare` (#52)
        return done.table

    def health(self, *, recheck: bool = False, preset: str | None = None) -> pd.DataFrame:
        """Runs × health rules, tidy (``run_id, label, variant, seed, rule, state, step, value,
        threshold, message, source``), as ``workbench health`` shows them: from each run's
        ``health.json``, or recomputed from the logged metrics (``recheck``, with ``preset``)."""
        if recheck or preset is not None:
            reports = recheck_reports(self.history, self.runs, preset)
        else:
            reports = self._target.reader.health_reports(self.runs)
        return health_cells(self.runs, reports)

    def rollouts(self, **filters: Any) -> pd.DataFrame:
        """The study's stored completions (every sampled one: docs/rollouts.md), one row each, filtered as
        ``workbench rollouts`` filters them: ``variant``, ``seed``, ``split``, ``steps=(first, last)``, ``outcome``,
        ``min_reward``, ``max_reward``, ``worst``, ``longest`` (:func:`workbench.analysis.rollouts.query_rollouts`).
        A filter that names nothing stored raises :class:`workbench.errors.QueryError`."""
        return query_rollouts(self.name, tracking_uri=self.tracking_uri, reader=self._reader(), **filters)

    def same_prompts(self, a: str, b: str, **filters: Any) -> pd.DataFrame:
        """Variants ``a`` and ``b``'s answers to the same problems side by side, as ``workbench rollouts
        --same-prompts A B`` prints them (:func:`workbench.analysis.rollouts.same_prompts`)."""
        return same_prompts(self.name, a, b, tracking_uri=self.tracking_uri, reader=self._reader(), **filters)

    def _reader(self):
        return self._target.reader if self._target is not None else None


def load_study(study: str, *, tracking_uri: str | None = None, metrics: Sequence[str] | None = None) -> Study:
    """Load a study (a name, i.e. its MLflow experiment, or its YAML file) from its store
    (``tracking_uri``, else the study's ``tracking.uri``, ``$MLFLOW_TRACKING_URI``, ``./mlflow.db``).
    ``metrics``: only these logged metrics in ``history`` (default: all)."""
    target = resolve_target(study, tracking_uri, allow_run=False)
    frames = target.reader.load(target.study, metrics)
    return Study(target.study, target.tracking_uri, frames.history, frames.runs, dict(target.compare), target)
