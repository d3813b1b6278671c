"""One run, executed in the process an executor gave it: the function the local pool's run
processes and Ray's tasks both call, so a run's result does not depend on where it ran.

Both go through :func:`workbench.execution.run.execute_run` (as ``workbench worker`` and a
sequential study do in their own process); this adds what a fresh process needs first (where
MLflow is, how many torch threads) and turns every ending into a :class:`RunOutcome`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from workbench.errors import show_debug_logs
from workbench.execution.run import RunOutcome, execute_run
from workbench.metrics.names import ACCURACY_TRAIN, EVAL_ACCURACY, HEALTH_STATUS, REWARD_MEAN
from workbench.study import RunSpec
from workbench.tracking.redact import guard_output

# What a run's process reports to the driver's study display after each step (the rest stays in MLflow).
PROGRESS_METRICS = (REWARD_MEAN, ACCURACY_TRAIN, EVAL_ACCURACY, HEALTH_STATUS)


@dataclass
class RunJob:
    spec: RunSpec
    study: str
    parent_run_id: str
    tracking_uri: str
    threads: int
    tags: dict[str, str] = field(default_factory=dict)  # extra MLflow tags, e.g. the Ray node that ran it


def progress_metrics(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(metrics[k]) for k in PROGRESS_METRICS if k in metrics}


def execute_job(job: RunJob, progress) -> RunOutcome:
    """Run ``job`` here: ``progress`` gets ``start_run``/``on_step``/``end_run``. Ctrl-C (or a
    cancelled Ray task) ends it KILLED, anything else FAILED; the outcome always comes back."""
    spec = job.spec
    outcome = RunOutcome(spec.label, spec.variant, spec.seed, spec.run_key, "FAILED")
    try:
        os.environ["MLFLOW_TRACKING_URI"] = job.tracking_uri  # log where the driver looks
        guard_output()  # this process prints too: its password masked like the driver's
        show_debug_logs()  # --debug reaches run processes through WORKBENCH_DEBUG
        import torch
        from transformers.utils import logging as hf_logging

        torch.set_num_threads(job.threads)
        hf_logging.disable_progress_bar()  # no weight-loading bars under the study display
        outcome = execute_run(
            spec.config,
            study=job.study,
            variant=spec.variant,
            label=spec.label,
            parent_run_id=job.parent_run_id,
            progress=progress,
            extra_tags=job.tags,
        )
    except KeyboardInterrupt:
        outcome.status, outcome.error = "KILLED", "interrupted"
    except BaseException as error:  # noqa: BLE001 - report anything, the driver decides
        outcome.status, outcome.error = "FAILED", f"{type(error).__name__}: {error}"
    return outcome
