"""Imports are atomic and bounded (issue #31, class 3): every line is checked before the first
write, so a bad line anywhere leaves the store exactly as it was; malformed lines are errors
(with the line number) unless ``--skip-bad-lines``; FIFOs and devices are refused unopened; labels
are checked as a study file checks them. In-process through typer's runner (one import of the CLI)."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli.main import app

from .helpers import import_args, sqlite_uri

#: Every table an import writes to; a failed import must leave each one row for row as it was.
TABLES = ("experiments", "runs", "tags", "params", "metrics", "latest_metrics")


def log_lines(n: int = 40) -> list[str]:
    return [
        json.dumps(
            {
                "step": s,
                "data": {
                    "critic/score/mean": 0.1 * (s % 7),
                    "actor/entropy": 1.0 - s / 100,
                    "response_length/mean": 50.0 + s,
                },
            }
        )
        for s in range(1, n + 1)
    ]


def store_rows(db: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}


def invoke_cli(*args: str):
    """``workbench ARGS...`` in-process; an error is an exit code, never an exception."""
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def invoke(*args: str):
    """``workbench import verl ARGS...`` (test_identity and test_validate_first import it as ``invoke_verl``)."""
    return invoke_cli("import", "verl", *args)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store that already holds one imported study (a failed import must not touch it either)."""
    root = tmp_path_factory.mktemp("store")
    good = root / "good.jsonl"
    good.write_text("\n".join(log_lines()) + "\n")
    db = root / "mlflow.db"
    result = invoke_cli(*import_args("verl", good, study="verl-a", dst=sqlite_uri(db), variant="grpo", seeds=(0,)))
    assert result.exit_code == 0, result.output
    return db


BAD_LINES = {  # what goes wrong on the line -> a phrase of the message
    "step beyond int64": ('{"step": 9223372036854775808, "data": {"actor/entropy": 1.0}}', "out of range"),
    "step below int64": ('{"step": -9223372036854775809, "data": {"actor/entropy": 1.0}}', "out of range"),
    "a 400-digit number": ('{"step": 7, "data": {"actor/entropy": ' + "9" * 400 + "}}", "beyond a 64-bit float"),
    "1e400, which json reads as inf": ('{"step": 7, "data": {"actor/entropy": 1e400}}', "beyond a 64-bit float"),  # #53
    "not JSON": ('{"step": 7, "data": {"actor/entropy": 1.0', "invalid JSON"),
    "nested 200,000 deep": ('{"step": 7, "data": {"x": ' + "[" * 200_000 + "]" * 200_000 + "}}", "nested too deeply"),
    "metric name with !": ('{"step": 7, "data": {"reward!": 1.0}}', "not a valid MLflow metric name"),
    "metric name of 600 chars": ('{"step": 7, "data": {"' + "m" * 600 + '": 1.0}}', "longer than MLflow's 250"),
    "float step": ('{"step": 7.5, "data": {"actor/entropy": 1.0}}', "step 7.5 is not an integer"),
    "a console line in JSONL": ("step:7 - actor/entropy:1.0", "not a JSON line"),
}


@pytest.mark.parametrize("position", [1, 19, 39])  # 0-based index into 40 lines: second, middle, last
@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_bad_line_anywhere_leaves_the_store_exactly_as_before(store, tmp_path, case, position):
    line, phrase = BAD_LINES[case]
    lines = log_lines()
    lines[position] = line
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    before = store_rows(store)
    result = invoke_cli(*import_args("verl", path, study="verl-b", dst=sqlite_uri(store), variant="grpo", seeds=(1,)))
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert f"log.jsonl:{position + 1}:" in result.output and phrase in result.output, result.output
    assert "internal error" not in result.output
    assert store_rows(store) == before


def test_skip_bad_lines_imports_the_rest_and_counts_what_it_skipped(tmp_path):
    lines = log_lines(30)
    lines[4] = "{not json"
    lines[11] = '{"step": 12, "data": {"actor/entropy": ' + "1" * 400 + "}}"
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    db = tmp_path / "mlflow.db"
    result = invoke_cli(
        *import_args("verl", path, study="verl-c", dst=sqlite_uri(db), variant="grpo", seeds=(0,), skip_bad_lines=True)
    )
    assert result.exit_code == 0, result.output
    assert "skipped 2 malformed line(s) (first: line 5: invalid JSON" in " ".join(result.output.split())
    with sqlite3.connect(db) as con:
        steps = {s for (s,) in con.execute("SELECT DISTINCT step FROM metrics WHERE key = 'entropy/mean'")}
    assert steps == set(range(1, 31)) - {5, 12}


def test_a_fifo_and_a_device_are_refused_without_being_opened(tmp_path):
    fifo, uri = tmp_path / "pipe.log", sqlite_uri(tmp_path / "m.db")
    os.mkfifo(fifo)
    done = threading.Event()
    outcome = {}

    def run():
        outcome["fifo"] = invoke_cli(*import_args("verl", fifo, study="s", dst=uri, variant="v", seeds=(0,)))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(60):  # opening a FIFO with no writer would block here forever
        with open(fifo, "w"):  # unblock the reader so the thread ends, then fail
            pass
        pytest.fail("the import opened the FIFO")
    assert outcome["fifo"].exit_code == 2 and "is a FIFO, not a regular file" in outcome["fifo"].output
    zero = invoke_cli(*import_args("verl", "/dev/zero", study="s", dst=uri, variant="v", seeds=(0,)))
    assert zero.exit_code == 2 and "/dev/zero is a device or socket" in zero.output
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    "args, phrase",
    [
        (
            ["--study", "../x y/z", "--variant", "grpo", "--seed", "0"],
            "--study '../x y/z': '../x y/z' is not a safe MLflow",
        ),
        (
            ["--study", "ok", "--variant", "a b", "--seed", "0"],
            "--variant 'a b': variant name 'a b' is not an identifier",
        ),
        (["--study", "ok", "--variant", "grpo", "--seed", "-1"], "--seed -1: must be >= 0"),
        (["--study", "-lead", "--variant", "grpo", "--seed", "0"], "--study '-lead'"),  # own inputs beyond the issue's
        (["--study", "ok", "--variant", "2nd", "--seed", "0"], "--variant '2nd'"),
        (["--study", "ok", "--variant", "grpo", "--seed", str(2**63)], "--seed 9223372036854775808"),
    ],
)
def test_labels_a_study_file_would_reject_are_refused(tmp_path, args, phrase):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(log_lines(3)) + "\n")
    db = tmp_path / "m.db"
    result = invoke(str(path), *args, "--tracking-uri", sqlite_uri(db))  # the labels as given
    assert result.exit_code == 2, result.output
    assert phrase in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not db.exists()
