"""A study under the DeepSpeed launcher with 2 real processes (ZeRO-2): rank 0 drives, rank 1 follows.

The real ``deepspeed`` launcher starts ``workbench run`` twice on this CPU (``DS_ACCELERATOR=cpu``,
gloo + DeepSpeed's shared-memory all-reduce); a single-process ``workbench run`` of the same study is the
reference. Both ranks update on identical data, so the averaged gradient is the single process's gradient
and every step must agree with it.
"""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("deepspeed")

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.execution_helpers import fast_run_config
from tests.tolerance import order_tolerance
from workbench.config import deep_merge
from workbench.train.deepspeed_learner import free_port

STEPS = 3
# Learner-side metrics: each is a function of the weights at that step (entropy, mismatch) or of the update.
LEARNER_METRICS = ["loss/policy", "grad/norm", "entropy/mean", "mismatch/kl", "clip/frac"]
CANONICAL = LEARNER_METRICS + ["reward/mean", "accuracy/train", "length/mean", "perf/step_s", "health/status"]
# Allowed: float32 summation order (all-reduce buckets), by error analysis (tests/tolerance.py). The micro
# model's learner metrics are sums over its 16 sequences × ≤ 14 positions (224) at the end of a reduction
# depth of 2·32 + 64 + vocabulary (< 40) ≈ 170 sums: ≤ 400 operands × eps32 × |value|, relative.
METRIC_OPERANDS = 400


def write_study(directory: Path) -> Path:
    directory.mkdir()
    base = deep_merge(fast_run_config(steps=STEPS), {"learner": {"backend": "deepspeed", "zero_stage": 2}})
    study = {"name": "ds-ranks", "base": base, "variants": {"base": {}}, "seeds": [0]}
    path = directory / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def clean_env() -> dict[str, str]:
    """This process's env without the single-process distributed variables the engines conftest sets."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MLFLOW_TRACKING_URI")
    }
    return env | {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}


def workbench_run(directory: Path, ranks: int) -> subprocess.CompletedProcess:
    workbench = shutil.which("workbench", path=str(Path(sys.executable).parent))
    command = [workbench, "run", "study.yaml", "--quiet"]
    if ranks > 1:
        launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent))
        command = [launcher, "--num_gpus", str(ranks), "--master_port", str(free_port()), "--no_local_rank", *command]
    return subprocess.run(
        command, cwd=directory, env=clean_env(), capture_output=True, text=True, timeout=240, check=False
    )


def run_metrics(directory: Path) -> tuple[list, dict[str, dict[int, float]]]:
    """(the study's child runs, metric -> step -> value of the only one)."""
    client = MlflowClient(f"sqlite:///{directory / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ds-ranks")
    runs = client.search_runs([experiment.experiment_id], "tags.`workbench.role` = 'run'")
    history = (
        {
            key: {m.step: m.value for m in client.get_metric_history(runs[0].info.run_id, key)}
            for key in CANONICAL + ["eval/accuracy"]
        }
        if runs
        else {}
    )
    return runs, history


def test_two_deepspeed_ranks_run_one_study_like_one_process(tmp_path):
    """Exit 0 on both ranks, one FINISHED MLflow run (rank 1 opens none) with the canonical metrics, and
    every step's learner metrics equal to the single-process ZeRO-2 run's: step k's entropy and
    mismatch are computed on the weights after k updates, so equal values mean equal weights."""
    multi, single = write_study(tmp_path / "multi"), write_study(tmp_path / "single")
    start = time.perf_counter()
    launched = workbench_run(multi.parent, ranks=2)
    multi_s = time.perf_counter() - start
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    # The launcher reports each rank's exit: both ranks exited 0.
    assert launched.stdout.count("exits successfully") + launched.stderr.count("exits successfully") == 2
    start = time.perf_counter()
    reference = workbench_run(single.parent, ranks=1)
    single_s = time.perf_counter() - start
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]

    runs, got = run_metrics(multi.parent)
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert runs[0].data.params["learner.zero_stage"] == "2"
    for key in CANONICAL:
        assert set(range(STEPS)) <= set(got[key]), key
    _, want = run_metrics(single.parent)
    worst = max(abs(got[key][step] - want[key][step]) for key in LEARNER_METRICS for step in range(STEPS))
    print(f"2 ranks {multi_s:.1f}s, 1 process {single_s:.1f}s; max |Δ| learner metrics {worst:.2e}")
    for key in LEARNER_METRICS:
        for step in range(STEPS):
            tol = order_tolerance(METRIC_OPERANDS, max(abs(want[key][step]), 1.0))
            assert abs(got[key][step] - want[key][step]) <= tol, (key, step)
    assert got["eval/accuracy"] == want["eval/accuracy"]  # greedy eval on the final weights


def test_preflight_refuses_what_several_ranks_cannot_mirror(monkeypatch):
    """ZeRO-3 (every forward collective) and the torch learner fail at preflight on several ranks, not mid-run."""
    from workbench.config import RunConfig
    from workbench.execution.run import preflight

    monkeypatch.setenv("WORLD_SIZE", "2")
    for learner, reason in [
        ({"backend": "deepspeed", "zero_stage": 3}, "zero_stage=3 with WORLD_SIZE=2"),
        ({"backend": "torch"}, "backend=torch with WORLD_SIZE=2"),
    ]:
        cfg = RunConfig.model_validate(deep_merge(fast_run_config(steps=1), {"learner": learner}))
        with pytest.raises(ValueError, match=reason):
            preflight(cfg)
    monkeypatch.setenv("WORLD_SIZE", "1")
    preflight(
        RunConfig.model_validate(
            deep_merge(fast_run_config(steps=1), {"learner": {"zero_stage": 3, "backend": "deepspeed"}})
        )
    )
