"""TensorBoard event files and W&B offline runs, written by the real libraries, -> workbench import
-> health --recheck and compare; the same bad-input rules as the other importers (exit 2, one line,
nothing written)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from workbench.importers.trackers import source_steps

from .helpers import child_runs, import_args, sqlite_uri, workbench
from .tracker_runs import STEPS, trl_row

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tracker-runs")
    done = subprocess.run(
        [sys.executable, "-m", "tests.importers.tracker_runs", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def wandb_run(runs: Path, name: str) -> Path:
    """The offline run directory whose run record has display name ``name``."""
    from workbench.importers import read_wandb_run

    (found,) = [d for d in (runs / "wb" / "wandb").glob("offline-run-*") if read_wandb_run(d).name == name]
    return found


def test_hf_tracker_names_and_wandb_step_map_back_to_trl_names():
    # WandbCallback logs at W&B's own counter (0, 1, ...) and adds train/global_step: the trainer step wins
    rows = [
        (0, {"train/reward": 0.5, "train/global_step": 2.0, "eval/loss": 1.0}),
        (1, {"train/reward": 0.6, "train/global_step": 4.0}),
    ]
    assert source_steps("trl", rows) == [(2, {"reward": 0.5, "eval_loss": 1.0}), (4, {"reward": 0.6})]
    assert source_steps("verl", [(3, {"critic/score/mean": 0.1})]) == [(3, {"critic/score/mean": 0.1})]


@pytest.mark.slow
def test_tensorboard_trl_runs_import_then_health_and_compare(runs, tmp_path):
    dst = sqlite_uri(tmp_path / "mlflow.db")
    for variant in ("grpo", "dr_grpo"):
        tb = [runs / "tb" / f"{variant}-{seed}" for seed in (0, 1)]
        done = workbench(
            *import_args("tensorboard", *tb, study="tb-trl", dst=dst, variant=variant, seeds=(0, 1)), cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
    again = workbench(
        *import_args("tensorboard", runs / "tb" / "grpo-0", study="tb-trl", dst=dst, variant="grpo", seeds=(0,)),
        cwd=tmp_path,
    )
    assert again.returncode == 0 and "already imported" in again.stdout  # same event files, same run_key
    imported = child_runs(dst, "tb-trl")
    assert len(imported) == 4
    run = next(r for r in imported if r.info.run_name == "grpo/seed=1")
    tags = run.data.tags
    assert (tags["workbench.source"], tags["workbench.source_tracker"]) == ("trl", "tensorboard")  # framework guessed
    expected = trl_row(STEPS, 0.0, 1)
    m = run.data.metrics  # the last step; TensorBoard stores float32: relative error <= 2**-24 per value
    assert m["reward/mean"] == pytest.approx(expected["train/reward"], rel=2**-23)
    assert m["entropy/mean"] == pytest.approx(expected["train/entropy"], rel=2**-23)
    assert m["length/mean"] == pytest.approx(expected["train/completions/mean_length"], rel=2**-23)
    assert m["batch/zero_std_frac"] == 0.25 and m["clip/frac"] == 0.0  # exact in float32
    assert "source/learning_rate" in m  # no canonical counterpart: kept, under the name TRL gave it
    steps = [p.step for p in MlflowClient(dst).get_metric_history(run.info.run_id, "reward/mean")]
    assert sorted(steps) == list(range(1, STEPS + 1))

    health = workbench("health", "tb-trl", "--recheck", "--format", "json", "--tracking-uri", dst, cwd=tmp_path)
    assert health.returncode == 0, health.stderr
    checked = json.loads(health.stdout)["runs"]
    assert len(checked) == 4
    for r in checked:  # frac_reward_zero_std mapped: the signal rule evaluates instead of saying what it lacks
        assert r["rules"]["no_learning_signal"]["state"] in ("ok", "warn")
    compare = workbench("compare", "tb-trl", "--format", "json", "--no-log", "--tracking-uri", dst, cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    rows = json.loads(compare.stdout)["rows"]
    assert {row["variant"] for row in rows} == {"grpo", "dr_grpo"}
    assert {row["metric"] for row in rows} == {"final:reward/mean", "final:length/mean", "final:entropy/mean"}


@pytest.mark.slow
def test_wandb_offline_runs_import_with_their_config_and_steps(runs, tmp_path):
    dst = sqlite_uri(tmp_path / "mlflow.db")
    verl = [str(wandb_run(runs, f"verl-{seed}")) for seed in (0, 1)]
    done = workbench(
        *import_args("wandb", *verl, study="wb", dst=dst, variant="grpo", seeds=(0, 1), framework="verl"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    trl = workbench(
        *import_args("wandb", wandb_run(runs, "trl-0"), study="wb", dst=dst, variant="trl", seeds=(0,)), cwd=tmp_path
    )
    assert trl.returncode == 0, trl.stderr
    by_name = {r.info.run_name: r for r in child_runs(dst, "wb")}
    run = by_name["grpo/seed=1"]
    assert (run.data.tags["workbench.source"], run.data.tags["workbench.source_tracker"]) == ("verl", "wandb")
    assert run.data.params["source.algo"] == "grpo"  # the W&B config, as source params
    m = run.data.metrics  # W&B keeps float64 as JSON: exact
    assert m["reward/mean"] == 0.2 + 0.05 * STEPS + 0.01
    assert m["source/actor/pg_clipfrac_lower"] == 0.5 and "clip/frac_low" not in m  # verl's caveat holds
    assert math.isnan(m["policy/approx_kl"])  # NaN logged -> NaN imported, not dropped or zeroed
    client = MlflowClient(dst)
    trl_run = by_name["trl/seed=0"]
    assert trl_run.data.tags["workbench.source"] == "trl"  # guessed from train/reward, train/entropy, ...
    steps = sorted(p.step for p in client.get_metric_history(trl_run.info.run_id, "reward/mean"))
    assert steps == list(range(2, 2 * STEPS + 1, 2))  # train/global_step, not W&B's own 0, 1, 2, ...
    health = workbench("health", "wb", "--recheck", "--format", "json", "--tracking-uri", dst, cwd=tmp_path)
    assert health.returncode == 0, health.stderr
    compare = workbench("compare", "wb", "--format", "json", "--no-log", "--tracking-uri", dst, cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    assert {row["variant"] for row in json.loads(compare.stdout)["rows"]} == {"grpo", "trl"}


def _refused(done: subprocess.CompletedProcess[str], *needles: str, store: Path) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    message = done.stderr.strip()
    assert len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message, message
    assert not store.exists()  # nothing written


@pytest.mark.slow
def test_bad_tracker_input_exits_2_naming_the_path_and_writes_nothing(runs, tmp_path):
    db = tmp_path / "mlflow.db"
    dst = sqlite_uri(db)

    def imp(tracker: str, *args: str) -> subprocess.CompletedProcess[str]:
        return workbench(
            "import", tracker, *args, "--study", "s", "--variant", "v", "--tracking-uri", dst, cwd=tmp_path
        )

    _refused(imp("tensorboard", str(tmp_path / "nope"), "--seed", "0"), "nope", "no such directory", store=db)
    _refused(
        imp("tensorboard", str(runs / "tb"), "--seed", "0"), "holds no TensorBoard event files", "grpo-0", store=db
    )  # the parent directory: the run directories below it are named
    _refused(
        imp("tensorboard", str(runs / "tb" / "grpo-0"), "--seed", "0", "--seed", "1"), "one per run directory", store=db
    )
    _refused(
        imp("tensorboard", str(runs / "tb" / "grpo-0"), "--seed", "0", "--framework", "openrlhf"),
        "--framework 'openrlhf'",
        store=db,
    )
    _refused(
        imp("wandb", str(runs / "wb" / "wandb"), "--seed", "0"), "not a W&B run directory", "offline-run-", store=db
    )
    corrupt = tmp_path / "corrupt"
    shutil.copytree(wandb_run(runs, "verl-0"), corrupt)
    (log,) = corrupt.glob("run-*.wandb")
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a record
    log.write_bytes(bytes(data))
    _refused(imp("wandb", str(corrupt), "--seed", "0"), str(log), "checksum", store=db)
    unknown = tmp_path / "unknown-tb"
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(unknown)) as writer:
        writer.add_scalar("my/own_metric", 1.0, 1)
    _refused(imp("tensorboard", str(unknown), "--seed", "0"), "cannot tell which framework", "--framework", store=db)


@pytest.mark.slow
def test_a_wandb_run_cut_short_is_left_for_later(runs, tmp_path):
    cut = tmp_path / "cut"
    shutil.copytree(wandb_run(runs, "verl-0"), cut)
    (log,) = cut.glob("run-*.wandb")
    log.write_bytes(log.read_bytes()[:-40])  # the exit record (37 bytes + its 7-byte header) half written
    dst = sqlite_uri(tmp_path / "mlflow.db")
    done = workbench(*import_args("wandb", cut, study="s", dst=dst, variant="v", seeds=(0,)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "still running in the source" in done.stdout
