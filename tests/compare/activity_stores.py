"""Synthetic stores of the shipped findings studies (docs/findings.md), for the knob-activity gate.

The stores the findings were measured on are gone. These are rebuilt from the **real study files**
(``studies/<name>.yaml``, expanded by the project's own loader), so every run's logged params (its
config, as ``workbench run`` logs it) and run name are what the study would produce; only the metric
curves are planted, at the levels docs/findings.md measured. Runs carry the tags of
:func:`workbench.execution.run.run_tags` and the params as the project's writer encodes them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from workbench.config import RunConfig
from workbench.study import expand, load_study

STUDIES = Path(__file__).resolve().parents[2] / "studies"
STEPS = 12  # logged steps per run: activity is a mean over steps, the level matters, not the length
EVAL_STEPS = (0, 6, 11)

#: ``(arm, config, seed, rng) -> {metric: per-step values}`` of one run (``eval/accuracy`` at EVAL_STEPS).
Curves = Callable[[str, RunConfig, int, np.random.Generator], dict[str, np.ndarray]]


def write_study_store(
    uri: str, study_file: str, curves: Curves, *, seed: int = 0, keep: Callable[[str, int], bool] | None = None
) -> str:
    """Write every run of ``studies/<study_file>`` (an absolute path: that file) with ``curves``' metrics into
    ``uri``; returns the study (experiment) name. ``keep(arm, seed)``: whether a run is written (default: all;
    e.g. an arm a sequential design stopped at an earlier look has fewer seeds). One ``log_batch`` per run (params as the writer encodes them), so
    the 65 runs of the three studies take seconds, not the minutes of one tracker per run."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from workbench.execution.run import run_tags
    from workbench.tracking.store import ensure_store
    from workbench.tracking.writer import _param_text

    study = load_study(STUDIES / study_file)
    specs = expand(study)
    name = specs[0].config.tracking.experiment or study.name
    ensure_store(uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment(name)
    parent = client.create_run(
        experiment, run_name=f"study:{name}", tags={"workbench.role": "study", "workbench.study": name}
    )
    rng = np.random.default_rng(seed)
    for spec in specs:
        arm = spec.label.rsplit("/seed=", 1)[0]
        if keep is not None and not keep(arm, spec.seed):
            continue
        tags = run_tags(name, spec.variant, spec.config, label=spec.label) | {
            "workbench.health": "ok",
            "workbench.health_reasons": "",
            "mlflow.parentRunId": parent.info.run_id,
        }
        run = client.create_run(experiment, run_name=spec.label, tags=tags)
        values = curves(arm, spec.config, spec.seed, rng)
        points = [
            Metric(m, float(v[k]), 0, step)
            for m, v in values.items()
            if m != "eval/accuracy"
            for k, step in enumerate(range(STEPS))
        ]
        points += [
            Metric("eval/accuracy", float(v), 0, step)
            for v, step in zip(values["eval/accuracy"], EVAL_STEPS, strict=True)
        ]
        params = [Param(k, _param_text(v)) for k, v in sorted(spec.config.flat().items())]
        client.log_batch(run.info.run_id, metrics=points, params=params, tags=[RunTag("mlflow.runName", spec.label)])
        client.set_terminated(run.info.run_id, "FINISHED")
    client.set_terminated(parent.info.run_id, "FINISHED")
    return name


def around(level: float, rng: np.random.Generator, sd: float, n: int = STEPS, lo: float = 0.0) -> np.ndarray:
    """``n`` values scattered around ``level`` (cut below at ``lo``: fractions are never negative)."""
    return np.maximum(level + rng.normal(0.0, sd, n), lo)
