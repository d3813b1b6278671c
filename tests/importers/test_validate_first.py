"""An import checks everything it will write before its first write (issue #53, "write, then fail"): the saved
views it publishes afterwards, the parameters and tags of every run. A refusal leaves the store row for row as
it was (no parent run left behind), and the same import succeeds once its input is fixed."""

from __future__ import annotations

import json

import pytest

from .helpers import child_runs, sqlite_uri
from .test_atomic_import import invoke as invoke_verl
from .test_atomic_import import log_lines, store_rows
from .test_hardening import invoke
from .trackers_files import verl_history, wandb_log

pytestmark = pytest.mark.slow  # each test writes a fresh MLflow store (~5 s on a loaded machine)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store that already holds one imported study."""
    root = tmp_path_factory.mktemp("store")
    good = root / "good.jsonl"
    good.write_text("\n".join(log_lines()) + "\n")
    db = root / "mlflow.db"
    assert (
        invoke_verl(
            str(good), "--study", "verl-a", "--variant", "grpo", "--seed", "0", "--tracking-uri", sqlite_uri(db)
        ).exit_code
        == 0
    )
    return db


def refused(result, db, before, *phrases):
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "internal error" not in lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert store_rows(db) == before


def test_a_log_too_wide_for_the_saved_views_is_refused_before_any_run_is_written(store, tmp_path):
    """Each saved view lists the study's metrics it does not chart: 1,600 of them overflow MLflow's 20,000
    characters. The old import wrote its runs, then failed on the view, and every retry failed the same way."""
    wide = tmp_path / "wide.jsonl"
    wide.write_text(
        "".join(
            json.dumps(
                {"step": s, "data": {**{f"extra/m{i:04d}": 0.1 * s for i in range(1600)}, "critic/score/mean": 0.5}}
            )
            + "\n"
            for s in (1, 2, 3)
        )
    )
    before = store_rows(store)
    args = ["--study", "verl-wide", "--variant", "grpo", "--seed", "0", "--tracking-uri", sqlite_uri(store)]
    refused(
        invoke_verl(str(wide), *args),
        store,
        before,
        "saved view",
        "MLflow's limit is 20000",
        "1,601 metrics this import logs",
        "nothing written",
    )
    narrow = tmp_path / "narrow.jsonl"  # the input fixed: the same study imports
    narrow.write_text("\n".join(log_lines()) + "\n")
    done = invoke_verl(str(narrow), *args)
    assert done.exit_code == 0, done.output
    assert len(child_runs(sqlite_uri(store), "verl-wide")) == 1


@pytest.mark.parametrize(
    ("study", "config", "phrase"),
    [
        ("wb-chars", {"lr[0]!": "1e-6"}, "parameter name 'source.lr[0]!' is not one MLflow accepts"),
        ("wb-dots", {"a/../b": "1"}, "parameter name 'source.a/../b' is not one MLflow accepts"),
        ("wb-long-key", {"k" * 300: "1"}, "longer than MLflow's 250"),
        ("wb-long-value", {"prompt": json.dumps("x" * 7000)}, "parameter 'source.prompt': a value of 7,000 characters"),
    ],
)
def test_a_wandb_config_mlflow_would_refuse_leaves_no_parent_run_behind(store, tmp_path, study, config, phrase):
    log = wandb_log(tmp_path / "offline-run-1", verl_history(range(1, 6)), config=config)
    before = store_rows(store)
    args = [
        "wandb",
        log.parent,
        "--study",
        study,
        "--variant",
        "v",
        "--seed",
        "0",
        "--framework",
        "verl",
        "--tracking-uri",
        sqlite_uri(store),
    ]
    refused(invoke(*args), store, before, f"{log.parent}: ", phrase, "(v/seed=0; nothing written)")
    fixed = wandb_log(tmp_path / "offline-run-2", verl_history(range(1, 6)), config={"lr": "1e-6"})
    done = invoke("wandb", fixed.parent, *args[2:])
    assert done.exit_code == 0, done.output
    (run,) = child_runs(sqlite_uri(store), study)
    assert run.data.params == {"source.lr": "1e-06"}
    from mlflow import MlflowClient

    client = MlflowClient(sqlite_uri(store))
    runs = client.search_runs([client.get_experiment_by_name(study).experiment_id])
    assert sorted(r.data.tags["workbench.role"] for r in runs) == ["run", "study"]  # one parent, one run
