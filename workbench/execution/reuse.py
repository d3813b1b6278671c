"""Shared arms: a run that FINISHED in another study of the same store is copied, not computed again.

Two studies often hold the same run (the same resolved config and seed, so the same ``run_key``): a
GRPO baseline arm, say. When ``workbench run`` is about to compute a run with no FINISHED run in its
own experiment, it looks for a FINISHED run of that run_key in the store's other (active)
experiments and copies it into this one with the export's writer
(:func:`workbench.results.export.write_run`): its params, every metric point (steps and timestamps
as logged), every artifact byte for byte (``eval/problems.csv.gz``, ``health.json``, samples, ...)
and its tags, with this study's identity instead (``workbench.study``, ``variant``, ``arm``, ``seed``,
the run name, the parent run) and ``workbench.reused_from`` = ``<source experiment>/<source run id>``.
The copy starts when it is made: it joined this study then, which is what ``compare``'s "seeds added
after looking" check reads.

Never reused: FAILED, KILLED or RUNNING runs, deleted ones, search trials, and a FINISHED run that
lacks what every finished run has (params, metric points, ``health.json``): that run is computed,
with one line saying why. ``workbench run --no-reuse`` computes every run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.execution.run import run_tags
from workbench.results.export import ExportedRun, write_run
from workbench.results.reader import StudyReader
from workbench.study import RunSpec
from workbench.tracking.bulk import MetricColumns
from workbench.tracking.study_runs import finished_elsewhere

REUSED_FROM_TAG = "workbench.reused_from"
NEEDED_ARTIFACT = "health.json"  # written by every run that FINISHED, just before it did


@dataclass
class Source:
    """A FINISHED run of another study, and its artifact files."""

    run: object  # mlflow.entities.Run
    experiment: str
    files: list[str]

    @property
    def study(self) -> str:
        return self.run.data.tags.get("workbench.study") or self.experiment

    def describe(self) -> str:
        return f"study {self.study} (run {self.run.info.run_id[:8]})"

    def lacks(self) -> str:
        """What it lacks of a finished run's record, in words ('' if nothing)."""
        if not self.run.data.metrics:
            return "it has no metric points"
        if not self.run.data.params:
            return "it has no params"
        return "" if NEEDED_ARTIFACT in self.files else f"it has no {NEEDED_ARTIFACT}"


@dataclass
class Reused:
    run_id: str  # the copy, in this study
    source: Source


def artifact_files(client, run_id: str, path: str | None = None) -> list[str]:
    out: list[str] = []
    for entry in client.list_artifacts(run_id, path):
        out += artifact_files(client, run_id, entry.path) if entry.is_dir else [entry.path]
    return out


def pick_source(client, runs: list, label: str) -> tuple[Source | None, str]:
    """The first of ``runs`` (another study's FINISHED runs of one run_key, best first) that holds a finished
    run's record; else None and why the best one was not taken."""
    refused = ""
    for run in runs:
        source = Source(
            run, client.get_experiment(run.info.experiment_id).name, artifact_files(client, run.info.run_id)
        )
        why = source.lacks()
        if not why:
            return source, ""
        refused = refused or f"not reusing {label} from {source.describe()}: {why}; computing it"
    return None, refused


def metric_columns(points) -> MetricColumns:
    """A reader's points (``metric, step, value, timestamp``) as the columns the export's writer takes."""
    names, key = np.unique(points["metric"].astype(str).to_numpy(), return_inverse=True)
    return MetricColumns(
        list(names),
        key.astype(np.int64),
        points["step"].to_numpy(dtype=np.int64),
        points["value"].to_numpy(dtype=float),
        points["timestamp"].to_numpy(dtype=np.int64),
    )


def copy_run(
    client, uri: str, source: Source, spec: RunSpec, *, study: str, experiment_id: str, parent_run_id: str
) -> str:
    """Write ``source`` into this study's experiment as ``spec``'s run; returns the copy's run id."""
    run_id = source.run.info.run_id
    reader = StudyReader(uri, cache_dir=False)
    artifacts = {}
    for path in source.files:
        data = reader.read_artifact_bytes(run_id, source.run.info.artifact_uri, path)
        if data is None:
            raise OSError(f"its artifact {path} cannot be read")
        artifacts[path] = data
    tags = {k: v for k, v in source.run.data.tags.items() if not k.startswith("mlflow.")}  # the store writes those
    tags |= run_tags(study, spec.variant, spec.config, "run", spec.label)
    tags[REUSED_FROM_TAG] = f"{source.experiment}/{run_id}"
    points = reader.backend.history([run_id], None, frozen=True)  # as stored, every point: what an export reads
    copy = ExportedRun(
        0,
        "run",
        spec.run_key,
        spec.label,
        "FINISHED",
        int(time.time() * 1000),
        None,
        tags,
        dict(source.run.data.params),
        metric_columns(points),
        artifacts=artifacts,
    )
    return write_run(client, uri, experiment_id, copy, parent_run_id)


def reuse_runs(
    uri: str,
    specs: list[RunSpec],
    *,
    study: str,
    experiment_id: str,
    parent_run_id: str,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> dict[str, Reused]:
    """Copy into the study each of ``specs`` that FINISHED in another study of the store; run_key ->
    the copy. ``say``: a REUSED line per copy; ``warn``: one line per run that could have been copied
    but is computed instead, saying why."""
    from mlflow import MlflowClient  # deferred: mlflow loads when a study runs, not when this module is imported

    client = MlflowClient(uri)
    try:
        found = finished_elsewhere(client, experiment_id, [s.run_key for s in specs])
    except Exception as error:  # noqa: BLE001 - reuse only saves time: without an answer, the runs are computed
        warn(f"warning: could not look for runs to reuse in the store's other studies ({_line(error)}); computing them")
        return {}
    out: dict[str, Reused] = {}
    for spec in (s for s in specs if s.run_key in found):
        source = None
        try:
            source, refused = pick_source(client, found[spec.run_key], spec.label)
            if source is None:
                warn(f"warning: {refused}")
                continue
            run_id = copy_run(
                client, uri, source, spec, study=study, experiment_id=experiment_id, parent_run_id=parent_run_id
            )
        except Exception as error:  # noqa: BLE001 - a failed copy is deleted (write_run); computing is the fallback
            where = "" if source is None else f" from {source.describe()}"
            warn(f"warning: not reusing {spec.label}{where}: {_line(error)}; computing it")
            continue
        out[spec.run_key] = Reused(run_id, source)
        say(f"REUSED {spec.label} from {source.describe()}")
    return out


def _line(error: Exception) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]
