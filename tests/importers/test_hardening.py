"""Issue #53, the importers: every file an import reads is a regular, bounded file; a record an importer
cannot read whole is an error or, with ``--skip-bad-lines``, counted in its summary, never dropped in
silence; a step or value out of range is one line, not "internal error". Each refusal: one line naming the
file (and record, field), exit 2, nothing written. The tracker files are written with the libraries' own
classes (tests/importers/trackers_files.py)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli.main import app

from .helpers import child_runs, sqlite_uri
from .trackers_files import VERL_ROW, tensorboard_run, verl_history, wandb_log

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    result = CliRunner().invoke(app, ["import", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def refused(result, *phrases: str, store: Path) -> str:
    """The one error line of a refused import (exit 2), with every phrase in it; the store never created."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "internal error" not in lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert not store.exists()
    return lines[0]


def capped_cli(args: list[str], cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process with at most 3 GiB of memory and a timeout: a FIFO that blocks, or
    /dev/zero read whole, fails the test here instead of hanging the run or exhausting the machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DEBUG": "", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", *args],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        preexec_fn=cap,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


# ---- files that are not files ---------------------------------------------------------------------


def test_a_fifo_named_like_an_event_file_is_refused_not_waited_on(tmp_path):
    run = tmp_path / "tb"
    tensorboard_run(run, range(1, 6))
    os.mkfifo(run / "events.out.tfevents.0.pipe")  # the old reader handed it to EventAccumulator, which blocked
    db = tmp_path / "m.db"
    done = capped_cli(
        [
            "import",
            "tensorboard",
            str(run),
            "--study",
            "s",
            "--variant",
            "v",
            "--seed",
            "0",
            "--framework",
            "verl",
            "--tracking-uri",
            sqlite_uri(db),
        ],
        tmp_path,
    )
    assert "events.out.tfevents.0.pipe: not a regular file" in one_line(done)
    assert not db.exists()


def test_a_wandb_log_linked_to_dev_zero_is_refused_not_read_forever(tmp_path):
    run = tmp_path / "offline-run-1"
    run.mkdir()
    (run / "run-abc.wandb").symlink_to("/dev/zero")  # the old reader read it whole: MemoryError, "internal error"
    db = tmp_path / "m.db"
    done = capped_cli(
        [
            "import",
            "wandb",
            str(run),
            "--study",
            "s",
            "--variant",
            "v",
            "--seed",
            "0",
            "--framework",
            "verl",
            "--tracking-uri",
            sqlite_uri(db),
        ],
        tmp_path,
    )
    assert "run-abc.wandb: not a regular file" in one_line(done)
    assert not db.exists()


# ---- partial data is never silent -----------------------------------------------------------------


def corrupt_middle_record(event_file: Path, records_in: int) -> int:
    """Flip one byte inside the data of the record ``records_in`` records into the file; its byte offset."""
    import struct

    data, pos = bytearray(event_file.read_bytes()), 0
    for _ in range(records_in):
        pos += 12 + struct.unpack_from("<Q", data, pos)[0] + 4
    data[pos + 12 + 2] ^= 0xFF
    event_file.write_bytes(bytes(data))
    return pos


@pytest.mark.slow  # a fresh MLflow store for the import that succeeds
def test_a_tensorboard_crc_error_is_refused_or_skipped_and_counted(tmp_path):
    run = tmp_path / "tb"
    event_file = tensorboard_run(run, range(1, 11))
    offset = corrupt_middle_record(event_file, 5)  # record 0 is the file_version event: 5 is step 5's
    db = tmp_path / "m.db"
    args = [
        "tensorboard",
        run,
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        sqlite_uri(db),
    ]
    refused(
        invoke(*args), f"{event_file}: byte {offset}: a record fails its CRC check", "--skip-bad-lines", store=db
    )  # the old reader imported steps 1-4 and said nothing
    done = invoke(*args, "--skip-bad-lines")
    assert done.exit_code == 0, done.output
    assert (
        f"v/seed=0: skipped 1 malformed record(s) (first: {event_file.name}: byte {offset}: a record fails its CRC"
        in " ".join(done.output.split())
    )
    (run_,) = child_runs(sqlite_uri(db), "s")
    from mlflow import MlflowClient

    steps = sorted(p.step for p in MlflowClient(sqlite_uri(db)).get_metric_history(run_.info.run_id, "reward/mean"))
    assert steps == [1, 2, 3, 4, 6, 7, 8, 9, 10]  # the records after the bad one are read too


@pytest.mark.slow  # a fresh MLflow store for the import that succeeds
def test_a_tensorboard_file_cut_short_is_counted_not_silent(tmp_path):
    run = tmp_path / "tb"
    event_file = tensorboard_run(run, range(1, 6))
    event_file.write_bytes(event_file.read_bytes()[:-10])  # a writer still running: the last record half there
    db = tmp_path / "m.db"
    args = [
        "tensorboard",
        run,
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        sqlite_uri(db),
    ]
    refused(invoke(*args), str(event_file), "the last record is cut short", store=db)
    done = invoke(*args, "--skip-bad-lines")
    assert done.exit_code == 0 and "skipped 1 malformed record(s)" in done.output, done.output


HUGE = "9" * 5000  # W&B's own client cannot write it (json refuses ints past 4,300 digits); a crafted file can


@pytest.mark.slow  # a fresh MLflow store for the import that succeeds
@pytest.mark.parametrize(
    ("row", "phrases"),
    [
        (
            {"_step": "3", "critic/score/mean": HUGE},
            ["history record 3: 'critic/score/mean': not readable as a number (5,000 characters"],
        ),
        (
            {"_step": "3", "critic/score/mean": "1e400"},
            ["history record 3: 'critic/score/mean': value", "out of range"],
        ),
        (
            {"_step": "1e300", "critic/score/mean": "0.5"},
            ["history record 3: step", "is out of range (MLflow steps are 64-bit integers)"],
        ),
        ({"_step": "2.5", "critic/score/mean": "0.5"}, ["history record 3: step 2.5 is not an integer"]),
        (
            {"_step": "3", "critic/score/mean": "[" * 100_000 + "]" * 100_000},
            ["'critic/score/mean': nested too deeply"],
        ),
    ],
)
def test_a_wandb_value_or_step_that_cannot_be_read_is_one_line_or_counted(tmp_path, row, phrases):
    history = verl_history([1, 2]) + [row] + verl_history([4, 5])
    log = wandb_log(tmp_path / "offline-run-1", history)
    db = tmp_path / "m.db"
    args = [
        "wandb",
        log.parent,
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        sqlite_uri(db),
    ]
    refused(invoke(*args), str(log), *phrases, store=db)  # old: dropped in silence, or "internal error" (1e300)
    done = invoke(*args, "--skip-bad-lines")
    assert done.exit_code == 0, done.output
    assert "v/seed=0: skipped 1 malformed record(s) (first: history record 3:" in " ".join(done.output.split())


@pytest.mark.slow  # a fresh MLflow store for the import that succeeds
def test_wandb_strings_and_tables_are_not_metrics_and_not_errors(tmp_path):
    history = [{**row, "note": '"a string"', "table": '{"_type": "table-file"}'} for row in verl_history([1, 2, 3])]
    log = wandb_log(tmp_path / "offline-run-1", history)
    done = invoke(
        "wandb",
        log.parent,
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        sqlite_uri(tmp_path / "m.db"),
    )
    assert done.exit_code == 0 and "skipped" not in done.output, done.output
    (run,) = child_runs(sqlite_uri(tmp_path / "m.db"), "s")
    assert run.data.metrics["reward/mean"] == VERL_ROW["critic/score/mean"] + 0.03


def test_a_trainer_step_beyond_int64_in_a_tracker_run_is_one_line(tmp_path):
    """HF's WandbCallback/TensorBoardCallback log the trainer's step as the scalar train/global_step, which the
    import takes as the step: 1e30 (a float32 can hold it) is past MLflow's 64-bit steps. Old: OverflowError
    in the bulk write, "internal error"."""
    run = tmp_path / "tb"
    tensorboard_run(run, range(1, 4), row={"train/reward": 0.5, "train/entropy": 1.0, "train/global_step": 1e30})
    db = tmp_path / "m.db"
    refused(
        invoke(
            "tensorboard",
            run,
            "--study",
            "s",
            "--variant",
            "v",
            "--seed",
            "0",
            "--framework",
            "trl",
            "--tracking-uri",
            sqlite_uri(db),
        ),
        str(run),
        "train/global_step at tracker step 1: step",
        "is out of range (MLflow steps are 64-bit integers)",
        store=db,
    )


def test_a_1000_character_tensorboard_tag_is_refused_with_mlflows_limit(tmp_path):
    run = tmp_path / "tb"
    tensorboard_run(run, range(1, 4), row={**VERL_ROW, "m" * 1000: 1.0})
    db = tmp_path / "m.db"
    refused(
        invoke(
            "tensorboard",
            run,
            "--study",
            "s",
            "--variant",
            "v",
            "--seed",
            "0",
            "--framework",
            "verl",
            "--tracking-uri",
            sqlite_uri(db),
        ),
        str(run),
        "longer than MLflow's 250 characters",
        store=db,
    )


@pytest.mark.parametrize(
    ("value", "phrases"),
    [
        ("1e400", ["trainer_state.json: log_history entry 1: value '1e400' is out of range (beyond a 64-bit float)"]),
        ("9" * 5000, ["trainer_state.json is not a TRL trainer state (not JSON)", "4300"]),
    ],
)
def test_a_trl_value_beyond_a_float_is_one_line_not_infinity(tmp_path, value, phrases):
    """json reads 1e400 as inf without a word (old: imported as an infinite reward); a 5,000-digit integer is past
    Python's conversion limit."""
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"step": 1, "reward": 0.5}, {"step": 2, "reward": ' + value + "}]}")
    db = tmp_path / "m.db"
    refused(
        invoke("trl", state, "--study", "s", "--variant", "v", "--seed", "0", "--tracking-uri", sqlite_uri(db)),
        *phrases,
        store=db,
    )
