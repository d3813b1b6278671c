"""Writes real tracker runs for the import tests: TensorBoard event files with torch's SummaryWriter
and W&B offline runs with ``wandb`` (``WANDB_MODE=offline``, no account), with the metric names
TRL (through transformers' ``rewrite_logs``) and verl log to them. Run as a script in a subprocess
(``python -m tests.importers.tracker_runs OUT``): W&B starts its service process, which must not
outlive the test process's environment.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

STEPS = 12
VARIANTS = {"grpo": 0.0, "dr_grpo": 0.1}  # reward offset of each variant


def trl_row(step: int, offset: float, seed: int) -> dict[str, float]:
    """What GRPOTrainer logs at a logging step, keyed as transformers' rewrite_logs renames it."""
    return {
        "train/reward": 0.2 + offset + 0.02 * step + 0.01 * seed,
        "train/reward_std": 0.3,
        "train/frac_reward_zero_std": 0.25,
        "train/entropy": 1.0 - 0.01 * step,
        "train/completions/mean_length": 40.0 + step,
        "train/clip_ratio/region_mean": 0.0,
        "train/loss": 0.01 * step,
        "train/learning_rate": 1e-6,
    }


def verl_row(step: int, seed: int) -> dict[str, float]:
    """What verl's Tracking.log gets (keys unchanged), from compute_data_metrics and the actor."""
    return {
        "critic/score/mean": 0.2 + 0.05 * step + 0.01 * seed,
        "actor/entropy": 1.2 - 0.02 * step,
        "response_length/mean": 100.0 + step,
        "actor/pg_clipfrac": 0.01,
        "actor/pg_clipfrac_lower": 0.5,
        "timing_s/gen": 3.25,
        "actor/ppo_kl": math.nan,
    }


def write_tensorboard(out: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    for variant, offset in VARIANTS.items():
        for seed in (0, 1):
            writer = SummaryWriter(str(out / "tb" / f"{variant}-{seed}"))  # HF Trainer's logging_dir
            for step in range(1, STEPS + 1):
                for key, value in trl_row(step, offset, seed).items():
                    writer.add_scalar(key, value, step)  # TensorBoardCallback: add_scalar(k, v, global_step)
            writer.add_text("train/args", "{}", 0)  # strings are not metrics
            writer.close()
    writer = SummaryWriter(str(out / "tb-verl"))
    for step in range(1, STEPS + 1):
        for key, value in verl_row(step, 0).items():
            writer.add_scalar(key, value, step)  # verl _TensorboardAdapter.log
    writer.close()


def write_wandb(out: Path) -> None:
    import wandb

    root = out / "wb"
    root.mkdir(parents=True)
    for seed in (0, 1):  # verl: wandb.log(data=data, step=step)
        run = wandb.init(project="verl", name=f"verl-{seed}", dir=str(root), config={"seed": seed, "algo": "grpo"})
        for step in range(1, STEPS + 1):
            run.log(verl_row(step, seed), step=step)
        run.finish()
    # TRL: WandbCallback logs rewrite_logs(logs) plus train/global_step, at W&B's own step counter;
    # a logging step every 2 trainer steps, as logging_steps=2 does
    run = wandb.init(project="trl", name="trl-0", dir=str(root), config={"loss_type": "grpo"})
    for step in range(2, 2 * STEPS + 1, 2):
        run.log({**trl_row(step, 0.0, 0), "train/global_step": step})
    run.finish()


if __name__ == "__main__":
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    target = Path(sys.argv[1])
    write_tensorboard(target)
    write_wandb(target)
