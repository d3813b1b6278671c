"""Bad input to `workbench import`: one line naming the problem, exit code 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import sqlite_uri, workbench


@pytest.fixture(scope="module")
def source_store(tmp_path_factory):
    """A real MLflow store holding one TRL-like run (params loss_type and seed, two metric points)."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("src")
    uri = sqlite_uri(root / "trl.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("trl-grpo", artifact_location=(root / "art").as_uri())
    run = client.create_run(exp, run_name="grpo-0")
    client.log_param(run.info.run_id, "loss_type", "grpo")
    client.log_param(run.info.run_id, "seed", "0")
    for step in (1, 2):
        client.log_metric(run.info.run_id, "reward", 0.5, step=step)
    client.set_terminated(run.info.run_id)
    return uri


def _assert_refused(proc, *words: str, dst: Path) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not dst.exists()  # nothing written: the destination store was never created


def test_unknown_framework(tmp_path):
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.1}]}))
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "openrlhf",
        str(state),
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "unknown framework 'openrlhf'", "trl", "verl", dst=dst)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_store_without_the_experiment(source_store, tmp_path):
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "trl",
        "--from",
        source_store,
        "--experiment",
        "trl-grpoo",
        "--study",
        "s",
        "--variant-by",
        "param:loss_type",
        "--seed-by",
        "param:seed",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "--experiment 'trl-grpoo'", "no such experiment", "trl-grpo", dst=dst)


def test_store_that_does_not_exist(tmp_path):
    dst = tmp_path / "dst.db"
    missing = tmp_path / "nowhere.db"
    proc = workbench(
        "import",
        "trl",
        "--from",
        sqlite_uri(missing),
        "--experiment",
        "e",
        "--study",
        "s",
        "--variant-by",
        "param:loss_type",
        "--seed-by",
        "param:seed",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "no MLflow store", dst=dst)
    assert not missing.exists()  # reading a missing store must not create it either


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"global_step": 3, "best_metric": null}', "no 'log_history' list"),
        ("step:1 - loss:0.5\n", "not JSON"),
        ('{"log_history": [{"loss": 0.5}]}', "log_history entry 0: no integer 'step'"),
    ],
)
def test_file_that_is_not_a_trainer_state(tmp_path, content, problem):
    bad = tmp_path / "state.json"
    bad.write_text(content)
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "trl",
        str(bad),
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, str(bad), problem, dst=dst)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_file_that_is_not_a_verl_log(tmp_path):
    bad = tmp_path / "train.log"
    bad.write_text("INFO starting\nepoch 1 done\n")
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "verl",
        str(bad),
        "--study",
        "s",
        "--variant",
        "v",
        "--seed",
        "0",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, str(bad), "is not a verl metric log", dst=dst)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_variant_by_a_param_that_does_not_exist(source_store, tmp_path):
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "trl",
        "--from",
        source_store,
        "--experiment",
        "trl-grpo",
        "--study",
        "s",
        "--variant-by",
        "param:loss_typ",
        "--seed-by",
        "param:seed",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "--variant-by param:loss_typ", "has no param 'loss_typ'", "loss_type", dst=dst)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_selector_without_kind_and_seed_that_is_not_an_integer(source_store, tmp_path):
    dst = tmp_path / "dst.db"
    proc = workbench(
        "import",
        "trl",
        "--from",
        source_store,
        "--experiment",
        "trl-grpo",
        "--study",
        "s",
        "--variant-by",
        "loss_type",
        "--seed-by",
        "param:seed",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "--variant-by expects param:NAME or tag:NAME", dst=dst)
    proc = workbench(
        "import",
        "trl",
        "--from",
        source_store,
        "--experiment",
        "trl-grpo",
        "--study",
        "s",
        "--variant-by",
        "param:seed",
        "--seed-by",
        "param:loss_type",
        "--tracking-uri",
        sqlite_uri(dst),
        cwd=tmp_path,
    )
    _assert_refused(proc, "seed 'grpo' is not an integer", dst=dst)


def test_study_name_taken_by_a_foreign_experiment(source_store, tmp_path):
    """Importing into the source's own experiment would mix foreign runs into a study: refused."""
    from mlflow import MlflowClient

    before = len(
        MlflowClient(source_store).search_runs(
            [MlflowClient(source_store).get_experiment_by_name("trl-grpo").experiment_id]
        )
    )
    proc = workbench(
        "import",
        "trl",
        "--from",
        source_store,
        "--experiment",
        "trl-grpo",
        "--study",
        "trl-grpo",
        "--variant-by",
        "param:loss_type",
        "--seed-by",
        "param:seed",
        "--tracking-uri",
        source_store,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "is not a workbench study" in proc.stderr
    after = len(
        MlflowClient(source_store).search_runs(
            [MlflowClient(source_store).get_experiment_by_name("trl-grpo").experiment_id]
        )
    )
    assert after == before
