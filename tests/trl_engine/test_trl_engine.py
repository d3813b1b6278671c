"""Acceptance of ``engine: trl`` (runs in .venv-trl): real GRPOTrainer runs as a workbench study, their health
rules stopping a collapse through the callback, and WorkbenchCallback in a plain TRL script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import MICRO_MODEL
from tests.importers.helpers import child_runs, sqlite_uri, workbench
from tests.trl_support import require_trl

require_trl("docs/trl-engine.md")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
# tests/test_e2e_health.py's model: 1-digit sums, trained just enough (~0.8 held-out) that groups disagree and
# updates are real (the micro model earns no reward, so its gradients are all zero)
SMALL_MODEL = {
    "builtin": "tiny",
    "tiny": {
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "intermediate_size": 128,
        "sft_max_steps": 150,
        "sft_target_accuracy": 1.0,
        "sft_check_every": 1000,
    },
}
BASE = {
    "engine": "trl",
    "model": SMALL_MODEL,
    "task": {"digits": 1, "ops": "+", "eval_size": 10},
    "sampler": {"max_new_tokens": 10},
    "learner": {"device": "cpu"},
}
STEPS = 3
# TRL measures these at every step (the adapter's names), the verifier reward the last three, the monitor health/status
EVERY_STEP = (
    "reward/mean",
    "reward/std",
    "entropy/mean",
    "length/mean",
    "length/max",
    "length/truncated_frac",
    "loss/policy",
    "grad/norm",
    "clip/frac_low",
    "clip/frac_high",
    "batch/zero_std_frac",
    "perf/step_s",
    "accuracy/train",
    "batch/all_correct_frac",
    "batch/all_wrong_frac",
    "health/status",
)


def write_study(path: Path, study: dict) -> Path:
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def history(client, run_id: str, name: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, name)}


def test_a_two_variant_two_seed_trl_study_runs_is_judged_and_skips_when_run_again(tmp_path):
    from mlflow import MlflowClient

    uri = sqlite_uri(tmp_path / "mlflow.db")
    study = write_study(
        tmp_path / "trl.yaml",
        {
            "name": "trl-tiny",
            "base": BASE
            | {
                "rollout": {"prompts_per_step": 4, "group_size": 4, "steps": STEPS, "eval_every": 2, "log_samples": 4},
                "tracking": {"uri": uri},
            },
            "variants": {"grpo": {"algorithm": {"preset": "grpo"}}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
            "seeds": [0, 1],
        },
    )
    first = workbench("run", str(study), "--quiet", cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = child_runs(uri, "trl-tiny")
    assert sorted((r.data.tags["workbench.variant"], r.data.tags["workbench.seed"], r.info.status) for r in runs) == [
        ("dr_grpo", "0", "FINISHED"),
        ("dr_grpo", "1", "FINISHED"),
        ("grpo", "0", "FINISHED"),
        ("grpo", "1", "FINISHED"),
    ]
    client = MlflowClient(uri)
    for run in runs:
        tags, rid = run.data.tags, run.info.run_id
        assert tags["workbench.engine"] == "trl" and run.data.params["engine"] == "trl"
        assert tags["workbench.stopped_early"] == "false"
        for name in EVERY_STEP:
            assert sorted(history(client, rid, name)) == list(range(STEPS)) + (
                [STEPS] if name == "health/status" else []
            ), name
        # evals as a native run's: step 0, every eval_every, and after the last step
        assert sorted(history(client, rid, "eval/accuracy")) == [0, 2, 3]
        unavailable = set(tags["workbench.unavailable_metrics"].split(","))
        assert {"policy/approx_kl", "kl/ref", "mismatch/kl", "perf/learn_s"} <= unavailable
        assert not unavailable & set(run.data.metrics), "an unavailable metric was logged"
        assert all(0.0 <= v <= 1.0 for v in history(client, rid, "accuracy/train").values())
    # dr_grpo's loss is a token sum over batch x max_completion_length, grpo's a per-sequence mean: both real
    grads = [v for r in runs for v in history(client, r.info.run_id, "grad/norm").values()]
    assert any(g > 0 for g in grads), "no run had a gradient: the test model earns no reward"

    check_stored_rollouts(client, uri, "trl-tiny", runs, prompts=4, group=4, eval_size=10)
    shown = workbench(
        "rollouts", "trl-tiny", "--tracking-uri", uri, "--split", "train", "--format", "csv", cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert len(shown.stdout.strip().splitlines()) == 1 + len(runs) * STEPS * 4 * 4  # header + every completion

    health = workbench("health", str(study), cwd=tmp_path)
    assert health.returncode == 0, health.stderr[-2000:]
    assert "grpo" in health.stdout and "dr_grpo" in health.stdout
    compare = workbench("compare", str(study), "--no-log", cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr[-2000:]
    assert "final_eval_accuracy" in compare.stdout

    again = workbench("run", str(study), "--quiet", cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {r.info.run_id for r in child_runs(uri, "trl-tiny")} == {r.info.run_id for r in runs}  # nothing re-ran


def check_stored_rollouts(client, uri: str, study: str, runs, *, prompts: int, group: int, eval_size: int) -> None:
    """Each run's stored completions (``workbench rollouts``' query) against what TRL logged for the same steps:
    every train step's prompts x group completions, their mean reward, length and truncation equal to TRL's
    reward/mean, length/mean and length/truncated_frac, each group's advantages centred as TRL's estimator
    makes them, and the workbench eval's completions at its eval steps."""
    import numpy as np

    from workbench.analysis.rollouts import query_rollouts

    rows = query_rollouts(study, tracking_uri=uri)
    eps32 = float(np.finfo(np.float32).eps)
    n = prompts * group
    for run in runs:
        rid = run.info.run_id
        assert run.data.tags["workbench.rollouts"] == "all"
        mine = rows[rows["run_id"] == rid]
        train = mine[mine["split"] == "train"]
        logged_reward = history(client, rid, "reward/mean")
        assert sorted(set(train["step"])) == sorted(logged_reward)
        for step, reward in logged_reward.items():
            batch = train[train["step"] == step]
            assert len(batch) == n and sorted(set(batch["group"])) == list(range(prompts))
            # TRL's reward/mean is a float32 nanmean of n rewards in [0, 1]; ours a float64 mean of the same
            # float32 values: they differ by at most the float32 summation's n x eps x max|reward|
            tol = n * eps32 * 1.0
            assert batch["reward"].mean() == pytest.approx(reward, abs=tol), (rid, step)
            assert set(batch["reward"]) <= {0.0, 1.0} and list(batch["correct"]) == list(batch["reward"] == 1.0)
            # lengths are integers: TRL's float32 mean of n of them (<= max_new_tokens = 10) is exact to n x eps x 10
            assert batch["length"].mean() == pytest.approx(
                history(client, rid, "length/mean")[step], abs=n * eps32 * 10
            )
            truncated = history(client, rid, "length/truncated_frac")[step]
            assert batch["truncated"].mean() == pytest.approx(truncated, abs=n * eps32)
            # TRL's advantage (r - group mean) / (std + 1e-4) (or unscaled) sums to 0 within a group; each is at
            # most sqrt(group - 1) < group in size, so float32 rounding leaves at most group x eps x group
            sums = batch.groupby("group")["advantage"].sum()
            assert np.all(np.isfinite(batch["advantage"])) and np.allclose(sums, 0.0, atol=group * eps32 * group)
            right = batch[batch["reward"] == 1.0]
            assert (right["advantage"] >= 0).all()  # a correct answer is never pushed down
        evals = mine[mine["split"] == "eval"]
        assert sorted(set(evals["step"])) == sorted(history(client, rid, "eval/accuracy"))
        for step, accuracy in history(client, rid, "eval/accuracy").items():
            batch = evals[evals["step"] == step]
            assert len(batch) == eval_size and batch["correct"].mean() == pytest.approx(accuracy, abs=eval_size * eps32)


def test_a_planted_collapse_stops_the_trl_run_at_the_step_its_rules_say(tmp_path):
    """lr 0.05 (500x the default) destroys the policy within a few steps (tests/test_e2e_health.py's native
    case). reward_collapse, given severity fail, must stop the TRL run through the callback exactly where the
    same rule, evaluated afresh on the run's own logged stream, first says stop."""
    from mlflow import MlflowClient

    from workbench.health import HealthMonitor

    steps = 12
    health = {
        "preset": "default",
        "rules": {
            "reward_collapse": {"window": 1, "patience": 2, "noise_z": 0.0, "noise_window": 6, "severity": "fail"}
        },
    }
    uri = sqlite_uri(tmp_path / "mlflow.db")
    study = write_study(
        tmp_path / "collapse.yaml",
        {
            "name": "trl-collapse",
            "base": BASE
            | {
                "learner": {"device": "cpu", "lr": 0.05},
                "health": health,
                "tracking": {"uri": uri},
                "rollout": {
                    "prompts_per_step": 8,
                    "group_size": 4,
                    "steps": steps,
                    "eval_every": 100,
                    "log_samples": 4,
                },
            },
            "variants": {"lr": {}},
            "seeds": [0],
        },
    )
    result = workbench("run", str(study), "--quiet", cwd=tmp_path, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = child_runs(uri, "trl-collapse")
    client = MlflowClient(uri)
    logged: dict[int, dict[str, float]] = {}
    for name in run.data.metrics:
        if name != "health/status":
            for step, value in history(client, run.info.run_id, name).items():
                logged.setdefault(step, {})[name] = value
    monitor = HealthMonitor.from_config(health)
    stop = None
    for step, metrics in sorted(logged.items()):
        monitor.observe(step, metrics)
        if monitor.should_stop:
            stop = step
            break
    assert stop is not None, "the rule never says stop on the logged stream"
    trained = sorted(history(client, run.info.run_id, "loss/policy"))
    assert trained[-1] == stop < steps - 1  # TRL stopped after that step, well before the last
    assert run.info.status == "FINISHED" and run.data.tags["workbench.stopped_early"] == "true"
    assert run.data.tags["workbench.health"] == "fail"
    assert run.data.tags["workbench.stop_reason"] == f"health: {monitor.reasons}"
    assert f"reward_collapse@{stop}" in run.data.tags["workbench.stop_reason"]
    assert history(client, run.info.run_id, "health/status")[stop] == 2.0  # fail
    assert sorted(history(client, run.info.run_id, "eval/accuracy")) == [0]  # stopped: no final eval, as native


def test_workbench_callback_in_a_plain_trl_script(tmp_path):
    """docs/trl_callback_example.py as a user runs it: two variants into one study, then health and compare."""
    from mlflow import MlflowClient

    from workbench.config import ModelConfig, TaskConfig
    from workbench.models.tiny import tiny_model_dir

    model = tiny_model_dir(ModelConfig(**MICRO_MODEL), TaskConfig(), progress=False)
    uri = sqlite_uri(tmp_path / "mlflow.db")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    for variant in ("dapo", "grpo"):
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "docs" / "trl_callback_example.py"),
                str(model),
                "--study",
                "mine",
                "--variant",
                variant,
                "--steps",
                "2",
                "--out",
                str(tmp_path / variant),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    runs = child_runs(uri, "mine")
    assert sorted(r.data.tags["workbench.variant"] for r in runs) == ["dapo", "grpo"]
    client = MlflowClient(uri)
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["workbench.engine"] == "trl"
        assert run.data.params["trl.loss_type"] == run.data.tags["workbench.variant"]
        for name in ("reward/mean", "entropy/mean", "length/mean", "grad/norm", "health/status"):
            assert sorted(history(client, run.info.run_id, name)) == [0, 1], name
    assert len({r.data.tags["workbench.run_key"] for r in runs}) == 2
    for command in (["health", "mine"], ["compare", "mine", "--no-log"]):
        out = workbench(*command, "--tracking-uri", uri, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "dapo" in out.stdout and "grpo" in out.stdout
    _check_stored_completions(client, uri, runs, tmp_path)


def _check_stored_completions(client, uri: str, runs, tmp_path: Path) -> None:
    """The example sets log_completions=True: each run's rollouts/ (as `workbench rollouts` reads them) hold every
    completion file TRL wrote, each step once, with the rewards and advantages TRL wrote in it."""
    import numpy as np
    import pandas as pd

    from workbench.analysis.rollouts import query_rollouts

    stored = query_rollouts("mine", tracking_uri=uri)
    eps = float(np.finfo(np.float32).eps)  # TRL computes rewards and advantages in float32
    group_size = 4  # the example's num_generations
    varied = 0  # groups whose rewards differ: the advantage relation below is not only 0 = 0
    for run in runs:
        assert run.data.tags["workbench.rollouts"] == "all"
        rows = stored[stored.run_id == run.info.run_id]
        files = sorted((tmp_path / run.data.tags["workbench.variant"] / "completions").glob("*.parquet"))
        assert [f.name for f in files] == ["completions_00001.parquet", "completions_00002.parquet"]
        assert sorted(set(rows.step)) == [0, 1] and set(rows.split) == {"train"}
        reward_mean = history(client, run.info.run_id, "reward/mean")
        for path in files:
            written = pd.read_parquet(path)
            step = int(path.stem.split("_")[1]) - 1  # one optimizer step per generation batch: global step - 1
            mine = rows[rows.step == step]
            assert len(mine) == len(written) == 16  # once: 4 prompts x 4 completions
            assert list(mine.text) == list(written.completion)
            assert list(mine.prompt) == list(written.prompt)
            # TRL's float32 values, stored as float32 again: equal exactly; the example's two reward functions are
            # kept apart and summed (TRL's weights of 1; 0, 0.25, 1 and 1.25 are exact in float32)
            terms = ["correct", "starts_with_a_digit"]
            for name in terms:
                assert np.array_equal(mine[f"reward.{name}"].to_numpy(), written[name].to_numpy(np.float32))
            assert np.array_equal(mine.reward.to_numpy(), written[terms].to_numpy(np.float32).sum(axis=1))
            assert np.array_equal(mine.advantage.to_numpy(), written.advantage.to_numpy(np.float32))
            assert mine.kept.all() and mine.correct.isna().all()
            for group, sampled in mine.groupby("group"):
                r, a = sampled.reward.to_numpy(np.float64), sampled.advantage.to_numpy(np.float64)
                assert len(sampled) == group_size
                if r.std() == 0:  # r - mean(r, ..., r) is exactly 0 in float32 for these rewards (multiples of 1/4)
                    assert (a == 0).all(), (step, group)
                    continue
                varied += 1
                # a_i = (r_i - m)/(s + 1e-4) in float32: the group mean m's G-term sum errs by <= G eps max|r|, which
                # each of the G advantages carries divided by s; the subtraction and the division round each a_i
                # once more (<= 2 eps |a_i|): |sum a| <= G^2 eps max|r| / s + 2 G eps max|a| (s: the Bessel std,
                # <= TRL's s + 1e-4 up to float32 rounding, a second-order term; the float64 sum here adds G eps64)
                s = r.std(ddof=1)
                tol = group_size**2 * eps * np.abs(r).max() / s + 2 * group_size * eps * np.abs(a).max()
                assert abs(a.sum()) <= tol, (step, group, a)
            # TRL logs reward as the float32 nanmean of the n rewards: an n-term sum and a division round by at most
            # n eps max|r| in all; the float64 mean here of the same float32 values adds n eps64 max|r|, far below
            n = len(mine)
            assert (
                abs(mine.reward.to_numpy(np.float64).mean() - reward_mean[step]) <= n * eps * np.abs(mine.reward).max()
            )
    assert varied > 0  # 16 groups of 4, each with P ~ 0.5 of differing rewards under this model: not all equal


def test_the_shipped_differential_study_runs_its_trl_arms(tmp_path):
    """studies/engines_trl.yaml's three trl arms, 2 steps each at tests/test_shipped_studies_run.py's size."""
    from tests.test_shipped_studies_run import EXTRA, SMALL_RUN

    uri = sqlite_uri(tmp_path / "mlflow.db")
    args = [
        "run",
        str(ROOT / "studies" / "engines_trl.yaml"),
        "--quiet",
        "--only",
        "seed=0,variant=trl",
        "--set",
        f"tracking.uri={uri}",
    ]
    for setting in SMALL_RUN + EXTRA["engines_trl"]:
        args += ["--set", setting]
    result = workbench(*args, cwd=tmp_path, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = child_runs(uri, "engines-trl")
    assert sorted(r.data.tags["workbench.arm"] for r in runs) == [
        "trl/preset=dapo",
        "trl/preset=dr_grpo",
        "trl/preset=grpo",
    ]
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["workbench.engine"] == "trl"
        assert {"length/mean", "eval/accuracy", "reward/mean"} <= set(run.data.metrics)
