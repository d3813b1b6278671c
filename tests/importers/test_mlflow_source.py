"""Reading runs from a real MLflow store: tag: selectors, growing experiments, running runs."""

from __future__ import annotations

import pytest

from workbench.importers import ADAPTERS, runs_from_mlflow, write_study

from .helpers import child_runs, sqlite_uri


def _log_run(client, exp: str, variant: str, seed: int, status: str = "FINISHED") -> str:
    run = client.create_run(exp, run_name=f"{variant}-{seed}", tags={"variant": variant})
    client.log_param(run.info.run_id, "seed", str(seed))
    for step in (1, 2, 3):
        client.log_metric(run.info.run_id, "entropy", 2.0 - 0.1 * step, step=step)
        client.log_metric(run.info.run_id, "clip_ratio/low_mean", 0.01 * step, step=step)
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_tag_selector_growing_experiment_and_running_runs(tmp_path):
    from mlflow import MlflowClient

    src, dst = sqlite_uri(tmp_path / "src.db"), sqlite_uri(tmp_path / "dst.db")
    client = MlflowClient(src)
    exp = client.create_experiment("grpo", artifact_location=(tmp_path / "art").as_uri())
    _log_run(client, exp, "a", 0)
    _log_run(client, exp, "b", 0)
    running = _log_run(client, exp, "a", 1, status="RUNNING")
    trl = ADAPTERS.get("trl")

    first = write_study(trl, runs_from_mlflow(trl, src, "grpo", "tag:variant", "param:seed"), dst, "s", source_note={})
    assert sorted(label for label, _ in first.imported) == ["a/seed=0", "b/seed=0"]
    assert first.not_finished == ["a/seed=1 (RUNNING)"]  # said, and left for a later import

    client.set_terminated(running, "FINISHED")  # the experiment grows: one run finished, one new
    _log_run(client, exp, "b", 1)
    second = write_study(trl, runs_from_mlflow(trl, src, "grpo", "tag:variant", "param:seed"), dst, "s", source_note={})
    assert sorted(label for label, _ in second.imported) == ["a/seed=1", "b/seed=1"]
    assert len(second.skipped) == 2 and second.parent_run_id == first.parent_run_id

    runs = child_runs(dst, "s")
    assert len(runs) == 4  # no duplicates
    history = MlflowClient(dst).get_metric_history(runs[0].info.run_id, "clip/frac_low")
    # as logged (0.01 * step, a float64 that MLflow's sqlite store keeps exactly): renamed, not converted
    assert sorted((m.step, m.value) for m in history) == [(s, 0.01 * s) for s in (1, 2, 3)]


def test_own_runs_are_never_reimported(tmp_path):
    """A store that holds an imported study: its workbench runs are not foreign runs to import."""
    from mlflow import MlflowClient

    from workbench.importers import ImportSourceError

    uri = sqlite_uri(tmp_path / "m.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("mixed", artifact_location=(tmp_path / "art").as_uri())
    client.create_run(exp, tags={"workbench.role": "run"})
    with pytest.raises(ImportSourceError, match="has no runs to import"):
        runs_from_mlflow(ADAPTERS.get("trl"), uri, "mixed", "tag:variant", "param:seed")
