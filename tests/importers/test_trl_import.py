"""Acceptance: real TRL GRPOTrainer runs (report_to mlflow) -> workbench import -> health, compare.

Needs TRL, which lives in its own venv (``make trl`` builds ``.venv-trl``; ``make test`` runs this
file there). Without TRL the test is skipped; ``WORKBENCH_REQUIRE_TRL=1`` makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MICRO_MODEL
from tests.trl_support import require_trl

from .helpers import child_runs, import_args, sqlite_uri, workbench

require_trl("docs/import.md")

pytestmark = pytest.mark.slow

CANONICAL_EVERY_STEP = ("entropy/mean", "length/mean", "clip/frac_low", "reward/mean", "grad/norm")
LOSS_TYPES = ("grpo", "dr_grpo")
SEEDS = (0, 1)
STEPS = 3


@pytest.fixture(scope="module")
def trl_store(tmp_path_factory):
    """Four real GRPOTrainer runs (2 loss types x 2 seeds) logged by TRL into one MLflow store."""
    from workbench.config import ModelConfig, TaskConfig
    from workbench.models.tiny import tiny_model_dir

    root = tmp_path_factory.mktemp("trl")
    model = tiny_model_dir(ModelConfig(**MICRO_MODEL), TaskConfig(), progress=False)
    uri = sqlite_uri(root / "trl.db")
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("trl_train.py")),
        str(model),
        "--uri",
        uri,
        "--experiment",
        "trl-grpo",
        "--steps",
        str(STEPS),
        "--out",
        str(root / "out"),
    ]
    for lt in LOSS_TYPES:
        cmd += ["--loss-type", lt]
    for s in SEEDS:
        cmd += ["--seed", str(s)]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, uri


def store_options(src: str) -> dict[str, str]:
    """The store options of an import of the four runs trl_store logged: one variant per loss type, seeds by param."""
    return {"from_": src, "experiment": "trl-grpo", "variant_by": "param:loss_type", "seed_by": "param:seed"}


def test_trl_runs_import_then_health_and_compare(trl_store, tmp_path):
    root, src = trl_store
    dst = sqlite_uri(tmp_path / "mlflow.db")
    args = import_args("trl", study="trl-loss-types", dst=dst, **store_options(src))
    first = workbench(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    runs = child_runs(dst, "trl-loss-types")
    assert len(runs) == len(LOSS_TYPES) * len(SEEDS)
    again = workbench(*args, cwd=tmp_path)  # the same source again: nothing new
    assert again.returncode == 0, again.stderr
    assert "0 imported, 4 already there" in again.stdout
    assert len(child_runs(dst, "trl-loss-types")) == 4

    from mlflow import MlflowClient

    source_ids = {
        r.info.run_id
        for r in MlflowClient(src).search_runs([MlflowClient(src).get_experiment_by_name("trl-grpo").experiment_id])
    }
    client = MlflowClient(dst)
    assert {(r.data.tags["workbench.variant"], r.data.tags["workbench.seed"]) for r in runs} == {
        (lt, str(s)) for lt in LOSS_TYPES for s in SEEDS
    }
    for r in runs:
        assert r.data.tags["workbench.source"] == "trl"
        assert r.data.tags["workbench.source_run"] in source_ids
        assert r.data.params["source.loss_type"] == r.data.tags["workbench.variant"]
        for metric in CANONICAL_EVERY_STEP:
            steps = sorted(m.step for m in client.get_metric_history(r.info.run_id, metric))
            assert steps == list(range(1, STEPS + 1)), (metric, r.info.run_name, steps)
        kept = set(r.data.metrics)
        assert "source/clip_ratio/low_min" in kept and "source/learning_rate" in kept  # unmapped: kept
        assert "clip_ratio/low_mean" not in kept  # mapped names are not logged twice

    health = workbench("health", "trl-loss-types", "--recheck", "--format", "json", "--tracking-uri", dst, cwd=tmp_path)
    assert health.returncode == 0, health.stderr
    report = json.loads(health.stdout)
    assert len(report["runs"]) == 4
    for run in report["runs"]:
        # beta = 0: TRL logs no kl, so the KL rule says what it lacks instead of passing
        assert run["rules"]["kl_explosion"] == {
            "state": "unknown",
            "step": None,
            "value": None,
            "threshold": None,
            "message": "not evaluated: needs kl/ref",
        }
        assert run["rules"]["no_learning_signal"]["state"] in ("ok", "warn")  # frac_reward_zero_std mapped

    compare = workbench(
        "compare", "trl-loss-types", "--format", "json", "--no-log", "--tracking-uri", dst, cwd=tmp_path
    )
    assert compare.returncode == 0, compare.stderr
    table = json.loads(compare.stdout)
    rows = table["rows"]
    assert {row["variant"] for row in rows} == set(LOSS_TYPES)
    assert {row["metric"] for row in rows} == {"final:reward/mean", "final:length/mean", "final:entropy/mean"}


def test_trl_trainer_state_file_gives_the_same_canonical_series(trl_store, tmp_path):
    """The same run imported from MLflow and from its trainer_state.json: identical canonical curves."""
    root, src = trl_store
    dst = sqlite_uri(tmp_path / "mlflow.db")
    state = root / "out" / "grpo-0" / "trainer_state.json"
    from_file = workbench(
        *import_args("trl", state, study="from-file", dst=dst, variant="grpo", seeds=(0,)), cwd=tmp_path
    )
    assert from_file.returncode == 0, from_file.stderr
    from_store = workbench(*import_args("trl", study="from-store", dst=dst, **store_options(src)), cwd=tmp_path)
    assert from_store.returncode == 0, from_store.stderr
    from mlflow import MlflowClient

    client = MlflowClient(dst)
    (file_run,) = child_runs(dst, "from-file")
    (store_run,) = [r for r in child_runs(dst, "from-store") if r.info.run_name == "grpo/seed=0"]
    assert file_run.data.tags["workbench.source_file"] == str(state.resolve())
    for metric in CANONICAL_EVERY_STEP:
        a = [
            (m.step, m.value)
            for m in sorted(client.get_metric_history(file_run.info.run_id, metric), key=lambda m: m.step)
        ]
        b = [
            (m.step, m.value)
            for m in sorted(client.get_metric_history(store_run.info.run_id, metric), key=lambda m: m.step)
        ]
        # Both hold the same Python float (TRL's log dict), once via MLflow's REAL column and once via
        # JSON's shortest repr; both round-trip a float64 exactly, so the curves must be equal.
        assert a == b, metric


def test_trl_logged_completions_are_the_imported_runs_rollouts(trl_store, tmp_path):
    """GRPOTrainer(log_completions=True) wrote OUTPUT_DIR/completions/completions_NNNNN.parquet; importing the
    trainer_state.json beside it keeps every completion, and their rewards give the reward TRL logged."""
    root, _ = trl_store
    dst = sqlite_uri(tmp_path / "mlflow.db")
    state = root / "out" / "grpo-0" / "trainer_state.json"
    done = workbench(
        *import_args("trl", state, study="trl-rollouts", dst=dst, variant="grpo", seeds=(0,)), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    per_step = 8  # per_device_train_batch_size (completions) x steps_per_generation 1: the generation batch
    assert f"kept {STEPS * per_step} train and 0 eval completions from {STEPS} file(s)" in done.stdout
    from workbench.analysis.rollouts import query_rollouts

    rows = query_rollouts("trl-rollouts", tracking_uri=dst)
    assert sorted(rows.step.unique()) == list(range(1, STEPS + 1)) and len(rows) == STEPS * per_step
    assert (rows.groupby(["step", "group"]).size() == 4).all()  # num_generations completions per prompt
    assert rows.prompt.str.fullmatch(r"\d\d\+\d\d=").all()  # the dataset's prompts, as fed
    logged = {e["step"]: e["reward"] for e in json.loads(state.read_text())["log_history"] if "reward" in e}
    for step, group in rows.groupby("step"):
        # TRL logs reward = nanmean of the weighted rewards of that step's generation batch (weight 1 here),
        # summed in float32: 8 values <= 1, error <= 7 x 2^-24 x 8 / 8 ~ 4.2e-7 (the stored float32 rewards are
        # TRL's own float32 values, exactly; the mean here is float64)
        assert group.reward.mean() == pytest.approx(logged[step], abs=5e-7), step
        # scale_rewards="group": (r - group mean) / (group std + 1e-4), so a group's advantages sum to ~0
        # (float32 storage of 4 values <= ~1.5 in magnitude: 4 x 2^-24 x 1.5 < 1e-6)
        assert (group.groupby("group").advantage.sum().abs() < 1e-6).all(), step
