"""The REST backend: a tracking server read with ``search_runs`` and the
``metrics/get-history-bulk`` endpoint, one request per metric key per 100 runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from .frames import empty_points
from .protocol import ROLE_TAG

__all__ = ["RestRunReader", "Transport"]

Transport = Callable[[str, dict[str, Any]], dict[str, Any]]


class RestRunReader:
    """A tracking server: ``search_runs`` for runs, ``metrics/get-history-bulk`` for histories.

    ``transport(endpoint, params) -> json`` performs one GET against the server (default: MLflow's
    ``http_request`` with the client's credentials); tests pass one backed by Flask's test client.
    """

    name = "rest"
    BULK_ENDPOINT = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
    MAX_RUNS_PER_REQUEST = 100  # server limit
    MAX_POINTS_PER_REQUEST = 25000  # server limit (the response is truncated, sorted by run id)

    def __init__(self, uri: str, client: Any = None, transport: Transport | None = None) -> None:
        from mlflow import MlflowClient

        self.uri = uri
        self.client = client or MlflowClient(uri)
        self.transport = transport or self._http
        self.requests = 0
        self._keys: dict[str, set[str]] = {}

    def _http(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        creds = self.client._tracking_client.store.get_host_creds()
        response = http_request(creds, endpoint, "GET", params=params)
        return json.loads(verify_rest_response(response, endpoint).text)

    def experiment_names(self) -> list[str]:
        return [e.name for e in self.client.search_experiments()]

    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None or exp.lifecycle_stage != "active" else exp.experiment_id

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        exp = self.client.get_experiment(run.info.experiment_id)
        return {
            "run_id": run_id,
            "experiment_id": run.info.experiment_id,
            "experiment": exp.name,
            "role": run.data.tags.get(ROLE_TAG),
            "artifact_uri": run.info.artifact_uri,
        }

    def runs(self, experiment_id: str, role: str):
        rows, tags, params = [], {}, {}
        token = None
        while True:
            page = self.client.search_runs(
                [experiment_id], f"tags.`{ROLE_TAG}` = '{role}'", max_results=1000, page_token=token
            )
            for run in page:
                i = run.info
                rows.append(
                    {
                        "run_id": i.run_id,
                        "run_name": i.run_name,
                        "status": i.status,
                        "start_time": i.start_time,
                        "end_time": i.end_time,
                        "artifact_uri": i.artifact_uri,
                    }
                )
                tags[i.run_id] = dict(run.data.tags)
                params[i.run_id] = dict(run.data.params)
                self._keys[i.run_id] = set(run.data.metrics)
            token = page.token
            if not token:
                break
        cols = ["run_id", "run_name", "status", "start_time", "end_time", "artifact_uri"]
        return pd.DataFrame(rows, columns=cols), tags, params

    def metric_keys(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        return {r: set(self._keys.get(r, set())) for r in run_ids}

    def history(self, run_ids: Sequence[str], keys: Iterable[str] | None, *, frozen: bool = False) -> pd.DataFrame:
        run_keys = self.metric_keys(run_ids)
        wanted = set().union(*run_keys.values()) if run_keys else set()
        if keys is not None:
            wanted &= set(keys)
        frames = []
        for key in sorted(wanted):
            todo = [r for r in run_ids if key in run_keys[r]]
            frames.extend(self._bulk(key, todo))
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else empty_points()

    def _bulk(self, key: str, run_ids: list[str]) -> list[pd.DataFrame]:
        """All points of ``key`` for ``run_ids``, in requests of <= 100 runs; a truncated
        response (25,000 points) keeps its complete runs and asks again for the rest."""
        out = []
        queue = list(run_ids)
        while queue:
            batch, queue = queue[: self.MAX_RUNS_PER_REQUEST], queue[self.MAX_RUNS_PER_REQUEST :]
            self.requests += 1
            data = self.transport(
                self.BULK_ENDPOINT, {"run_id": batch, "metric_key": key, "max_results": self.MAX_POINTS_PER_REQUEST}
            )
            points = data.get("metrics", [])
            df = pd.DataFrame(points, columns=["run_id", "key", "step", "value", "timestamp"])
            if len(points) >= self.MAX_POINTS_PER_REQUEST:
                last = df["run_id"].iloc[-1]  # sorted by run id: only the last run can be cut off
                complete = df[df["run_id"] != last]
                if complete.empty:  # one run alone exceeds the limit: page through its history
                    out.append(self._paged(last, key))
                    batch = [r for r in batch if r != last]
                    queue = [r for r in batch if r > last] + queue
                else:
                    out.append(complete)
                    queue = [r for r in batch if r >= last] + queue
                continue
            out.append(df)
        return [d.rename(columns={"key": "metric"}) for d in out]

    def _paged(self, run_id: str, key: str) -> pd.DataFrame:
        self.requests += 1
        ms = self.client.get_metric_history(run_id, key)
        return pd.DataFrame(
            {
                "run_id": run_id,
                "key": key,
                "step": [m.step for m in ms],
                "value": [m.value for m in ms],
                "timestamp": [m.timestamp for m in ms],
            }
        )

    def parent_run_id(self, experiment_id: str) -> str | None:
        found = self.client.search_runs(
            [experiment_id], f"tags.`{ROLE_TAG}` = 'study'", order_by=["attributes.start_time ASC"], max_results=1
        )
        return found[0].info.run_id if found else None
