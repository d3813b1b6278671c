"""The optimisation history on the search's MLflow run, and the search's saved views.

After each trial that ends COMPLETE or PRUNED, its worker logs on the search's own MLflow run
(``workbench.role=search``, the trials' parent), with MLflow ``step`` = the Optuna trial number:

* ``trial_value``: the trial's value (COMPLETE trials only: a pruned trial has no final value);
* ``best_value``: the best value among the COMPLETE trials numbered up to this one (feasible
  ones only when the search has ``constraints:``), i.e. Optuna's optimisation-history curve.

A multi-objective search logs ``trial_value/<objective>`` per objective and no ``best_value``
(a Pareto front has no single best). These are search-level metrics of one run, not per-step
run metrics: they are not in the metric catalogue (:mod:`workbench.metrics.catalogue`, whose
names are all ``group/name``) and never appear on a trial's runs.

When the search starts, two saved views are written on its experiment
(:func:`workbench.viz.saved_view.search_views`): the optimisation history and the trials'
learning curves grouped by trial; their links go in the search run's description.
"""

from __future__ import annotations

import math
import time
from typing import Any

from workbench.metrics.catalogue import BY_NAME, CATALOGUE
from workbench.metrics.names import EVAL_ACCURACY
from workbench.search.schema import DERIVED_METRICS
from workbench.search.spec import SearchSpec
from workbench.tracking.store import resolve_tracking_uri

__all__ = [
    "BEST_VALUE",
    "TRIAL_VALUE",
    "history_metric_names",
    "history_metrics",
    "log_trial",
    "publish_views",
    "refresh_views",
]

TRIAL_VALUE = "trial_value"
BEST_VALUE = "best_value"
NOTE_TAG = "mlflow.note.content"


def history_metric_names(spec: SearchSpec) -> list[str]:
    if spec.multi_objective:
        return [f"{TRIAL_VALUE}/{name}" for name in spec.objective_names()]
    return [TRIAL_VALUE, BEST_VALUE]


def _feasible(trial) -> bool:
    """Optuna's rule: feasible when every constraint value (``Trial.set_constraint``) is <= 0."""
    return all(c <= 0 for c in (trial.constraints or {}).values())


def history_metrics(trials, spec: SearchSpec, number: int) -> dict[str, float]:
    """The history metrics at step ``number`` (see the module docstring), from the study's trials."""
    by_number = {t.number: t for t in trials}
    trial = by_number.get(number)
    out: dict[str, float] = {}
    if trial is None:
        return out
    complete = trial.state.name == "COMPLETE" and trial.values is not None
    if spec.multi_objective:
        if complete:
            out = {key: float(v) for key, v in zip(history_metric_names(spec), trial.values, strict=True)}
        return {k: v for k, v in out.items() if math.isfinite(v)}
    if complete and math.isfinite(trial.value):
        out[TRIAL_VALUE] = float(trial.value)
    done = [
        t.value
        for t in trials
        if t.number <= number
        and t.state.name == "COMPLETE"
        and t.value is not None
        and math.isfinite(t.value)
        and _feasible(t)
    ]
    if done:
        out[BEST_VALUE] = float(max(done) if spec.directions[0] == "maximize" else min(done))
    return out


def log_trial(client: Any, run_id: str, trials, spec: SearchSpec, number: int) -> dict[str, float]:
    """Log trial ``number``'s history metrics on the search run ``run_id``; returns them."""
    from mlflow.entities import Metric  # deferred: mlflow

    values = history_metrics(trials, spec, number)
    if values:
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, v, now, number) for k, v in values.items()])
    return values


def trial_chart_metrics(spec: SearchSpec) -> list[str]:
    """The step metrics a trial's runs are charted by: the objectives' catalogue metrics (derived
    ``summary/*`` ones are one number per run), and ``eval/accuracy`` if no objective is one."""
    metrics = [o.metric for o in spec.objectives if o.metric in BY_NAME]
    metrics += [c.metric for c in spec.config.constraints if c.metric in BY_NAME]
    return list(dict.fromkeys(metrics or [EVAL_ACCURACY]))


def hidden_metrics(spec: SearchSpec, logged: set[str] = frozenset()) -> set[str]:
    """Metrics the trials view lists as hidden cards, so the page does not add a chart for each:
    the catalogue, the shaping terms (``reward/<name>``), the derived ``summary/*`` metrics, the
    history metrics (the page also loads the trials' parent, the search run) and ``logged``
    (what the trials' runs logged so far)."""
    shaping = (spec.layered.get("reward") or {}).get("shaping") or []
    terms = {f"reward/{s['name']}" for s in shaping if isinstance(s, dict) and "name" in s}
    return {m.name for m in CATALOGUE} | terms | set(DERIVED_METRICS) | set(history_metric_names(spec)) | set(logged)


def publish_views(
    client: Any, experiment_id: str, run_id: str, spec: SearchSpec, logged: set[str] = frozenset()
) -> list:
    """Write the search's saved views on its experiment and their links in the search run's
    description (``mlflow.note.content``); returns the links (:class:`ViewLink`). ``logged``: the
    metric names the trials' runs logged (none when the search starts)."""
    from workbench.viz.mlflow_views import publish_search_views  # deferred: pandas, plotly

    links = publish_search_views(
        client,
        experiment_id,
        spec.optuna_name,
        history_metric_names(spec),
        trial_chart_metrics(spec),
        hidden=hidden_metrics(spec, logged),
    )
    head = (
        f"**Optuna search `{spec.optuna_name}`** (study `{spec.study.name}`, variant `{spec.variant}`): "
        f"{', '.join(history_metric_names(spec))} by trial number on this run; each trial's runs are its "
        f"children (`workbench.role = trial`)."
    )
    lines = [head, "", "Saved views:"]
    lines += [f"- [{link.name}]({link.url()})" for link in links]
    lines += [
        "",
        f"Report: `workbench tune {spec.study.source or spec.study.name} --report`",
        "",
        "_Written by rl-workbench._",
    ]
    client.set_tag(run_id, NOTE_TAG, "\n".join(lines))
    return links


def refresh_views(spec: SearchSpec, parent: str | None) -> list:
    """Rewrite the views (same ids) of the search whose MLflow run is ``parent`` once trials ran,
    hiding every metric their runs logged but the views do not chart; returns the links. Called
    at the end of ``tune``."""
    from mlflow import MlflowClient  # deferred: mlflow

    if not parent:
        return []
    client = MlflowClient(resolve_tracking_uri(spec.layered.get("tracking", {}).get("uri")))
    experiment_id = client.get_run(parent).info.experiment_id
    runs = client.search_runs(
        [experiment_id],
        f"tags.`workbench.role` = 'trial' and tags.`workbench.search` = '{spec.optuna_name}'",
        max_results=5000,
    )
    logged = {key for run in runs for key in run.data.metrics}
    return publish_views(client, experiment_id, parent, spec, logged)
