"""Benchmark: does pruning buy search progress per unit of compute?

    .venv/bin/python -m tests.search.bench_pruning [--budget 240] [--steps 20] [--model tiny|micro] [--seed 0]

Two searches over the same space with the same sampler seed and the same budget of *learner steps*
(the compute: every RL step samples, scores and updates once):

* unpruned: ``pruner: none`` and health rules that only record (``on_fail: continue``): every trial
  runs its full length;
* pruned: ``pruner: median`` on the learning curve, and failing health rules end a trial early.

Printed: trials run, learner steps used, the best value, and the learner steps each search needed to
first reach the unpruned search's best value (the acceptance check of issue #7), and each search's
trajectory (cumulative learner steps: trial value, P = pruned).

``--model tiny`` (default): the built-in tiny model on held-out ``eval/accuracy`` (the first run builds
and caches the model: ~12 min on 2 busy cores; each search then takes 1.5-4 min). ``--model micro``:
the test suite's micro model, objective ``reward/mean`` under DAPO's soft overlong shaping; a quick
smoke run only (the micro model never answers correctly, and that reward saturates at 0 at once).

Measured 2026-11-22 (2 shared cores, tiny, budget 240, 20 steps per trial):
sampler seed 0: unpruned 12 trials, best 0.453, reached at 80 steps; pruned 15 trials (5 pruned), best
0.469, reached 0.453 at 73 steps. Seed 1: unpruned best 0.469 at 60 steps; pruned 20 trials (12
pruned), best 0.484, reached 0.469 at 60 steps (the same 3 random start-up trials). Wall time is not
the point here: a pruned trial still pays the fixed per-trial cost (model load, verifier processes,
MLflow run, step-0 eval), which dominates on this CPU model.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import yaml


def base_config(model: str, steps: int) -> tuple[dict, str, dict]:
    """(run config, objective metric, learning-rate range) of a benchmark model."""
    from tests.conftest import micro_run_config
    from tests.search.helpers import SHAPING

    if model == "micro":
        cfg = micro_run_config(rollout={"steps": steps, "eval_every": max(1, steps // 5)}, reward=SHAPING)
        return cfg, "reward/mean", {"low": 1e-4, "high": 1.0, "log": True}
    cfg = {
        "model": {"builtin": "tiny"},
        "task": {"digits": 2, "ops": "+-", "eval_size": 64},
        "sampler": {"max_new_tokens": 16},
        "rollout": {"prompts_per_step": 8, "group_size": 8, "steps": steps, "eval_every": max(1, steps // 5)},
        "reward": {"shaping": [{"name": "overlong_soft", "params": {"max_length": 16, "cache_length": 4}}]},
    }
    return cfg, "eval/accuracy", {"low": 1e-5, "high": 1e-1, "log": True}


def run_one(
    root: Path, name: str, cfg: dict, metric: str, lr: dict, pruned: bool, budget: int, seed: int, n_startup: int
):
    from optuna.trial import TrialState

    from workbench.search.objective import STEPS, TrialObjective
    from workbench.search.spec import parse_search
    from workbench.search.worker import SearchWorker, TuneOptions
    from workbench.study import load_study

    health = {
        "rules": {"entropy_collapse": {"baseline_steps": 1, "patience": 1, "severity": "fail"}},
        "on_fail": "stop" if pruned else "continue",
    }
    search = {
        "metric": metric,
        "params": {"learner.lr": lr, "algorithm.clip_high": {"low": 0.1, "high": 0.5}},
        "sampler": {"name": "tpe", "seed": seed, "n_startup_trials": n_startup},
        "pruner": {"name": "median", "n_startup_trials": n_startup} if pruned else "none",
        "n_trials": 10_000,
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": cfg, "health": health, "search": search}, sort_keys=False))
    spec = parse_search(load_study(path))
    worker = SearchWorker(spec, f"sqlite:///{root / (name + '.db')}", TuneOptions(log=lambda _: None))
    worker.connect()
    objective = TrialObjective(spec, worker.ctx, worker.id, log=lambda _: None)
    used, history = 0, []  # (learner steps used so far, value of the trial, state)
    started = time.monotonic()
    while used < budget:
        worker.ostudy.optimize(objective, n_trials=1, catch=(Exception,))
        t = worker.ostudy.trials[-1]
        used += int(t.user_attrs.get(STEPS, 0))
        value = t.value if t.state == TrialState.COMPLETE else math.nan
        history.append((used, value, t.state.name))
    return history, time.monotonic() - started


def steps_to_reach(history, target: float, maximize: bool) -> int | None:
    for used, value, _ in history:
        if not math.isnan(value) and (value >= target - 1e-12 if maximize else value <= target + 1e-12):
            return used
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=240, help="learner steps per search")
    parser.add_argument("--steps", type=int, default=20, help="RL steps of a full trial")
    parser.add_argument("--model", choices=["tiny", "micro"], default="tiny")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (both searches)")
    parser.add_argument("--startup", type=int, default=3, help="random trials before TPE / the pruner start")
    args = parser.parse_args()

    import os

    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from rich.console import Console
    from rich.table import Table

    cfg, metric, lr = base_config(args.model, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
        results = {}
        for pruned in (False, True):
            name = "pruned" if pruned else "unpruned"
            results[name] = run_one(root, name, cfg, metric, lr, pruned, args.budget, args.seed, args.startup)

    def best(h):
        return max((v for _, v, _ in h if not math.isnan(v)), default=math.nan)

    target = best(results["unpruned"][0])
    table = Table(
        title=f"pruning benchmark: {args.model} model, {metric}, budget {args.budget} learner steps, "
        f"{args.steps} steps per full trial, sampler seed {args.seed}"
    )
    for col in [
        "search",
        "trials",
        "complete",
        "pruned",
        "learner steps",
        "best",
        "steps to reach unpruned best",
        "wall s",
    ]:
        table.add_column(col, justify="right")
    for name, (history, wall) in results.items():
        states = [s for _, _, s in history]
        reach = steps_to_reach(history, target, maximize=True)
        table.add_row(
            name,
            str(len(history)),
            str(states.count("COMPLETE")),
            str(states.count("PRUNED")),
            str(history[-1][0]),
            f"{best(history):.4g}",
            "-" if reach is None else str(reach),
            f"{wall:.0f}",
        )
    console = Console()
    console.print(table)
    for name, (history, _) in results.items():  # the trajectory: cumulative learner steps -> trial value
        console.print(
            f"{name}: "
            + "  ".join(f"{used}:{'P' if state == 'PRUNED' else f'{value:.3f}'}" for used, value, state in history),
            soft_wrap=True,
            highlight=False,
        )


if __name__ == "__main__":
    main()
