"""``engine: trl`` under the study modes native runs have (runs in .venv-trl): ``--parallel``, ``--until-decided``,
``tune`` and the Ray executor. Each: its runs FINISHED exactly once by run key, and running it again runs nothing.

Kept small for CI: 2 RL steps of the acceptance test's model, one study invocation covering ``--parallel 2`` and
the sequential looks together (the look adds a seed to each variant; those runs go two at a time)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.importers.helpers import child_runs, sqlite_uri, workbench
from tests.ray_cluster import ray_cluster  # noqa: F401 - a fixture
from tests.trl_engine.test_trl_engine import BASE, write_study  # skips this module too where TRL is not installed
from tests.trl_support import require_trl

require_trl("docs/trl-engine.md")

pytestmark = pytest.mark.slow

STEPS = 2
ROLLOUT = {"prompts_per_step": 4, "group_size": 4, "steps": STEPS, "eval_every": 2, "log_samples": 2}


def finished_once(runs, role: str = "run") -> dict[str, str]:
    """Run key -> run id, after checking every run is a FINISHED ``engine: trl`` run and no run key repeats."""
    keys = Counter(r.data.tags["workbench.run_key"] for r in runs)
    assert all(n == 1 for n in keys.values()), keys
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["workbench.engine"] == "trl", run.data.tags
        assert run.data.tags["workbench.role"] == role
    return {r.data.tags["workbench.run_key"]: r.info.run_id for r in runs}


def test_parallel_runs_and_sequential_looks_run_each_trl_run_once(tmp_path):
    uri = sqlite_uri(tmp_path / "mlflow.db")
    study = write_study(
        tmp_path / "seq.yaml",
        {
            "name": "trl-seq",
            "base": BASE | {"rollout": ROLLOUT, "tracking": {"uri": uri}},
            "variants": {"grpo": {"algorithm": {"preset": "grpo"}}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
            "seeds": [0],
            "compare": {"baseline": "grpo", "sequential": {"looks": [2]}},
        },
    )
    args = ("run", str(study), "--until-decided", "--max-seeds", "2", "--parallel", "2", "--quiet")
    first = workbench(*args, cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "look 1 of 1: 2 seeds" in first.stdout + first.stderr
    runs = child_runs(uri, "trl-seq")
    # the declared seed 0, then seed 1 added by the look, for each variant: 4 runs, each once
    assert sorted((r.data.tags["workbench.variant"], r.data.tags["workbench.seed"]) for r in runs) == [
        ("dr_grpo", "0"),
        ("dr_grpo", "1"),
        ("grpo", "0"),
        ("grpo", "1"),
    ]
    by_key = finished_once(runs)
    # two at a time: the runs overlap in time (each its own process), not one after the other
    spans = sorted((r.info.start_time, r.info.end_time) for r in runs)
    assert any(later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:], strict=False))

    again = workbench(*args, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("SKIPPED") == 4, again.stdout
    assert finished_once(child_runs(uri, "trl-seq")) == by_key  # nothing ran again


def test_tune_runs_each_trl_trial_once_and_a_second_tune_runs_none(tmp_path):
    uri = sqlite_uri(tmp_path / "mlflow.db")
    study = write_study(
        tmp_path / "tune.yaml",
        {
            "name": "trl-tune",
            "base": BASE | {"rollout": ROLLOUT | {"eval_every": 1}, "tracking": {"uri": uri}},
            "search": {
                "metric": "eval/accuracy",
                "params": {"learner.lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}},
                "sampler": {"name": "random", "seed": 0},
                "pruner": "none",
                "n_trials": 2,
                "seeds": [0],
            },
        },
    )
    journal = tmp_path / "journal.log"
    first = workbench("tune", str(study), "--storage", str(journal), cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2/2 trials done" in first.stdout, first.stdout
    runs = child_runs_of_role(uri, "trl-tune", "trial")
    assert sorted(r.data.tags["workbench.trial"] for r in runs) == ["0", "1"]
    by_key = finished_once(runs, role="trial")
    for run in runs:  # the objective Optuna saw is the TRL run's own eval
        assert {"eval/accuracy", "reward/mean", "loss/policy"} <= set(run.data.metrics)

    again = workbench("tune", str(study), "--storage", str(journal), cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2/2 trials done" in again.stdout and "started:" not in again.stdout, again.stdout
    assert finished_once(child_runs_of_role(uri, "trl-tune", "trial"), role="trial") == by_key


def test_the_ray_executor_runs_each_trl_run_once(ray_cluster, tmp_path):  # noqa: F811 - the fixture
    uri = sqlite_uri(tmp_path / "mlflow.db")
    study = write_study(
        tmp_path / "ray.yaml",
        {
            "name": "trl-ray",
            "base": BASE | {"rollout": ROLLOUT, "tracking": {"uri": uri}},
            "variants": {"grpo": {"algorithm": {"preset": "grpo"}}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
            "seeds": [0],
        },
    )
    args = ("run", str(study), "--executor", "ray", "--address", ray_cluster.address, "--quiet")
    first = workbench(*args, cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = child_runs(uri, "trl-ray")
    assert sorted(r.data.tags["workbench.variant"] for r in runs) == ["dr_grpo", "grpo"]
    by_key = finished_once(runs)
    assert all(r.data.tags.get("workbench.ray_node") for r in runs)  # each ran as a Ray task on a node

    again = workbench(*args, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("SKIPPED") == 2, again.stdout
    assert finished_once(child_runs(uri, "trl-ray")) == by_key


def child_runs_of_role(uri: str, study: str, role: str):
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    assert exp is not None, f"no experiment {study!r} in {uri}"
    return client.search_runs([exp.experiment_id], f"tags.`workbench.role` = '{role}'", max_results=1000)
