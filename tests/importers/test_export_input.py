"""`workbench import workbench DIR` with an export someone edited (issue #53): everything the load will write is
checked by MLflow's own limits first (a bulk load never asks MLflow), a run is loaded once, only finished runs
are loaded, and a run's times are kept as they were or refused. Each refusal: one line naming the file and the
row or run, exit 2, the store as it was; the same load succeeds once the export is fixed.

The base is a committed export (docs/findings/data/engines-mismatch: 7 runs and their parent), copied and
edited with pyarrow, its manifest's checksums and row counts kept consistent, as a careful forger would."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from workbench.cli.main import app

from .helpers import sqlite_uri
from .test_atomic_import import store_rows

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "docs" / "findings" / "data" / "engines-mismatch"

pytestmark = pytest.mark.slow  # each test writes a fresh MLflow store (~5 s on a loaded machine)


def load(directory: Path, db: Path):
    result = CliRunner().invoke(app, ["import", "workbench", str(directory), "--tracking-uri", sqlite_uri(db)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def copy_of(tmp_path: Path) -> Path:
    out = tmp_path / "export"
    shutil.copytree(BASE, out)
    return out


def rewrite(export: Path, name: str, table: pa.Table) -> None:
    """Replace one parquet file of the export, its manifest entry updated to match."""
    pq.write_table(table, export / name, compression="zstd")
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["files"][name].update(sha256=hashlib.sha256((export / name).read_bytes()).hexdigest(), rows=table.num_rows)
    (export / "manifest.json").write_text(json.dumps(manifest))


def edit_runs(export: Path, edit) -> None:
    rows = pq.read_table(export / "runs.parquet").to_pylist()
    edit(rows)
    rewrite(export, "runs.parquet", pa.Table.from_pylist(rows, schema=pq.read_schema(export / "runs.parquet")))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding another study already: a refused load must leave every row of it as it was."""
    root = tmp_path_factory.mktemp("store")
    db = root / "mlflow.db"
    other = root / "other"
    shutil.copytree(ROOT / "docs" / "findings" / "data" / "priming", other)
    assert load(other, db).exit_code == 0
    return db


def refused(result, db: Path, before, *phrases: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert store_rows(db) == before  # nothing written: no parent run, no run, no tag


def params_edit(key: str, value: str):
    def edit(rows):
        params = json.loads(rows[3]["params"])
        params[key] = value
        rows[3]["params"] = json.dumps(params, sort_keys=True)

    return edit


# ---- what the load writes, checked first (class "write, then fail") -------------------------------


@pytest.mark.parametrize(
    ("edit", "phrases"),
    [
        (params_edit("lr[0]!", "1"), ["runs.parquet: row 3: parameter name 'lr[0]!' is not one MLflow accepts"]),
        (params_edit("p" * 300, "1"), ["runs.parquet: row 3: parameter name", "longer than MLflow's 250"]),
        (
            params_edit("notes", "x" * 7000),
            ["runs.parquet: row 3: parameter 'notes': a value of 7,000 characters, over MLflow's 6,000"],
        ),
    ],
)
def test_a_parameter_mlflow_would_refuse_is_refused_before_the_first_write(store, tmp_path, edit, phrases):
    export = copy_of(tmp_path)
    edit_runs(export, edit)
    before = store_rows(store)
    refused(load(export, store), store, before, *phrases)  # old: parent and runs 1-2 written, then a traceback


def test_a_metric_key_over_mlflows_250_characters_is_refused(store, tmp_path):
    export = copy_of(tmp_path)
    metrics = pq.read_table(export / "metrics.parquet")
    keys = metrics.column("key").to_pylist()
    keys[0] = "m" * 1000  # run 1's first point
    rewrite(
        export,
        "metrics.parquet",
        metrics.set_column(metrics.schema.get_field_index("key"), "key", pa.array(keys, pa.string())),
    )
    before = store_rows(store)
    refused(load(export, store), store, before, "metrics.parquet: run 1: metric name", "longer than MLflow's 250")


def test_a_fixed_export_loads_after_a_refusal(tmp_path):
    export = copy_of(tmp_path)
    db = tmp_path / "mlflow.db"
    edit_runs(export, params_edit("bad!key", "1"))
    assert load(export, db).exit_code == 2
    shutil.rmtree(export)
    done = load(copy_of(tmp_path), db)
    assert done.exit_code == 0 and "7 run(s) loaded" in done.output, done.output


# ---- identity: a run is loaded once, finished, with its own times -------------------------------


def test_a_duplicated_run_row_is_refused(store, tmp_path):
    export = copy_of(tmp_path)
    edit_runs(export, lambda rows: rows.append({**rows[2], "run": len(rows)}))  # run 2, twice
    before = store_rows(store)
    refused(load(export, store), store, before, "runs.parquet: rows 2 and 8 are the same run")


def test_two_finished_rows_of_one_run_key_are_refused(store, tmp_path):
    export = copy_of(tmp_path)
    edit_runs(export, lambda rows: rows.append({**rows[2], "run": len(rows), "start_time": rows[2]["start_time"] + 1}))
    before = store_rows(store)
    refused(load(export, store), store, before, "runs.parquet: rows 2 and 8 are both a FINISHED run of run_key")


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"start_time": None}, "runs.parquet: row 4: start_time is empty"),
        ({"end_time": 1}, "runs.parquet: row 4: end_time 1 is before start_time"),
        ({"end_time": None}, "runs.parquet: row 4: a FINISHED run without an end_time"),
    ],
)
def test_a_run_whose_times_mlflow_would_not_keep_is_refused(store, tmp_path, change, phrase):
    export = copy_of(tmp_path)
    edit_runs(export, lambda rows: rows[4].update(change))
    before = store_rows(store)
    refused(load(export, store), store, before, phrase)  # old: start became the load's own time, after the end


def test_a_scheduled_run_is_not_loaded_as_a_phantom_running_run(tmp_path):
    export = copy_of(tmp_path)
    edit_runs(export, lambda rows: rows[5].update(status="SCHEDULED", end_time=None))
    db = tmp_path / "mlflow.db"
    done = load(export, db)
    assert done.exit_code == 0, done.output
    assert "6 run(s) loaded" in done.output and "not loaded, not finished in the export" in done.output
    with sqlite3.connect(db) as con:
        statuses = {s for (s,) in con.execute("SELECT status FROM runs WHERE lifecycle_stage = 'active'")}
    assert statuses == {"FINISHED"}  # old: a RUNNING run that never ends
