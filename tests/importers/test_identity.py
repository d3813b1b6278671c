"""Imported runs are keyed by identity (issue #53): (study, framework, variant, seed, the source's own run id where
it has one). A log that grew since its import replaces its run instead of adding a second FINISHED run of the same
seed, which ``compare`` counted twice; the same source again adds nothing; a source that would give the study a
second run of a (variant, seed) it already has from elsewhere is refused, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
from mlflow import MlflowClient

from .helpers import child_runs, sqlite_uri, workbench
from .test_atomic_import import invoke as invoke_verl
from .test_atomic_import import log_lines, store_rows
from .test_hardening import invoke
from .trackers_files import tensorboard_run, verl_history, wandb_log

pytestmark = pytest.mark.slow  # each test writes a fresh MLflow store (~5 s on a loaded machine)


def steps_of(uri: str, run, key: str = "entropy/mean") -> list[int]:
    return sorted(p.step for p in MlflowClient(uri).get_metric_history(run.info.run_id, key))


def test_a_verl_log_that_grew_is_imported_again_as_one_run_with_all_its_points(tmp_path):
    """The acceptance test: import a log, let it grow, import again: one run per (study, variant, seed)."""
    log, db = tmp_path / "train.jsonl", tmp_path / "mlflow.db"
    uri = sqlite_uri(db)
    lines = log_lines(60)
    log.write_text("\n".join(lines[:20]) + "\n")  # the run is at step 20
    args = [str(log), "--study", "grow", "--variant", "grpo", "--seed", "0", "--tracking-uri", uri]
    other = tmp_path / "seed1.jsonl"
    other.write_text("\n".join(lines[:30]) + "\n")
    assert invoke_verl(*args).exit_code == 0
    assert (
        invoke_verl(str(other), "--study", "grow", "--variant", "grpo", "--seed", "1", "--tracking-uri", uri).exit_code
        == 0
    )
    (first,) = [r for r in child_runs(uri, "grow") if r.data.tags["workbench.seed"] == "0"]

    log.write_text("\n".join(lines) + "\n")  # ... and on to step 60
    again = invoke_verl(*args)
    assert again.exit_code == 0, again.output
    assert f"updated grpo/seed=0: its source changed since run {first.info.run_id} was imported" in again.output
    runs = child_runs(uri, "grow")
    assert sorted(r.data.tags["workbench.seed"] for r in runs) == ["0", "1"]  # old: a second FINISHED grpo/seed=0
    (grown,) = [r for r in runs if r.data.tags["workbench.seed"] == "0"]
    assert steps_of(uri, grown) == list(range(1, 61))  # all its points
    assert grown.data.tags["workbench.run_key"] == first.data.tags["workbench.run_key"]  # the same identity
    assert grown.info.run_id != first.info.run_id

    same = invoke_verl(*args)  # unchanged since: nothing new
    assert same.exit_code == 0 and "already imported (skipped): grpo/seed=0 (imported before" in same.output
    assert len(child_runs(uri, "grow")) == 2
    done = workbench("compare", "grow", "--format", "json", "--no-log", "--tracking-uri", uri, cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # compare counts two runs of grpo, one per seed (old: three runs)
    assert {(row["n_seeds"], row["n_runs"]) for row in json.loads(done.stdout)["rows"]} == {(2, 2)}


def test_a_tensorboard_run_that_grew_replaces_its_run(tmp_path):
    run_dir, uri = tmp_path / "tb", sqlite_uri(tmp_path / "m.db")
    tensorboard_run(run_dir, range(1, 6))
    args = [
        "tensorboard",
        run_dir,
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        uri,
    ]
    assert invoke(*args).exit_code == 0
    shutil.rmtree(run_dir)
    tensorboard_run(run_dir, range(1, 11))  # the writer went on to step 10
    again = invoke(*args)
    assert again.exit_code == 0 and "updated v/seed=0" in again.output, again.output
    (run,) = child_runs(uri, "s")
    assert steps_of(uri, run, "reward/mean") == list(range(1, 11))


def test_wandb_runs_are_told_apart_by_their_own_run_id(tmp_path):
    uri = sqlite_uri(tmp_path / "m.db")
    first = wandb_log(tmp_path / "offline-run-1", verl_history(range(1, 4)), run_id="aaa111")
    args = ["--study", "s", "--variant", "v", "--seed", "0", "--framework", "verl", "--tracking-uri", uri]
    assert invoke("wandb", first.parent, *args).exit_code == 0
    grown = wandb_log(tmp_path / "offline-run-1", verl_history(range(1, 8)), run_id="aaa111")
    assert invoke("wandb", grown.parent, *args).exit_code == 0
    (run,) = child_runs(uri, "s")
    assert run.data.tags["workbench.source_wandb_run"] == "aaa111"
    assert steps_of(uri, run, "reward/mean") == list(range(1, 8))
    other = wandb_log(tmp_path / "offline-run-2", verl_history(range(1, 4)), run_id="bbb222")  # another run, same seed
    before = store_rows(tmp_path / "m.db")
    refused = invoke("wandb", other.parent, *args)
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert "study 's' already has v/seed=0" in refused.output and "counted twice" in refused.output
    assert store_rows(tmp_path / "m.db") == before


def test_the_same_file_under_another_seed_adds_nothing(tmp_path):
    log, uri = tmp_path / "a.jsonl", sqlite_uri(tmp_path / "m.db")
    log.write_text("\n".join(log_lines(10)) + "\n")
    assert invoke_verl(str(log), "--study", "s", "--variant", "v", "--seed", "0", "--tracking-uri", uri).exit_code == 0
    again = invoke_verl(str(log), "--study", "s", "--variant", "v", "--seed", "1", "--tracking-uri", uri)
    assert again.exit_code == 0 and "(same source as run" in again.output
    assert len(child_runs(uri, "s")) == 1
