"""Synthetic study frames (the reader's output shape) for fast viz tests: no MLflow, no training."""

from __future__ import annotations

import numpy as np
import pandas as pd

STEP_METRICS = (
    "reward/mean",
    "entropy/mean",
    "length/mean",
    "length/correct_mean",
    "length/incorrect_mean",
    "length/truncated_frac",
    "clip/frac_low",
    "clip/frac_high",
    "mismatch/kl",
    "mismatch/prob_abs_diff_max",
    "grad/norm",
    "batch/zero_std_frac",
)


def synthetic_study(
    variants=("grpo", "dapo"), seeds=(0, 1, 2), steps=20, eval_every=5, effect=0.2, eval_problems: int | None = 100
):
    """``(history, runs)``: variant i's reward and eval accuracy rise ``i * effect`` faster. Each eval
    logs ``eval/n_problems`` = ``eval_problems`` (None: an older study that did not log it)."""
    rng = np.random.default_rng(0)
    rows, runs = [], []
    for i, variant in enumerate(variants):
        for seed in seeds:
            rid = f"{variant}-{seed}".ljust(32, "0")
            runs.append(
                {
                    "run_id": rid,
                    "run_name": f"{variant}/seed={seed}",
                    "variant": variant,
                    "seed": seed,
                    "status": "FINISHED",
                    "health": "ok",
                    "health_reasons": "",
                    "rollout.prompts_per_step": 4,
                    "rollout.group_size": 4,
                }
            )
            for step in range(steps):
                t = step / steps
                values = {
                    "reward/mean": 0.3 + (0.3 + i * effect) * t + rng.normal(0, 0.02),
                    "entropy/mean": 1.0 - 0.5 * t + rng.normal(0, 0.01),
                    "length/mean": 10 + rng.normal(0, 1),
                    "length/correct_mean": 9 + rng.normal(0, 1),
                    "length/incorrect_mean": 12 + 4 * t + rng.normal(0, 1),
                    "length/truncated_frac": 0.1 * t,
                    "clip/frac_low": 0.01 + rng.uniform(0, 0.01),
                    "clip/frac_high": 0.02 + rng.uniform(0, 0.01),
                    "mismatch/kl": 1e-4 * (1 + rng.uniform()),
                    "mismatch/prob_abs_diff_max": 0.05 + rng.uniform(0, 0.01),
                    "grad/norm": 1 + rng.uniform(),
                    "batch/zero_std_frac": 0.2,
                }
                if step % eval_every == 0 or step == steps - 1:
                    values["eval/accuracy"] = 0.3 + (0.2 + i * effect) * t + rng.normal(0, 0.01)
                    if eval_problems is not None:
                        values["eval/n_problems"] = eval_problems
                for metric, value in values.items():
                    rows.append(
                        {
                            "run_id": rid,
                            "variant": variant,
                            "seed": seed,
                            "step": step,
                            "metric": metric,
                            "value": float(value),
                        }
                    )
    history = pd.DataFrame(rows)
    history["seed"] = history["seed"].astype("Int64")
    runs = pd.DataFrame(runs)
    runs["seed"] = runs["seed"].astype("Int64")
    return history, runs


def health_report(run_id_events, rules=("entropy_collapse", "length_blowup", "non_finite"), disabled=()):
    """A health.json-shaped report with the given ``[(rule, step, severity, metric, value)]`` events."""
    watches = {
        "entropy_collapse": ["entropy/mean"],
        "length_blowup": ["length/truncated_frac"],
        "non_finite": [],
        "kl_explosion": ["kl/ref"],
    }
    events = [
        {
            "rule": r,
            "step": s,
            "metric": m,
            "value": v,
            "threshold": 0.1,
            "severity": sev,
            "message": f"{r} fired at step {s}",
        }
        for r, s, sev, m, v in run_id_events
    ]
    first = {}
    for e in events:
        first.setdefault(e["rule"], e)
    out_rules = {}
    for r in rules:
        e = first.get(r)
        out_rules[r] = {
            "enabled": r not in disabled,
            "severity": e["severity"] if e else "warn",
            "watches": watches.get(r, []),
            "count": int(e is not None),
            "active": False,
            "first_trigger": None
            if e is None
            else {k: e[k] for k in ("step", "metric", "value", "threshold", "message")},
        }
    worst = max([{"warn": 1, "fail": 2}[e["severity"]] for e in events], default=0)
    return {
        "status": ("ok", "warn", "fail")[worst],
        "reasons": ",".join(f"{e['rule']}@{e['step']}" for e in first.values()),
        "rules": out_rules,
        "events": events,
    }


def mismatch_records(runs, steps=(0, 10, 19), without=()):
    """A ``MismatchRecords`` of ``runs`` (mismatch.json as the reader returns it): per run and step a
    histogram on the recorder's bins whose tail grows with the step, and 3 worst tokens; ``without``: run
    ids that logged none."""
    from workbench.metrics.mismatch import HIST_EDGES
    from workbench.results.reader import MismatchRecords

    out = MismatchRecords({}, {})
    middle = len(HIST_EDGES) // 2
    for i, rid in enumerate(runs["run_id"]):
        if rid in without:
            continue
        recs = []
        for step in steps:
            counts = [0] * (len(HIST_EDGES) + 1)
            counts[middle - 4], counts[middle + 4] = 100 + i, 90 + step  # |Δ| ~ 1e-4: the bf16 bulk
            counts[middle + 10] = step  # |Δ| ~ 0.1: a tail that grows
            worst = [
                {
                    "sequence": k,
                    "position": 2 * k,
                    "token_id": 3 + k + i,
                    "learner_logp": -0.1 * k,
                    "sampler_logp": -0.1 * k - 0.2,
                    "log_ratio": 0.2,
                }
                for k in range(3)
            ]
            recs.append(
                {
                    "step": step,
                    "edges": list(HIST_EDGES),
                    "counts": counts,
                    "tokens": sum(counts),
                    "worst_tokens": worst,
                }
            )
        out.records[rid] = recs
    return out
