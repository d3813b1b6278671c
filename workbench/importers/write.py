"""Write source runs into the destination store as a workbench study.

Layout (README, "What is tracked (MLflow)"): one experiment named after the study; a parent run
(``workbench.role=study``) holding ``study.yaml`` (variants and a ``compare:`` section, so
``workbench compare`` works without a study file); one child run per source run
(``workbench.role=run``) with ``workbench.study/variant/seed/run_key/health/health_reasons``,
``workbench.source`` (the framework) and where it came from (``workbench.source_run`` or
``workbench.source_file``), the source params as ``source.<name>``, every metric at its step under
its canonical name or ``source/<name>``, and the artifacts ``import.json`` (the mapping used,
with caveats) and ``health.json`` (the health rules applied to the imported metrics).

The ``run_key`` of an imported run is a digest of its source (run id or file content): a run
whose key is already in the study is skipped, so importing the same source twice adds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from workbench.health import HealthMonitor
from workbench.tracking.bulk import bulk_writable, write_metric_history
from workbench.tracking.store import get_or_create_experiment, sqlite_file
from workbench.tracking.writer import RunTracker

from .adapters import Adapter
from .errors import ImportSourceError
from .load import SourceRun
from .validate import check_import

__all__ = ["ImportOutcome", "DEFAULT_COMPARE_METRICS", "existing_keys", "write_study"]

#: What ``workbench compare`` compares in an imported study unless told otherwise: canonical
#: metrics every framework logs (an imported run has no held-out eval/accuracy).
DEFAULT_COMPARE_METRICS = ("reward/mean", "length/mean", "entropy/mean")
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
    bad_lines: list[str] = field(default_factory=list)  # per run: malformed lines skipped (--skip-bad-lines)


def _store_exists(uri: str) -> bool:
    return not uri.startswith("sqlite:///") or sqlite_file(uri).is_file()


def existing_keys(uri: str, study: str) -> tuple[dict[str, str], list[str]]:
    """``run_key -> run id`` of the study's child runs and their variants (first-seen order);
    raises when ``study`` names an experiment that is not a workbench study. Reads only."""
    if not _store_exists(uri):
        return {}, []
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return {}, []
    runs = client.search_runs([exp.experiment_id], max_results=50000)
    if runs and not any(r.data.tags.get("workbench.role") == "study" for r in runs):
        raise ImportSourceError(f"--study {study!r}: experiment exists in {uri} and is not a workbench study "
                                "(no workbench.role=study run); choose another --study name")
    children = [r for r in runs if r.data.tags.get("workbench.role") == "run"]
    keys = {r.data.tags["workbench.run_key"]: r.info.run_id for r in children if "workbench.run_key" in r.data.tags}
    variants = list(dict.fromkeys(r.data.tags.get("workbench.variant", "") for r in reversed(children)))
    return keys, [v for v in variants if v]


def _new_monitor() -> HealthMonitor:
    return HealthMonitor.from_config(None)


def write_study(adapter: Adapter, runs: Sequence[SourceRun], uri: str, study: str,
                *, source_note: dict[str, Any], view_specs: Sequence[Any] = ()) -> ImportOutcome:
    """Write ``runs`` (already read and checked) into ``study`` in the store ``uri``; then the
    study's MLflow saved views from ``view_specs`` (validated dashboard specs), as a workbench
    study gets them, so the MLflow UI shows imported runs grouped by variant too."""
    from mlflow import MlflowClient

    keys, variants = existing_keys(uri, study)
    outcome = ImportOutcome(study, uri)
    todo = []
    for run in runs:
        if run.key in keys:  # the same source, whatever variant/seed it is given now
            outcome.skipped.append(f"{run.label} (same source as run {keys[run.key]})")
        elif run.status not in _TERMINAL:
            outcome.not_finished.append(f"{run.label} ({run.status})")
        else:
            todo.append(run)
    # Validate everything before the first write (labels, steps, values, metric names, health):
    # a bad line anywhere leaves the store as it was.
    checks = check_import(todo, study, adapter.convert_step, _new_monitor)
    for run in todo:
        if run.variant not in variants:
            variants.append(run.variant)
        if run.bad_lines is not None and run.bad_lines.count:
            outcome.bad_lines.append(f"{run.label}: skipped {run.bad_lines.count} malformed {run.bad_lines.unit}(s) "
                                     f"(first: {run.bad_lines.first})")
    if not variants:  # nothing finished to write and no study yet: create nothing (a study needs a variant)
        return outcome
    client = MlflowClient(uri)
    get_or_create_experiment(client, study, uri)
    outcome.parent_run_id = _parent_run(client, uri, study, adapter.framework, variants, source_note)
    bulk = bulk_writable(uri)  # a SQLite store: rows straight into its tables (tracking/bulk.py); else log_batch
    for run in todo:
        check = checks[run.key]
        skipped = {"count": run.bad_lines.count, "first": run.bad_lines.first} if run.bad_lines else None
        tags = {"workbench.role": "run", "workbench.study": study, "workbench.variant": run.variant,
                "workbench.seed": str(run.seed), "workbench.run_key": run.key,
                "workbench.source": adapter.framework, **run.origin, **check.monitor.tags()}
        tracker = RunTracker(uri, study, run.label, tags, parent_run_id=outcome.parent_run_id, flush_every=1000)
        tracker.start()
        try:
            if run.params:
                tracker.log_params({f"source.{k}": v for k, v in run.params.items()})
            checked = check.checked  # exactly the points the first pass checked (not the source read again)
            if bulk:
                write_metric_history(uri, tracker.run_id, checked.chunks(), int(time.time() * 1000))
            else:
                for step, metrics in checked.steps():
                    tracker.log_metrics(metrics, step=step)
            tracker.log_dict({"framework": adapter.framework, "adapter_version": adapter.version,
                              "source": run.origin, "source_name": run.name, "source_status": run.status,
                              "points": check.points, "skipped_bad_lines": skipped,
                              "metrics": adapter.mapping_report(check.names)}, "import.json")
            tracker.log_text(check.monitor.report_json(), "health.json")
            tracker.finish(run.status)  # inside: its final flush can fail too
        except BaseException:
            # a half-written run would hold the source's run_key and block the retry: remove it
            client.delete_run(tracker.run_id)
            raise
        finally:
            check.checked.close()
        outcome.imported.append((run.label, tracker.run_id))
    if view_specs:
        from workbench.viz.mlflow_views import StudyLayout, publish_study_views  # deferred: pandas, plotly

        layout = StudyLayout(study=study, question=f"Runs imported from {adapter.framework}.", variants=variants,
                             baseline=variants[0] if variants else None)
        publish_study_views(client, client.get_experiment_by_name(study).experiment_id, layout, view_specs)
    return outcome


def _parent_run(client: Any, uri: str, study: str, framework: str, variants: list[str],
                source_note: dict[str, Any]) -> str:
    """The study's parent run (created if missing), with ``study.yaml`` naming every variant."""
    exp = client.get_experiment_by_name(study)
    found = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'", max_results=1)
    if found:
        run_id = found[0].info.run_id
    else:
        run = client.create_run(exp.experiment_id, run_name=f"study:{study}",
                                tags={"workbench.role": "study", "workbench.study": study,
                                      "workbench.source": framework})
        run_id = run.info.run_id
        client.set_terminated(run_id, "FINISHED")
    document = {"name": study, "imported_from": {"framework": framework, **source_note},
                "variants": {v: {} for v in variants},
                "compare": {"baseline": variants[0], "metrics": list(DEFAULT_COMPARE_METRICS)}}
    client.log_text(run_id, yaml.safe_dump(document, sort_keys=False), "study.yaml")
    return run_id
