"""One way to open a user's file (workbench/safe_io.py): a FIFO, a device, an alias bomb or JSON nested past
Python's stack is refused in one line naming the file (exit 2), quickly, through the real CLI. Each command
runs in its own process under a memory cap and a timeout: on the old code they hung or exhausted memory."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.execution_helpers import fast_run_config
from workbench.errors import UserFileError
from workbench.safe_io import MAX_ALIASES, MAX_DEPTH, load_yaml, parse_json, read_json, read_text

ROOT = Path(__file__).resolve().parents[1]
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)  # 10^9 strings


def workbench(args: list[str], cwd: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a process of its own, at most 3 GiB of memory (a bomb fails there, not on the machine)."""

    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DEBUG": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", *args],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        preexec_fn=cap_memory,
    )
    return done, time.monotonic() - start


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def no_experiment(db: Path, name: str) -> bool:
    if not db.exists():
        return True
    with sqlite3.connect(db) as connection:
        return not connection.execute("SELECT 1 FROM experiments WHERE name = ?", (name,)).fetchall()


def write_micro_study(workdir: Path) -> Path:
    study = workdir / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "guarded", "base": fast_run_config(), "seeds": [0]}))
    return study


@pytest.mark.slow
def test_a_fifo_in_the_dashboards_folder_is_refused_by_run_not_waited_on(tmp_path):
    (tmp_path / "dashboards").mkdir()
    os.mkfifo(tmp_path / "dashboards" / "pipe.yaml")  # opening it to read would wait for a writer forever
    done, _ = workbench(["run", str(write_micro_study(tmp_path)), "--quiet"], tmp_path)
    line = one_error_line(done)
    assert "dashboards/pipe.yaml: not a regular file" in line
    assert no_experiment(tmp_path / "mlflow.db", "guarded")  # refused before the study was opened


@pytest.mark.slow
def test_a_yaml_alias_bomb_as_a_dashboard_spec_is_refused_in_seconds(tmp_path):
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "bomb.yaml").write_text(BOMB)
    done, seconds = workbench(["run", str(write_micro_study(tmp_path)), "--quiet"], tmp_path)
    line = one_error_line(done)
    assert no_experiment(tmp_path / "mlflow.db", "guarded")
    assert "dashboards/bomb.yaml:6: YAML aliases expand to more than 200,000 values" in line
    assert seconds < 60  # the whole command, torch's import included; the refusal itself takes milliseconds


def test_an_export_whose_manifest_nests_past_the_stack_is_one_line_not_a_traceback(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (export / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    done, _ = workbench(["import", "workbench", str(export)], tmp_path)
    assert "manifest.json: JSON nested too deeply" in one_error_line(done)


def test_a_fifo_among_an_exports_files_is_refused_not_waited_on(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    files = {
        name: {"sha256": "0" * 64, "rows": 0}
        for name in ("runs.parquet", "metrics.parquet", "problems.parquet", "artifacts.parquet")
    }
    (export / "manifest.json").write_text(
        json.dumps({"format": "workbench-study-export", "format_version": 1, "experiment": "s", "files": files})
    )
    os.mkfifo(export / "runs.parquet")
    done, _ = workbench(["import", "workbench", str(export)], tmp_path)
    assert "runs.parquet: not a regular file" in one_error_line(done)


# ---- the module itself (in process: none of these can block or blow up with the module in place)


def test_devices_fifos_and_symlinks_out_of_the_folder_are_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(UserFileError, match=r"pipe.json: not a regular file"):
        read_json(tmp_path / "pipe.json")
    with pytest.raises(UserFileError, match=r"/dev/zero: not a regular file"):
        read_text("/dev/zero")
    folder = tmp_path / "specs"
    folder.mkdir()
    (tmp_path / "secret.yaml").write_text("x: 1\n")
    (folder / "link.yaml").symlink_to(tmp_path / "secret.yaml")
    with pytest.raises(UserFileError, match=r"link.yaml: resolves to .*secret.yaml, outside .*specs: refused"):
        read_text(folder / "link.yaml", inside=folder)
    (folder / "ok.yaml").symlink_to(folder / "real.yaml")
    (folder / "real.yaml").write_text("x: 1\n")
    assert read_text(folder / "ok.yaml", inside=folder) == "x: 1\n"  # a link that stays inside is fine


def test_the_size_cap_applies_before_reading(tmp_path):
    (tmp_path / "big.json").write_text("[" + "0," * 1000 + "0]")
    with pytest.raises(UserFileError, match=r"big.json: larger than 1 KiB: too large"):
        read_json(tmp_path / "big.json", limit=1024)


def test_yaml_budgets_aliases_and_depth_and_json_depth():
    t0 = time.monotonic()
    with pytest.raises(UserFileError, match="spec.yaml:6: YAML aliases expand to more than 200,000 values"):
        load_yaml(BOMB, "spec.yaml")
    assert time.monotonic() - t0 < 2
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(UserFileError, match=f"many.yaml:2: more than {MAX_ALIASES} YAML aliases"):
        load_yaml(many, "many.yaml")
    with pytest.raises(UserFileError, match=f"deep.yaml:1: YAML nested more than {MAX_DEPTH} levels deep"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "deep.yaml")
    assert load_yaml("[" * 10 + "]" * 10, "fine.yaml")[1] == [[[[[[[[[[]]]]]]]]]]
    with pytest.raises(UserFileError, match="record.json: JSON nested too deeply"):
        parse_json("[" * 200_000 + "]" * 200_000, "record.json")


# ---- parquet: the row count and decompressed size are checked before decoding -------------------


def row_bomb(rows: int, batch: int = 1_000_000) -> bytes:
    """A metrics.parquet of ``rows`` identical points: zstd keeps it at ~20 bytes per million rows' worth
    of pages, while Arrow would decode it to ~33 bytes a row (25M rows: 0.5 MB on disk, 0.8 GB decoded,
    and several times that once the loader turns it into numpy and pandas)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("run", pa.int32()),
            ("key", pa.string()),
            ("step", pa.int64()),
            ("value", pa.float64()),
            ("timestamp", pa.int64()),
        ]
    )
    chunk = pa.record_batch(
        [
            pa.array(np.zeros(batch, np.int32)),
            pa.array(["k"] * batch),
            pa.array(np.zeros(batch, np.int64)),
            pa.array(np.zeros(batch)),
            pa.array(np.zeros(batch, np.int64)),
        ],
        schema=schema,
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for _ in range(rows // batch):
            writer.write_batch(chunk, row_group_size=batch)
    return sink.getvalue().to_pybytes()


def test_a_parquet_row_bomb_in_an_export_is_refused_before_decoding(tmp_path):
    import hashlib
    import shutil

    from workbench.safe_io import MAX_PARQUET_ROWS

    export = tmp_path / "export"
    shutil.copytree(ROOT / "docs" / "findings" / "data" / "priming", export)
    bomb = row_bomb(MAX_PARQUET_ROWS + 5_000_000)
    assert len(bomb) < 2 << 20  # a small file on disk
    (export / "metrics.parquet").write_bytes(bomb)
    manifest = json.loads((export / "manifest.json").read_text())  # consistent: checksum and row count match
    manifest["files"]["metrics.parquet"].update(
        sha256=hashlib.sha256(bomb).hexdigest(), rows=MAX_PARQUET_ROWS + 5_000_000
    )
    (export / "manifest.json").write_text(json.dumps(manifest))
    done, seconds = workbench(
        ["import", "workbench", str(export), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], tmp_path
    )
    line = one_error_line(done)  # the old code decoded it: MemoryError under the 3 GiB cap, "internal error"
    assert "metrics.parquet: 25,000,000 rows, over the limit of 20,000,000: refused before decoding it" in line
    assert not (tmp_path / "m.db").exists()
    assert seconds < 60


def test_a_parquet_file_that_decodes_past_its_metadata_is_stopped_at_the_budget():
    """A dictionary-encoded column: its pages (and the sizes the footer declares) hold one 1 KB string and
    10,000 indices, but every row decodes to the string: 10 MB. The declared size passes; the decoding
    itself is counted and stopped at the budget."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workbench.safe_io import read_parquet

    column = pa.DictionaryArray.from_arrays(pa.array([0] * 10_000, pa.int32()), pa.array(["x" * 1024]))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"data": column}), sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    assert read_parquet(data, "a.parquet").num_rows == 10_000
    with pytest.raises(UserFileError, match=r"a.parquet: decodes to more than its metadata says"):
        read_parquet(data, "a.parquet", max_decoded_bytes=1 << 20, batch_rows=1000)
    with pytest.raises(UserFileError, match=r"a.parquet: 10,000 rows, over the limit of 5,000"):
        read_parquet(data, "a.parquet", max_rows=5000)
    with pytest.raises(UserFileError, match=r"b.parquet: not a parquet file"):
        read_parquet(b"PAR1 not really", "b.parquet")
