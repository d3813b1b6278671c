"""Results of a search: the best trials, an HTML report of Optuna's plots, the best config as YAML.

``write_report`` builds one self-contained HTML page (plotly.js inlined once, opens offline and in
MLflow's artifact view): the best trials, every trial, and ``optuna.visualization``'s optimization
history, intermediate values (the learning curves the pruner saw), parallel coordinates, parameter
importances (plus the Pareto front for several objectives and the timeline of the workers). It is
logged to the search's MLflow run. ``export_best`` writes the best configuration as a study variant.
With ``search.confirm``, the best trials are ranked by their mean over the confirmation seeds
(:mod:`workbench.search.confirm`), shown with its t interval and whether the best is
distinguishable from the next trial and from the baseline; the export follows that ranking.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workbench.search.confirm import BASELINE, confirmation_lines, confirmed_arms, search_ranked
from workbench.search.objective import OUTCOME, OVER_BUDGET, PRUNE_REASON, RUNS, START, STEPS, WORKER
from workbench.search.spec import SearchSpec
from workbench.search.worker import PARENT, SearchError, SearchWorker, TuneOptions, _quiet_optuna, trial_counts
from workbench.tracking.store import resolve_tracking_uri


def open_search(spec: SearchSpec, storage_url: str):
    """The search's Optuna study (read only); ``SearchError`` if it does not exist yet."""
    import optuna

    from workbench.execution.worker import describe_storage  # deferred: torch, transformers

    _quiet_optuna()
    storage = SearchWorker(spec, storage_url, TuneOptions(heartbeat_interval=60)).open_storage()
    try:
        return optuna.load_study(study_name=spec.optuna_name, storage=storage)
    except KeyError:
        raise SearchError(
            f"no search {spec.optuna_name!r} in {describe_storage(storage_url)}: run "
            f"`workbench tune STUDY` first (with the same --storage)"
        ) from None


def best_trials(ostudy, spec: SearchSpec, top: int = 5) -> list:
    """Single objective: the ``top`` COMPLETE trials, best first (feasible ones first); with a
    confirmation (``search.confirm``), the confirmed trials come first, by their confirmed mean
    (:func:`workbench.search.confirm.confirmed_arms`), then the rest by their search value.
    Several objectives: the Pareto front (Optuna's ``best_trials``)."""
    from optuna.trial import TrialState

    complete = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return []
    if spec.multi_objective:
        return sorted(ostudy.best_trials, key=lambda t: t.number)
    ranked = search_ranked(ostudy, spec)
    confirmed = [a.trial for a in confirmed_arms(ostudy, spec) if a.trial is not None]
    if confirmed:
        by_number = {t.number: t for t in ranked}
        ranked = [by_number[n] for n in confirmed] + [t for t in ranked if t.number not in confirmed]
    return ranked[:top]


def _fmt_value(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.6g}")
    return v


#: The columns a confirmed trial adds (``search.confirm``): its mean over the confirmation seeds,
#: the t interval of that mean, and the verdict of the best confirmed arm against it.
CONFIRMED_COLUMNS = ("confirmed mean", "confirmed 95% CI", "confirmed vs best")


def confirmed_cells(arm) -> dict[str, Any]:
    """The :data:`CONFIRMED_COLUMNS` of a :class:`~workbench.search.confirm.ConfirmedArm`."""
    e = arm.estimate
    interval = f"[{e.lo:.4g}, {e.hi:.4g}]" if math.isfinite(e.lo) else e.note
    return dict(
        zip(
            CONFIRMED_COLUMNS,
            (_fmt_value(e.value), interval, arm.vs_best or f"best ({len(arm.values)} seeds)"),
            strict=True,
        )
    )


def trial_rows(trials, spec: SearchSpec, confirmed: list | None = None) -> list[dict[str, Any]]:
    """One row per trial; ``confirmed`` (:func:`~workbench.search.confirm.confirmed_arms`) adds the
    :data:`CONFIRMED_COLUMNS` to the confirmed trials."""
    names = spec.objective_names()
    arms = {a.trial: a for a in confirmed or [] if a.trial is not None}
    rows = []
    for t in trials:
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name}
        values = t.values if t.values is not None else [None] * len(names)
        if t.state.name == "PRUNED" and t.values is None and t.intermediate_values:
            values = [t.intermediate_values[max(t.intermediate_values)]] + [None] * (len(names) - 1)
        for name, v in zip(names, values, strict=True):
            row[name] = _fmt_value(v)
        start = t.user_attrs.get(START)
        if start is not None and not spec.multi_objective:
            row["start"] = _fmt_value(start)
            row["gain"] = _fmt_value(values[0] - start) if values[0] is not None else None
        if arms:
            row |= confirmed_cells(arms[t.number]) if t.number in arms else dict.fromkeys(CONFIRMED_COLUMNS)
        for name in spec.params:
            row[name] = _fmt_value(t.params.get(name))
        row["learner steps"] = t.user_attrs.get(STEPS)
        row["runs"] = len(t.user_attrs.get(RUNS, [])) or None  # one per seed run (fewer if stopped)
        why = t.user_attrs.get(PRUNE_REASON) or t.user_attrs.get("workbench.error") or ""
        if t.user_attrs.get(OUTCOME) == OVER_BUDGET:
            why = "over budget (nothing ran)"
        row["note"] = why[:120]
        row["worker"] = t.user_attrs.get(WORKER, "")
        if t.datetime_start and t.datetime_complete:
            row["seconds"] = round((t.datetime_complete - t.datetime_start).total_seconds(), 1)
        rows.append(row)
    return rows


def _figures(ostudy, spec: SearchSpec):
    """(title, figure or None, note) for each plot; a plot Optuna cannot draw yet gets a note."""
    from optuna import visualization as vis

    names = spec.objective_names()
    targets = (
        [(None, names[0])]
        if not spec.multi_objective
        else [(lambda t, i=i: t.values[i], name) for i, name in enumerate(names)]
    )
    plots: list[tuple[str, Any]] = []
    for target, name in targets:
        suffix = f" — {name}" if spec.multi_objective else ""
        plots.append(
            (
                f"Optimization history{suffix}",
                lambda target=target, name=name: vis.plot_optimization_history(ostudy, target=target, target_name=name),
            )
        )
    if not spec.multi_objective:
        plots.append(
            (
                "Intermediate values (objective at each eval step, by learner step)",
                lambda: vis.plot_intermediate_values(ostudy),
            )
        )
    for target, name in targets:
        suffix = f" — {name}" if spec.multi_objective else ""
        plots.append(
            (
                f"Parallel coordinates{suffix}",
                lambda target=target, name=name: vis.plot_parallel_coordinate(ostudy, target=target, target_name=name),
            )
        )
    if not spec.multi_objective:
        plots.append(("Parameter importances", lambda: vis.plot_param_importances(ostudy)))
    else:  # per objective; Optuna's evaluator ranks low target values, so a maximised one is negated
        for i, (name, direction) in enumerate(zip(names, spec.directions, strict=True)):
            sign = -1.0 if direction == "maximize" else 1.0
            plots.append(
                (
                    f"Parameter importances — {name}",
                    lambda i=i, sign=sign, name=name: vis.plot_param_importances(
                        ostudy, target=lambda t: sign * t.values[i], target_name=name
                    ),
                )
            )
    if spec.multi_objective:
        plots.append(("Pareto front", lambda: vis.plot_pareto_front(ostudy, target_names=names)))
    plots.append(("Timeline (trials per worker and state)", lambda: vis.plot_timeline(ostudy)))
    import warnings

    from optuna.trial import TrialState

    finished = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    out = []
    for title, make in plots:
        if not finished:
            out.append((title, None, "not available yet: no trial has finished"))
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna's notes on experimental plots and evaluators
                out.append((title, make(), ""))
        except Exception as error:  # noqa: BLE001 - e.g. too few complete trials for importances
            out.append((title, None, f"not available yet: {' '.join(str(error).split())[:300]}"))
    return out


def write_report(ostudy, spec: SearchSpec, path: str | os.PathLike[str], *, log_to_mlflow: bool = True) -> Path:
    """Write the HTML report to ``path`` and log it (and ``trials.csv``) to the search's MLflow run."""
    import pandas as pd

    from workbench.viz.html import Section, df_table_html, html_page  # deferred: pandas, plotly, scipy

    path = Path(path)
    trials = ostudy.get_trials(deepcopy=False)
    best = best_trials(ostudy, spec)
    arms = confirmed_arms(ostudy, spec)
    all_rows = trial_rows(trials, spec, arms)
    sections = []
    what = "Pareto-optimal trials" if spec.multi_objective else "Best trials"
    gain = search_gain(ostudy, spec, arms)
    if gain.found is False:
        what = "Trials (none beat the start)"
    if best:
        sections.append(
            Section(
                what,
                note=gain.line,
                body_html=df_table_html(pd.DataFrame(trial_rows(best, spec, arms)), left=["state", "note", "worker"]),
            )
        )
    else:
        sections.append(Section(what, note="no trial has completed yet"))
    if arms:
        rows = [
            {
                "rank": a.rank,
                "arm": a.name,
                **{p: _fmt_value(a.params.get(p)) for p in spec.params},
                "search value": _fmt_value(a.search_value),
                **confirmed_cells(a),
            }
            for a in arms
        ]
        sections.append(
            Section(
                "Confirmation on fresh seeds",
                note=" ".join(line + "." for line in confirmation_lines(arms, spec)),
                body_html=df_table_html(pd.DataFrame(rows), left=["arm", "confirmed vs best"]),
            )
        )
    for title, figure, note in _figures(ostudy, spec):
        sections.append(Section(title, figure=figure, note=note))
    if all_rows:
        sections.append(
            Section("All trials", body_html=df_table_html(pd.DataFrame(all_rows), left=["state", "note", "worker"]))
        )

    c = trial_counts(trials)
    budget = f"{c['done']}/{spec.n_trials}" if spec.n_trials else f"{c['done']}"
    subtitle = (
        f"study {spec.study.name}, variant {spec.variant}; objectives "
        f"{', '.join(f'{n} ({d})' for n, d in zip(spec.objective_names(), spec.directions, strict=True))}; "
        f"trials {budget} done ({c['COMPLETE']} complete, {c['PRUNED']} pruned), {c['FAIL']} failed; "
        f"sampler {spec.sampler_name}, pruner {spec.pruner_name}; seeds per trial {spec.seeds}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        html_page(f"Search {spec.optuna_name}", sections, subtitle=html.escape(subtitle)), encoding="utf-8"
    )  # subtitle is HTML: the names in it are the user's
    if log_to_mlflow:
        _log_artifacts(ostudy, spec, path, all_rows)
    return path


def _log_artifacts(ostudy, spec: SearchSpec, path: Path, rows: list[dict[str, Any]]) -> None:
    import tempfile

    import pandas as pd
    from mlflow import MlflowClient

    parent = ostudy.user_attrs.get(PARENT)
    if not parent:
        return
    client = MlflowClient(resolve_tracking_uri(spec.layered.get("tracking", {}).get("uri")))
    client.log_artifact(parent, str(path))
    if rows:
        with tempfile.TemporaryDirectory() as tmp:
            csv = Path(tmp) / "trials.csv"
            pd.DataFrame(rows).to_csv(csv, index=False)
            client.log_artifact(parent, str(csv))


@dataclass(frozen=True)
class SearchGain:
    """Whether a search found anything: its trials' starting score (the first objective's metric at
    step 0, the untrained policy, the same for every trial) against what its best trial ends at."""

    found: bool | None  # None: no trial logged a start (nothing to say)
    line: str


def search_gain(ostudy, spec: SearchSpec, arms: list | None = None) -> SearchGain:
    """With a confirmation, its own test: the best confirmed trial's 95% t interval (over the fresh
    seeds) must exclude the start on the better side. Without one, the best COMPLETE trial's search
    value must beat the start (one draw per trial: said so)."""
    if spec.multi_objective:
        return SearchGain(None, "")
    metric = spec.objective_names()[0]
    maximize = spec.directions[0] == "maximize"
    better = (lambda a, b: a > b) if maximize else (lambda a, b: a < b)
    complete = [
        t
        for t in ostudy.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and t.values and t.user_attrs.get(START) is not None
    ]
    if not complete:
        return SearchGain(None, "")
    start = float(complete[0].user_attrs[START])
    confirmed = [a for a in arms or [] if a.trial is not None and a.estimate is not None]
    if confirmed:
        best = confirmed[0]
        e = best.estimate
        bound = e.lo if maximize else e.hi
        if math.isfinite(bound) and better(bound, start):
            return SearchGain(
                True,
                f"{best.name} gains {e.value - start:+.4g} {metric} over the start {start:.4g} "
                f"(its 95% t interval on {len(best.values)} fresh seeds, [{e.lo:.4g}, {e.hi:.4g}], "
                f"excludes the start)",
            )
        return SearchGain(
            False,
            f"no confirmed trial beats the start: {best.name} ends at {e.value:.4g} "
            f"[{e.lo:.4g}, {e.hi:.4g}] against the starting {metric} {start:.4g}: "
            "the search found nothing",
        )
    best_trial = max(complete, key=lambda t: t.values[0]) if maximize else min(complete, key=lambda t: t.values[0])
    value = best_trial.values[0]
    if better(value, start):
        return SearchGain(
            True,
            f"trial {best_trial.number} gains {value - start:+.4g} {metric} over the start "
            f"{start:.4g} (one draw per trial, not confirmed: search.confirm tests it on fresh seeds)",
        )
    return SearchGain(
        False,
        f"no trial ends beyond its starting {metric} {start:.4g} (the best, trial "
        f"{best_trial.number}, ends at {value:.4g}): the search found nothing",
    )


def export_best(ostudy, spec: SearchSpec, path: str | os.PathLike[str]) -> list[str]:
    """Write the best configuration (several objectives: every Pareto-optimal one) as study
    variants to ``path``; returns the variant names.

    With a study file, the export ``include:``s it, so ``workbench run FILE`` runs the study's own
    variants (already finished ones are skipped) next to the tuned one(s) for a direct comparison.
    """
    path = Path(path)
    best = best_trials(ostudy, spec, top=1)  # with a confirmation: the best confirmed trial
    arms = confirmed_arms(ostudy, spec)
    if not best:
        raise SearchError(f"search {spec.optuna_name!r} has no COMPLETE trial yet: nothing to export")
    gain = search_gain(ostudy, spec, arms)
    if gain.found is False:
        raise SearchError(f"search {spec.optuna_name!r}: {gain.line}; nothing to export")
    names = spec.objective_names()
    variants: dict[str, Any] = {}
    lines = [
        f"# Best configuration of search {spec.optuna_name!r} (variant {spec.variant!r} + sampled values;",
        f"# seeds per trial {spec.seeds}). Run it beside the study's variants: workbench run {path.name}",
    ]
    # the search's own variant, as a no-op override: kept when the study file names it, created
    # when it is the implicit default `base`, so that `workbench run FILE` compares against it
    variants[spec.variant] = {}
    taken = set(spec.study.variants)
    for t in best:
        name = "tuned" if len(best) == 1 else f"tuned_t{t.number}"
        while name in taken:
            name += "_"
        taken.add(name)
        variants[name] = spec.variant_override(dict(t.params))
        shown = ", ".join(f"{n} = {v:.6g}" for n, v in zip(names, t.values, strict=True))
        lines.append(f"#   {name}: trial {t.number}: {shown} (search value)")
    lines += [f"# {line}" for line in confirmation_lines(arms, spec)]
    if arms and arms[0].name == BASELINE:
        lines.append(f"# (exported: the best confirmed trial; the baseline is variant {spec.variant!r} itself)")
    if gain.line:
        lines.append(f"# {gain.line}")
    if spec.study.source:
        include = os.path.relpath(Path(spec.study.source).resolve(), path.resolve().parent)
        data: dict[str, Any] = {"include": include, "variants": variants}
    else:
        data = {"name": spec.study.name, "base": spec.study.base, "variants": variants, "seeds": list(spec.study.seeds)}
        if spec.study.health is not None:
            data["health"] = spec.study.health
    if arms and spec.config.confirm is not None:  # run on the seeds that confirmed it, not the search's
        data["seeds"] = list(spec.config.confirm.seeds)
        lines.append(f"# seeds: the confirmation's {list(spec.config.confirm.seeds)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return [name for name in variants if name != spec.variant]


def best_summary_lines(ostudy, spec: SearchSpec, top: int = 5) -> list[str]:
    """Plain-text lines for logs (the CLI draws a table)."""
    arms = confirmed_arms(ostudy, spec)
    rows = trial_rows(best_trials(ostudy, spec, top), spec, arms)
    names = spec.objective_names()
    out = list(confirmation_lines(arms, spec))
    gain = search_gain(ostudy, spec, arms)
    if gain.line:
        out.append(gain.line)
    for row in rows:
        values = ", ".join(f"{n}={row[n]}" for n in names)
        if row.get("confirmed mean") is not None:
            values += f", confirmed mean {row['confirmed mean']} {row['confirmed 95% CI']}"
        params = ", ".join(f"{p}={row[p]}" for p in spec.params)
        out.append(f"trial {row['trial']}: {values} | {params}")
    return out
