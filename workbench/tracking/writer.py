"""Batched MLflow writer for one run: params, buffered metrics, artifacts, terminal status.

Metrics are buffered and sent with ``log_batch`` (≤1000 per call) every ``flush_every``
steps, so tracking stays a small fraction of step time (see benchmarks/bench_sanity.py).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_LEN = 6000


class RunTracker:
    """One MLflow run. ``start()`` creates it; ``finish(status)`` ends it (FINISHED/FAILED/KILLED)."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, tags: dict[str, str],
                 parent_run_id: str | None = None, flush_every: int = 10) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags)
        self.parent_run_id = parent_run_id
        self.flush_every = flush_every
        self.run_id: str | None = None
        self.client = None
        self._buffer: list = []
        self._steps_since_flush = 0
        self.seconds = 0.0  # time spent logging metrics (per-step cost), for the overhead benchmark
        self.start_seconds = 0.0

    def start(self) -> str:
        from mlflow import MlflowClient

        from workbench.tracking.store import get_or_create_experiment

        t0 = time.perf_counter()
        self.client = MlflowClient(self.tracking_uri)
        experiment_id = get_or_create_experiment(self.client, self.experiment, self.tracking_uri)
        tags = dict(self.tags)
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = self.client.create_run(experiment_id, run_name=self.run_name, tags=tags)
        self.run_id = run.info.run_id
        self.start_seconds = time.perf_counter() - t0  # one-off (store creation), kept apart from per-step cost
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_text(v)) for k, v in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        t0 = time.perf_counter()
        self._buffer_metrics(metrics, step, Metric)
        self.seconds += time.perf_counter() - t0
        if self._steps_since_flush >= self.flush_every or len(self._buffer) >= MAX_METRICS_PER_BATCH:
            self.flush()  # counts its own time

    def _buffer_metrics(self, metrics: dict[str, float], step: int, Metric) -> None:
        ts = int(time.time() * 1000)
        for key, value in metrics.items():
            value = float(value)
            # MLflow's sqlite store rejects NaN/inf in some versions: keep the point, health saw the raw value
            if not math.isfinite(value):
                value = float("nan") if math.isnan(value) else math.copysign(1e308, value)
            self._buffer.append(Metric(key, value, ts, step))
        self._steps_since_flush += 1

    def flush(self) -> None:
        t0 = time.perf_counter()
        while self._buffer:
            chunk, self._buffer = self._buffer[:MAX_METRICS_PER_BATCH], self._buffer[MAX_METRICS_PER_BATCH:]
            self.client.log_batch(self.run_id, metrics=chunk)
        self._steps_since_flush = 0
        self.seconds += time.perf_counter() - t0

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_dict(self, data: Any, artifact_file: str) -> None:
        if artifact_file.endswith((".yaml", ".yml")):
            self.log_text(yaml.safe_dump(data, sort_keys=False), artifact_file)
        else:
            self.log_text(json.dumps(data, indent=2, default=str), artifact_file)

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        import pandas as pd

        if rows:
            self.client.log_table(self.run_id, data=pd.DataFrame(rows), artifact_file=artifact_file)

    def log_artifact_dir(self, files: dict[str, str]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                (Path(tmp) / name).write_text(text)
            self.client.log_artifacts(self.run_id, tmp)

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        """Flush and end the run; on failure the traceback is kept as ``error.txt``."""
        if self.run_id is None:
            return
        try:
            self.flush()
        finally:
            if error is not None:
                text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
                self.log_text(text, "error.txt")
                self.client.set_tag(self.run_id, "workbench.error", f"{type(error).__name__}: {error}"[:500])
            self.client.set_terminated(self.run_id, status=status)


def _param_text(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text[:MAX_PARAM_LEN]
