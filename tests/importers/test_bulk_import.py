"""A long verl log imported in bulk (SQLite) == imported through log_batch; its health == the rules
step by step (issue #31: a 1M-line import in bounded time and memory must not change a verdict or a value).

In-process ``write_study`` into real SQLite stores: once as an import writes a SQLite store (rows
straight into MLflow's tables, health judged a block at a time), once through ``log_batch`` (the
path other stores take). Both stores must hold the same metric rows, and the ``health.json`` of
both must be the report of ``HealthMonitor.observe`` on the log's steps one by one.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from mlflow import MlflowClient

import workbench.importers.write as write
from workbench.health import HealthMonitor
from workbench.health.rules.reward import RewardCollapseParams
from workbench.importers import ADAPTERS, runs_from_files, write_study

from .helpers import child_runs, sqlite_uri

STEPS = 400


def long_log(path: Path, *, shuffled: bool = False) -> Path:
    """verl JSONL with a reward collapse from step 300, a truncation blow-up from 200, a NaN loss at
    150, steps without the entropy and (shuffled) steps out of order and repeated (a resumed run)."""
    lines = []
    for s in range(1, STEPS + 1):
        data = {
            "critic/score/mean": 0.6 + 0.05 * math.sin(s) - (0.4 if s >= 300 else 0.0),
            "response_length/clip_ratio": 0.5 if s >= 200 else 0.05,
            "response_length/mean": 100 + s % 7,
            "actor/pg_loss": math.nan if s == 150 else 0.01 * math.cos(s),
        }
        if s % 9:
            data["actor/entropy"] = 1.0 - s / 1000
        lines.append(json.dumps({"step": s, "data": data}))
    if shuffled:
        lines = lines[:250] + lines[240:260] + lines[250:]  # steps 241..260 logged twice
        lines[10], lines[11] = lines[11], lines[10]
    path.write_text("\n".join(lines) + "\n")
    return path


def import_log(log: Path, db: Path, monkeypatch, bulk: bool) -> str:
    uri = sqlite_uri(db)
    with monkeypatch.context() as m:
        if not bulk:
            m.setattr(write, "bulk_writable", lambda uri: False)  # the log_batch path, as for a server
        adapter = ADAPTERS.get("verl")
        write_study(adapter, runs_from_files(adapter, [str(log)], "grpo", [0]), uri, "long", source_note={})
    (run,) = child_runs(uri, "long")
    return run.info.run_id


def rows(db: Path, run_id: str) -> dict[str, list[str]]:
    with sqlite3.connect(db) as con:
        return {
            table: sorted(
                map(
                    repr,
                    con.execute(
                        f"SELECT key, value, step, is_nan FROM {table} WHERE run_uuid = ?", (run_id,)
                    ).fetchall(),
                )
            )
            for table in ("metrics", "latest_metrics")
        }


def health_json(db: Path, run_id: str) -> dict:
    return json.loads(Path(MlflowClient(sqlite_uri(db)).download_artifacts(run_id, "health.json")).read_text())


@pytest.mark.parametrize("shuffled", [False, True])
def test_bulk_import_writes_what_log_batch_writes_and_judges_as_the_rules_step_by_step(tmp_path, monkeypatch, shuffled):
    log = long_log(tmp_path / "log.jsonl", shuffled=shuffled)
    bulk_run = import_log(log, tmp_path / "bulk.db", monkeypatch, bulk=True)
    api_run = import_log(log, tmp_path / "api.db", monkeypatch, bulk=False)

    got, expected = rows(tmp_path / "bulk.db", bulk_run), rows(tmp_path / "api.db", api_run)
    assert got == expected
    assert len(got["metrics"]) == STEPS * 5 - STEPS // 9  # every value of every step, once (repeats merged)

    adapter = ADAPTERS.get("verl")
    reference = HealthMonitor.from_config(None)
    for step, metrics in adapter.read_file(str(log)):  # merged and sorted, as the import judges it
        reference.observe(step, adapter.convert_step(metrics))
    report = json.loads(reference.report_json())
    assert health_json(tmp_path / "bulk.db", bulk_run) == report == health_json(tmp_path / "api.db", api_run)
    fired = {e["rule"]: e["step"] for e in report["events"]}
    assert fired == {"non_finite": 150, "length_blowup": 204, "reward_collapse": fired["reward_collapse"]}
    # The 0.4 drop starts at 300; the rule's running mean spans `window` observations, so it must fire
    # after the drop and before the window holds only dropped steps (plus the patience streak).
    collapse = RewardCollapseParams()
    assert 300 < fired["reward_collapse"] <= 300 + collapse.window + collapse.patience
