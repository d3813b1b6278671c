"""Execute a study's runs under one MLflow experiment, resumably.

The study's parent run (``workbench.role=study``) holds the YAML and the plan; each run is
a child. Runs whose ``run_key`` already FINISHED are skipped, so re-running a study resumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.progress import RunProgress
from workbench.runs import RunOutcome, execute_run, preflight
from workbench.study import RunSpec, Study
from workbench.tracking.store import get_or_create_experiment, resolve_tracking_uri


@dataclass
class StudyContext:
    study: Study
    tracking_uri: str
    experiment_id: str
    parent_run_id: str


def plan_rows(specs: list[RunSpec], statuses: dict[str, str]) -> list[dict]:
    return [{"label": s.label, "variant": s.variant, "seed": s.seed, "run_key": s.run_key,
             "status": statuses.get(s.run_key, "new"), **{f"grid.{k}": v for k, v in s.grid.items()}}
            for s in specs]


def run_statuses(client, experiment_id: str) -> dict[str, str]:
    """run_key -> best known status (FINISHED beats RUNNING beats FAILED/KILLED)."""
    rank = {"FINISHED": 3, "RUNNING": 2, "FAILED": 1, "KILLED": 1}
    out: dict[str, str] = {}
    runs = client.search_runs([experiment_id], "tags.`workbench.role` = 'run'", max_results=50000)
    for run in runs:
        key = run.data.tags.get("workbench.run_key")
        if key and rank.get(run.info.status, 0) > rank.get(out.get(key, ""), 0):
            out[key] = run.info.status
    return out


def open_study(study: Study, specs: list[RunSpec]) -> StudyContext:
    """Create (or find) the experiment and the study's parent run."""
    from mlflow import MlflowClient

    uri = resolve_tracking_uri(specs[0].config.tracking.uri if specs else None)
    client = MlflowClient(uri)
    experiment_id = get_or_create_experiment(client, study.name, uri)
    found = client.search_runs([experiment_id], "tags.`workbench.role` = 'study'", max_results=1)
    if found:
        parent = found[0].info.run_id
        client.update_run(parent, status="RUNNING")
    else:
        parent = client.create_run(experiment_id, run_name=f"study:{study.name}",
                                   tags={"workbench.role": "study", "workbench.study": study.name}).info.run_id
    if study.source:
        client.log_text(parent, Path(study.source).read_text(), "study.yaml")
    client.log_text(parent, json.dumps(plan_rows(specs, {}), indent=2, default=str), "plan.json")
    return StudyContext(study, uri, experiment_id, parent)


def run_study(study: Study, specs: list[RunSpec], *, progress: bool = True) -> list[RunOutcome]:
    """Run every spec not yet FINISHED, one after another; returns one outcome per spec."""
    from mlflow import MlflowClient

    for spec in specs:  # everything that can fail before training fails before MLflow is touched
        preflight(spec.config)
    ctx = open_study(study, specs)
    client = MlflowClient(ctx.tracking_uri)
    done = {k for k, s in run_statuses(client, ctx.experiment_id).items() if s == "FINISHED"}
    outcomes: list[RunOutcome] = []
    status = "FINISHED"
    try:
        with RunProgress(enabled=progress) as bar:
            for spec in specs:
                if spec.run_key in done:
                    outcomes.append(RunOutcome(spec.label, spec.variant, spec.seed, spec.run_key, "SKIPPED"))
                    continue
                outcomes.append(execute_run(spec.config, study=study.name, variant=spec.variant, label=spec.label,
                                            parent_run_id=ctx.parent_run_id, progress=bar))
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        client.set_terminated(ctx.parent_run_id, status=status)
    return outcomes


def dump_yaml(data) -> str:
    return yaml.safe_dump(data, sort_keys=False)
