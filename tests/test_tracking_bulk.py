"""tracking/bulk.py writes a run's metric rows as MLflow's ``log_batch`` does (issue #31).

The same points go to one run through ``MlflowClient.log_batch`` and to another through
``write_metric_history``; every row of ``metrics`` and ``latest_metrics`` (value, storage class,
timestamp, step, is_nan) must be the same, and so must what ``MlflowClient`` reads back. A real
SQLite store, no mocks.
"""

from __future__ import annotations

import math
import shutil
import sqlite3

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from workbench.tracking.bulk import MetricColumns, bulk_writable, write_metric_history
from workbench.tracking.writer import RunTracker, store_value

TS = 1_764_000_000_123

# Points with what needs care: NaN (stored as 0, is_nan set), ±inf (±1e308, as RunTracker sends them),
# -0.0, the largest and smallest floats, steps at the int64 ends, a metric logged at some steps only,
# and a latest value that is not the last one logged (a step logged after a larger one).
POINTS = [
    (0, {"reward/mean": 0.5, "loss/policy": math.nan, "grad/norm": 1.25}),
    (1, {"reward/mean": -0.0, "loss/policy": math.inf, "grad/norm": -math.inf}),
    (2, {"reward/mean": 1.7976931348623157e308, "loss/policy": 5e-324}),
    (7, {"reward/mean": math.nan, "entropy/mean": 0.1}),
    (3, {"entropy/mean": 0.2}),
    (2**63 - 1, {"source/huge_step": 3.0}),
    (-(2**63), {"source/huge_step": -3.0}),
    (9, {"grad/norm": math.nan}),
]


def metric_rows(db, run_id: str) -> list[str]:
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT key, value, typeof(value), timestamp, typeof(timestamp), step, typeof(step), is_nan, "
            "typeof(is_nan) FROM metrics WHERE run_uuid = ?",
            (run_id,),
        ).fetchall()
    return sorted(map(repr, rows))


def latest_rows(db, run_id: str) -> list[str]:
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT key, value, typeof(value), timestamp, step, is_nan, typeof(is_nan) FROM latest_metrics "
            "WHERE run_uuid = ?",
            (run_id,),
        ).fetchall()
    return sorted(map(repr, rows))


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.create_experiment("bulk", artifact_location=(tmp_path / "artifacts").as_uri())
    return db, client, experiment


def test_bulk_rows_are_log_batch_rows(store):
    db, client, experiment = store
    by_api, by_bulk = (client.create_run(experiment).info.run_id for _ in range(2))
    metrics = [Metric(k, store_value(v), TS, s) for s, m in POINTS for k, v in m.items()]
    for i in range(0, len(metrics), 4):  # several batches, as RunTracker sends them
        client.log_batch(by_api, metrics=metrics[i : i + 4])
    chunks = [MetricColumns.of_steps(POINTS[:4]), MetricColumns.of_steps([]), MetricColumns.of_steps(POINTS[4:])]
    assert write_metric_history(f"sqlite:///{db}", by_bulk, chunks, TS) == len(metrics) == 14

    assert metric_rows(db, by_bulk) == metric_rows(db, by_api)
    assert latest_rows(db, by_bulk) == latest_rows(db, by_api)
    # hand-checked: NaN as 0 with is_nan; inf as 1e308; the latest reward is step 7's NaN, not step 2's
    assert "('loss/policy', 0.0, 'real', 1764000000123, 'integer', 0, 'integer', 1, 'integer')" in metric_rows(
        db, by_bulk
    )
    assert "('loss/policy', 1e+308, 'real', 1764000000123, 'integer', 1, 'integer', 0, 'integer')" in metric_rows(
        db, by_bulk
    )
    assert "('reward/mean', 0.0, 'real', 1764000000123, 7, 1, 'integer')" in latest_rows(db, by_bulk)
    assert "('source/huge_step', 3.0, 'real', 1764000000123, 9223372036854775807, 0, 'integer')" in latest_rows(
        db, by_bulk
    )
    # and MLflow reads them back the same way
    api, bulk = client.get_run(by_api).data.metrics, client.get_run(by_bulk).data.metrics
    assert repr(sorted(api.items())) == repr(sorted(bulk.items()))
    for key in api:
        assert repr(client.get_metric_history(by_bulk, key)) == repr(client.get_metric_history(by_api, key))


def test_bulk_rows_are_the_rows_of_the_run_tracker_path(store, tmp_path):
    # the import's former write path (RunTracker -> log_batch), timestamps aside
    db, client, experiment = store
    uri = f"sqlite:///{db}"
    tracker = RunTracker(uri, "bulk", "tracked", {}, flush_every=3)
    tracker.start()
    for step, metrics in sorted(POINTS):
        tracker.log_metrics(metrics, step=step)
    tracker.finish()
    by_bulk = client.create_run(experiment).info.run_id
    write_metric_history(uri, by_bulk, [MetricColumns.of_steps(POINTS)], TS)

    def without_time(rows):
        return sorted(r.replace(r.split(", ")[3], "TS") for r in rows)

    assert without_time(metric_rows(db, by_bulk)) == without_time(metric_rows(db, tracker.run_id))
    assert without_time(latest_rows(db, by_bulk)) == without_time(latest_rows(db, tracker.run_id))


def test_a_failure_part_way_leaves_no_row(store):
    db, client, experiment = store
    run = client.create_run(experiment).info.run_id
    before = {
        t: sqlite3.connect(db).execute(f"SELECT count(*) FROM {t}").fetchone() for t in ("metrics", "latest_metrics")
    }

    def chunks():
        yield MetricColumns.of_steps(POINTS[:3])
        raise OSError("the source broke off")

    with pytest.raises(OSError, match="broke off"):
        write_metric_history(f"sqlite:///{db}", run, chunks(), TS)
    after = {
        t: sqlite3.connect(db).execute(f"SELECT count(*) FROM {t}").fetchone() for t in ("metrics", "latest_metrics")
    }
    assert after == before
    write_metric_history(f"sqlite:///{db}", run, [MetricColumns.of_steps(POINTS)], TS)  # the store is not locked


def test_only_a_sqlite_store_with_mlflows_columns_is_written_in_bulk(store, tmp_path):
    db, _, _ = store
    assert bulk_writable(f"sqlite:///{db}")
    assert not bulk_writable(f"sqlite:///{tmp_path / 'none.db'}")
    assert not bulk_writable("postgresql://u@localhost/mlflow") and not bulk_writable("http://localhost:5000")
    changed = tmp_path / "changed.db"
    shutil.copy(db, changed)
    with sqlite3.connect(changed) as con:
        con.execute("ALTER TABLE metrics ADD COLUMN model_id VARCHAR(32)")  # a schema this was not checked against
    assert not bulk_writable(f"sqlite:///{changed}")
