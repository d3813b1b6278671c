"""Synthetic stores of the shipped findings studies (docs/findings.md), for the knob-activity gate.

The stores the findings were measured on are gone. These are rebuilt from the **real study files**
(``studies/<name>.yaml``, expanded by the project's own loader), so every run's logged params (its
config, as ``workbench run`` logs it) and run name are what the study would produce; only the metric
curves are planted, at the levels docs/findings.md measured. Runs are written through the project's
``RunTracker`` with ``run_tags``, as :func:`workbench.execution.run.execute_run` writes them.
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


def write_study_store(uri: str, study_file: str, curves: Curves, *, seed: int = 0) -> str:
    """Write every run of ``studies/<study_file>`` with ``curves``' metrics into ``uri``; returns
    the study (experiment) name."""
    from workbench.execution.run import run_tags
    from workbench.tracking.writer import RunTracker

    study = load_study(STUDIES / study_file)
    specs = expand(study)
    name = specs[0].config.tracking.experiment or study.name
    parent = RunTracker(uri, name, f"study:{name}", {"workbench.role": "study", "workbench.study": name})
    parent.start()
    rng = np.random.default_rng(seed)
    for spec in specs:
        arm = spec.label.rsplit("/seed=", 1)[0]
        run = RunTracker(uri, name, spec.label, run_tags(name, spec.variant, spec.config, label=spec.label)
                         | {"workbench.health": "ok", "workbench.health_reasons": ""},
                         parent_run_id=parent.run_id, flush_every=STEPS)
        run.start()
        run.log_params(spec.config.flat())
        values = curves(arm, spec.config, spec.seed, rng)
        for step in range(STEPS):
            point = {m: float(v[step]) for m, v in values.items() if m != "eval/accuracy"}
            if step in EVAL_STEPS:
                point["eval/accuracy"] = float(values["eval/accuracy"][EVAL_STEPS.index(step)])
            run.log_metrics(point, step)
        run.finish("FINISHED")
    parent.finish("FINISHED")
    return name


def around(level: float, rng: np.random.Generator, sd: float, n: int = STEPS, lo: float = 0.0) -> np.ndarray:
    """``n`` values scattered around ``level`` (cut below at ``lo``: fractions are never negative)."""
    return np.maximum(level + rng.normal(0.0, sd, n), lo)
