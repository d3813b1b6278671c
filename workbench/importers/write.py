"""Write source runs into the destination store as a workbench study.

Layout (docs/tracking.md, "What is tracked (MLflow)"): one experiment named after the study; a parent run
(``workbench.role=study``) holding ``study.yaml`` (variants and a ``compare:`` section, so
``workbench compare`` works without a study file); one child run per source run
(``workbench.role=run``) with ``workbench.study/variant/seed/run_key/health/health_reasons``,
``workbench.source`` (the framework) and where it came from (``workbench.source_run`` or
``workbench.source_file``), the source params as ``source.<name>``, every metric at its step under
its canonical name or ``source/<name>``, and the artifacts ``import.json`` (the mapping used,
with caveats) and ``health.json`` (the health rules applied to the imported metrics).

An imported run is keyed by identity (issue #53): its ``run_key`` is a digest of (study, framework,
variant, seed, the source's own run id where it has one: an MLflow run id, a W&B run id), and
``workbench.source_digest`` records what it was made from (the file's content, the source run).
Importing the same source again adds nothing; importing a source whose content changed under the
same identity (a verl log that grew) replaces that run, so a study holds one run per (variant,
seed); a source that would add a second run of a (variant, seed) the study has from elsewhere is
refused (``compare`` would count the seed twice); a run not finished in the source is left for later.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from workbench.health import HealthMonitor
from workbench.metrics.names import ENTROPY_MEAN, LENGTH_MEAN, REWARD_MEAN
from workbench.tracking.bulk import bulk_writable, write_metric_history
from workbench.tracking.limits import entity_problem
from workbench.tracking.store import get_or_create_experiment, sqlite_file
from workbench.tracking.writer import RunTracker

from .adapters import Adapter
from .errors import ImportSourceError
from .load import SourceRun, _digest
from .validate import RunCheck, check_import

__all__ = [
    "DEFAULT_COMPARE_METRICS",
    "ExistingRun",
    "ImportOutcome",
    "existing_keys",
    "existing_runs",
    "identity_key",
    "write_study",
]

#: What ``workbench compare`` compares in an imported study unless told otherwise: canonical
#: metrics every framework logs (an imported run has no held-out eval/accuracy).
DEFAULT_COMPARE_METRICS = (REWARD_MEAN, LENGTH_MEAN, ENTROPY_MEAN)
#: Source statuses an import can take as final; a run still running in the source is left for later.
_TERMINAL = ("FINISHED", "FAILED", "KILLED")


@dataclass
class ImportOutcome:
    study: str
    tracking_uri: str
    parent_run_id: str | None = None
    imported: list[tuple[str, str]] = field(default_factory=list)  # (label, run id)
    skipped: list[str] = field(default_factory=list)  # labels whose source was imported before
    not_finished: list[str] = field(default_factory=list)  # labels still running in the source
    replaced: list[str] = field(default_factory=list)  # runs whose source changed (a grown log): what replaced what
    bad_lines: list[str] = field(default_factory=list)  # per run: malformed lines skipped (--skip-bad-lines)
    completions: list[str] = field(default_factory=list)  # per run: the dumped completions kept (rollouts/)


def _store_exists(uri: str) -> bool:
    return not uri.startswith("sqlite:///") or sqlite_file(uri).is_file()


def existing_keys(uri: str, study: str) -> tuple[dict[str, str], list[str]]:
    """``run_key -> run id`` of the study's child runs and their variants (first-seen order);
    raises when ``study`` names an experiment that is not a workbench study. Reads only."""
    runs, variants = existing_runs(uri, study)
    return {r.run_key: r.run_id for r in runs if r.run_key}, variants


@dataclass(frozen=True)
class ExistingRun:
    """A child run already in the study: who it is (identity) and what it was made from (source digest)."""

    run_id: str
    run_key: str
    variant: str
    seed: str
    framework: str  # workbench.source: the framework it was imported from ("" for a run the workbench ran)
    source_id: str  # the source's own run id ("" for a file)
    source_digest: str  # the source's content key when it was imported ("" before #53: its run_key was that)

    @property
    def label(self) -> str:
        return f"{self.variant}/seed={self.seed}"


def _source_id(tags: dict[str, str]) -> str:
    return tags.get("workbench.source_run") or tags.get("workbench.source_wandb_run") or ""


def existing_runs(uri: str, study: str) -> tuple[list[ExistingRun], list[str]]:
    """The study's child runs and their variants (first-seen order); raises when ``study`` names an
    experiment that is not a workbench study. Reads only."""
    if not _store_exists(uri):
        return [], []
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return [], []
    runs = client.search_runs([exp.experiment_id], max_results=50000)
    if runs and not any(r.data.tags.get("workbench.role") == "study" for r in runs):
        raise ImportSourceError(
            f"--study {study!r}: experiment exists in {uri} and is not a workbench study "
            "(no workbench.role=study run); choose another --study name"
        )
    children = [r for r in runs if r.data.tags.get("workbench.role") == "run"]
    variants = list(dict.fromkeys(r.data.tags.get("workbench.variant", "") for r in reversed(children)))
    found = [
        ExistingRun(
            r.info.run_id,
            r.data.tags.get("workbench.run_key", ""),
            r.data.tags.get("workbench.variant", ""),
            r.data.tags.get("workbench.seed", ""),
            r.data.tags.get("workbench.source", ""),
            _source_id(r.data.tags),
            r.data.tags.get("workbench.source_digest", ""),
        )
        for r in children
    ]
    return found, [v for v in variants if v]


def identity_key(framework: str, study: str, run: SourceRun) -> str:
    """The ``run_key`` of an imported run: who it is, not what its file held: (study, framework,
    variant, seed, the source's own run id where it has one). A log that grew keeps its identity."""
    return _digest(framework, study, run.variant, str(run.seed), _source_id(run.origin))


def _new_monitor() -> HealthMonitor:
    return HealthMonitor.from_config(None)


def _where(run: SourceRun) -> str:
    rid = run.origin.get("workbench.source_run")
    return f"source run {rid}" if rid else run.origin.get("workbench.source_file", run.label)


def _run_tags(run: SourceRun, study: str, framework: str, check: RunCheck) -> dict[str, str]:
    return {
        "workbench.role": "run",
        "workbench.study": study,
        "workbench.variant": run.variant,
        "workbench.seed": str(run.seed),
        "workbench.run_key": run.identity,
        "workbench.source": framework,
        "workbench.source_digest": run.key,
        **run.origin,
        **check.monitor.tags(),
    }


def _check_entities(run: SourceRun, tags: dict[str, str]) -> None:
    """Every parameter and tag the run will get, by MLflow's rules: a W&B config key MLflow refuses
    failed the old import half-way, with its parent run left behind."""
    for key, value in run.params.items():
        problem = entity_problem("parameter", f"source.{key}", value)
        if problem:
            raise ImportSourceError(f"{_where(run)}: {problem} ({run.label}; nothing written)")
    for key, value in tags.items():
        problem = entity_problem("tag", key, value)
        if problem:
            raise ImportSourceError(f"{_where(run)}: {problem} ({run.label}; nothing written)")


def _study_metrics(client: Any, study: str) -> set[str]:
    """The metric names the study's runs logged so far (what its saved views list)."""
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return set()
    runs = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'", max_results=50000)
    return {k for r in runs for k in r.data.metrics}


def write_study(
    adapter: Adapter,
    runs: Sequence[SourceRun],
    uri: str,
    study: str,
    *,
    source_note: dict[str, Any],
    view_specs: Sequence[Any] = (),
) -> ImportOutcome:
    """Write ``runs`` (already read and checked) into ``study`` in the store ``uri``; then the
    study's MLflow saved views from ``view_specs`` (validated dashboard specs), as a workbench
    study gets them, so the MLflow UI shows imported runs grouped by variant too.

    Everything the import will write is checked first (points, names, parameters, tags, the saved
    views with the metrics about to be logged): a failure there raises ``ImportSourceError`` with the
    store as it was. A failure while writing (the store itself) deletes every run this call created,
    its study's parent run included when it created it, so a retry starts from the same store."""
    from mlflow import MlflowClient

    existing, variants = existing_runs(uri, study)
    outcome = ImportOutcome(study, uri)
    todo = []
    replaces: dict[str, list[ExistingRun]] = {}  # run.key -> the runs of its identity it replaces
    for run in runs:
        if run.status not in _TERMINAL:
            outcome.not_finished.append(f"{run.label} ({run.status})")
            continue
        run.identity = identity_key(adapter.framework, study, run)
        me = (adapter.framework, run.variant, str(run.seed), _source_id(run.origin))
        mine = [e for e in existing if e.run_key == run.identity or (e.framework, e.variant, e.seed, e.source_id) == me]
        same_source = [e for e in existing if run.key in (e.run_key, e.source_digest)]
        if mine and any(e in same_source for e in mine):
            outcome.skipped.append(f"{run.label} (imported before: run {mine[0].run_id})")
        elif mine:  # the source changed (a log that grew): its run is replaced, not doubled
            replaces[run.key] = mine
            todo.append(run)
        elif same_source:  # the same file given another variant or seed: nothing new in it
            outcome.skipped.append(f"{run.label} (same source as run {same_source[0].run_id}, {same_source[0].label})")
        else:
            clash = [e for e in existing if (e.variant, e.seed) == (run.variant, str(run.seed))]
            if clash:
                other = (
                    f"{clash[0].framework} source run {clash[0].source_id}"
                    if clash[0].source_id
                    else (f"a {clash[0].framework} import" if clash[0].framework else "the workbench's own run")
                )
                raise ImportSourceError(
                    f"{_where(run)}: study {study!r} already has {run.label} (run {clash[0].run_id}, from {other}): "
                    "a second run of one seed would be counted twice by compare; import it under another "
                    "--variant/--seed, or delete that run first (nothing written)"
                )
            todo.append(run)
    # Validate everything before the first write (labels, steps, values, metric names, health, params,
    # tags, views): a bad line anywhere leaves the store as it was.
    checks = check_import(todo, study, adapter.convert_step, _new_monitor)
    tags = {run.key: _run_tags(run, study, adapter.framework, checks[run.key]) for run in todo}
    for run in todo:
        _check_entities(run, tags[run.key])
        if run.variant not in variants:
            variants.append(run.variant)
        if run.bad_lines is not None and run.bad_lines.count:
            outcome.bad_lines.append(
                f"{run.label}: skipped {run.bad_lines.count} malformed {run.bad_lines.unit}(s) "
                f"(first: {run.bad_lines.first})"
            )
    if not variants:  # nothing finished to write and no study yet: create nothing (a study needs a variant)
        return outcome
    client = MlflowClient(uri)
    layout = None
    if view_specs:
        from workbench.viz.mlflow_views import StudyLayout, check_study_views  # deferred: pandas, plotly

        layout = StudyLayout(
            study=study,
            question=f"Runs imported from {adapter.framework}.",
            variants=variants,
            baseline=variants[0] if variants else None,
        )
        names = {
            target for check in checks.values() for target in adapter.convert_step(dict.fromkeys(check.names, 0.0))
        }
        try:
            check_study_views(
                layout, view_specs, _study_metrics(client, study) | names if _store_exists(uri) else names
            )
        except ValueError as e:
            raise ImportSourceError(
                f"{e} (with the {len(names):,} metrics this import logs; nothing written)"
            ) from None
    created: list[str] = []
    replaced: list[str] = []
    try:
        get_or_create_experiment(client, study, uri)
        outcome.parent_run_id, new_parent = _parent_run(client, study, adapter.framework)
        if new_parent:
            created.append(outcome.parent_run_id)
        for run in todo:
            outcome.imported.append(
                (
                    run.label,
                    _write_run(
                        client, uri, study, adapter, run, checks[run.key], tags[run.key], outcome.parent_run_id, created
                    ),
                )
            )
            if run.completions is not None:
                rows = run.completions.manifest["rows"]
                outcome.completions.append(
                    f"{run.label}: kept {rows['train']:,} train and {rows['eval']:,} eval "
                    f"completions from {len(run.completions.manifest['imported']['files']):,} "
                    "file(s) (workbench rollouts)"
                )
        _study_file(client, outcome.parent_run_id, study, adapter.framework, variants, source_note)
        if layout is not None:
            from workbench.viz.mlflow_views import publish_study_views  # deferred: pandas, plotly

            publish_study_views(client, client.get_experiment_by_name(study).experiment_id, layout, view_specs)
        for run in todo:  # last: a failure before here deletes the new runs and keeps the old ones
            for old in replaces.get(run.key, []):
                client.delete_run(old.run_id)
                replaced.append(old.run_id)
                outcome.replaced.append(
                    f"{run.label}: its source changed since run {old.run_id} was imported; "
                    f"replaced by run {dict(outcome.imported)[run.label]}"
                )
    except BaseException:
        for run_id in replaced:  # the runs this import was replacing come back
            try:
                client.restore_run(run_id)
            except Exception:  # noqa: BLE001 - the store failing again: the original error is the one to report
                pass
        for run_id in reversed(created):  # a half-written import would hold its run_keys and block the retry
            try:
                client.delete_run(run_id)
            except Exception:  # noqa: BLE001 - the store failing again: the original error is the one to report
                pass
        raise
    finally:
        for check in checks.values():
            if check.checked is not None:
                check.checked.close()
    return outcome


def _write_run(
    client: Any,
    uri: str,
    study: str,
    adapter: Adapter,
    run: SourceRun,
    check: RunCheck,
    tags: dict[str, str],
    parent_run_id: str,
    created: list[str],
) -> str:
    """One checked run into the store (its id appended to ``created`` as soon as it exists)."""
    skipped = {"count": run.bad_lines.count, "first": run.bad_lines.first} if run.bad_lines else None
    tracker = RunTracker(uri, study, run.label, tags, parent_run_id=parent_run_id, flush_every=1000)
    tracker.start()
    created.append(tracker.run_id)
    if run.params:
        tracker.log_params({f"source.{k}": v for k, v in run.params.items()})
    checked = check.checked  # exactly the points the first pass checked (not the source read again)
    assert checked is not None
    if bulk_writable(uri):  # a SQLite store: rows straight into its tables (tracking/bulk.py); else log_batch
        write_metric_history(uri, tracker.run_id, checked.chunks(), int(time.time() * 1000))
    else:
        for step, metrics in checked.steps():
            tracker.log_metrics(metrics, step=step)
    tracker.log_dict(
        {
            "framework": adapter.framework,
            "adapter_version": adapter.version,
            "source": run.origin,
            "source_name": run.name,
            "source_status": run.status,
            "points": check.points,
            "skipped_bad_lines": skipped,
            "completions": run.completions.manifest["imported"] if run.completions is not None else None,
            "metrics": adapter.mapping_report(check.names),
        },
        "import.json",
    )
    tracker.log_text(check.monitor.report_json(), "health.json")
    if run.completions is not None:  # encoded and checked before the first write (load.runs_from_files)
        for name, data in run.completions.artifacts():
            tracker.log_bytes(data, name)
    tracker.finish(run.status)  # inside: its final flush can fail too
    return tracker.run_id


def _parent_run(client: Any, study: str, framework: str) -> tuple[str, bool]:
    """The study's parent run and whether it was created now."""
    exp = client.get_experiment_by_name(study)
    found = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'", max_results=1)
    if found:
        return found[0].info.run_id, False
    run = client.create_run(
        exp.experiment_id,
        run_name=f"study:{study}",
        tags={"workbench.role": "study", "workbench.study": study, "workbench.source": framework},
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id, True


def _study_file(
    client: Any, run_id: str, study: str, framework: str, variants: list[str], source_note: dict[str, Any]
) -> None:
    """The parent run's ``study.yaml`` naming every variant (written once the runs are)."""
    document = {
        "name": study,
        "imported_from": {"framework": framework, **source_note},
        "variants": {v: {} for v in variants},
        "compare": {"baseline": variants[0], "metrics": list(DEFAULT_COMPARE_METRICS)},
    }
    client.log_text(run_id, yaml.safe_dump(document, sort_keys=False), "study.yaml")
