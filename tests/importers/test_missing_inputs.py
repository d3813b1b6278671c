"""What imported runs lack is said, not silently passed: health cells and compare notes, by hand."""

from __future__ import annotations

import math

import pandas as pd

from workbench.analysis.comparison import uncomputed_summaries
from workbench.analysis.health_table import health_cells
from workbench.health import HealthMonitor


def _history(rows):
    return pd.DataFrame(rows, columns=["run_id", "variant", "seed", "step", "metric", "value"])


def test_compare_names_the_summaries_it_could_not_compute_and_why():
    history = _history(
        [("a", "v", 0, s, "reward/mean", 0.5) for s in range(3)]
        + [("b", "v", 1, 0, "reward/mean", 0.5), ("b", "v", 1, 0, "eval/accuracy", math.nan)]
    )
    summary = pd.DataFrame(
        {"run_id": ["a", "b"], "final_eval_accuracy": [math.nan, math.nan], "final:reward/mean": [0.5, 0.5]}
    )
    lines = uncomputed_summaries(summary, history, ["final_eval_accuracy", "final:reward/mean"])
    # run a never logged eval/accuracy; run b logged it, but only NaN: only a lacks the metric
    assert lines == ["could not compute final_eval_accuracy for 2 of 2 runs: needs eval/accuracy"]
    only_b = summary[summary["run_id"] == "b"]
    assert uncomputed_summaries(only_b, history, ["final_eval_accuracy"]) == [
        "could not compute final_eval_accuracy for 1 of 1 runs: too few finite values"
    ]


def test_health_cell_of_a_rule_without_inputs_is_unknown_with_the_reason():
    # 90 steps: reward_collapse first evaluates once its running window and noise window are full (80)
    report = HealthMonitor.from_config(None).recheck([(s, {"reward/mean": 0.5}) for s in range(90)]).report()
    runs = pd.DataFrame({"run_id": ["r"], "variant": ["v"], "seed": [0]})
    cells = health_cells(runs, {"r": report}).set_index("rule")
    assert cells.at["kl_explosion", "state"] == "unknown"
    assert cells.at["kl_explosion", "message"] == "not evaluated: needs kl/ref"
    assert cells.at["reward_collapse", "state"] == "ok"  # its input arrived: evaluated, did not fire
