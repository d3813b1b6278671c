"""One definition of "final" (issue 32, finding 3): `run`'s end-of-run table and `compare` give a
run the same final eval accuracy, the mean of its last 3 evals after step 0
(:mod:`workbench.metrics.final`), and every output that shows it says so."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from workbench.cli import main as cli_main
from workbench.compare import summarize_runs
from workbench.execution.run import RunOutcome, eval_endpoints
from workbench.metrics.final import FINAL_EVAL_DEFINITION, final_eval_value, final_eval_weights


def history_of(run_id: str, evals: list[tuple[int, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run_id": run_id, "variant": "grpo", "seed": 0, "step": s, "metric": "eval/accuracy", "value": v}
            for s, v in evals
        ]
    )


@pytest.mark.parametrize(
    "evals",
    [
        [(0, 0.300), (10, 0.327), (20, 0.360)],  # the 20-step run, an eval every 10
        [(0, 0.3), (50, 0.458), (100, 0.49), (150, 0.533), (200, 0.543), (250, 0.58)],  # the README's demo curve
        [(0, 0.3), (7, 0.41)],  # stopped early: one eval after step 0
        [(0, 0.3)],  # never trained: no final
    ],
)
def test_run_and_compare_give_a_run_the_same_final(evals):
    _, _, run_final = eval_endpoints(evals)
    compare_final = summarize_runs(history_of("r", evals), None, ["final_eval_accuracy"])["final_eval_accuracy"][0]
    after = [v for s, v in evals if s > 0][-3:]
    expected = sum(after) / len(after) if after else math.nan
    # both are one mean of at most 3 values in [0, 1]: they agree to a few ulps (3 x 2.2e-16)
    assert run_final == pytest.approx(expected, abs=1e-15, nan_ok=True)
    assert compare_final == pytest.approx(run_final, abs=1e-15, nan_ok=True)


def test_final_weights_leave_out_step_0_and_take_the_last_3():
    assert final_eval_weights([0, 10, 20]).tolist() == [0.0, 0.5, 0.5]
    assert final_eval_weights([0, 10, 20, 30, 40]).tolist() == [0.0, 0.0, 1 / 3, 1 / 3, 1 / 3]
    assert final_eval_weights([0]).tolist() == [0.0]
    assert FINAL_EVAL_DEFINITION == "mean of the last 3 evals after step 0"


def test_the_end_of_run_table_prints_final_and_says_what_it_is(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(cli_main, "console", Console(file=out, width=200, color_system=None))
    first, last, final = eval_endpoints([(0, 0.300), (10, 0.327), (20, 0.360)])
    outcome = RunOutcome(
        "grpo/seed=0",
        "grpo",
        0,
        "k",
        "FINISHED",
        eval_first=first,
        eval_last=last,
        eval_final=final,
        steps=20,
        health="ok",
    )
    cli_main.print_summary("s", [outcome], "sqlite:///mlflow.db")
    text = out.getvalue()
    assert "eval final" in text and "eval last" not in text
    assert f"{final:.3f}" == "0.344" and "0.344" in text and "+0.044" in text  # (0.327 + 0.360) / 2, Δ from 0.300
    assert f"eval final: {FINAL_EVAL_DEFINITION} of eval/accuracy" in text


def test_leaving_step_0_out_removes_the_shrinkage_of_short_runs():
    """Simulation: 2 variants x 2000 seeds, 20 steps with evals at 0, 10, 20; both start from the
    same model at a seed (same step-0 eval), the variant ends 6 points higher, eval noise SD 0.02.
    With step 0 averaged in ("the last 3 evals"), the mean difference is shrunk to ~2/3 of the
    effect at steps 10-20; the definition used recovers it."""
    rng = np.random.default_rng(0)
    n, effect = 2000, 0.06
    start = 0.30 + 0.02 * rng.standard_normal(n)  # the initial model's eval, shared by both variants at a seed
    steps = np.array([0, 10, 20])

    def curve(gain: float) -> np.ndarray:  # [n, 3]: evals at steps 0, 10, 20
        late = start[:, None] + gain + 0.02 * rng.standard_normal((n, 2))
        return np.column_stack([start, late])

    base, variant = curve(0.04), curve(0.04 + effect)
    with_step_0 = (variant.mean(axis=1) - base.mean(axis=1)).mean()
    final = np.array(
        [final_eval_value(steps, v) - final_eval_value(steps, b) for v, b in zip(variant, base, strict=True)]
    ).mean()
    print(f"\nmean Δ, true {effect}: last 3 evals with step 0 {with_step_0:.4f}; {FINAL_EVAL_DEFINITION} {final:.4f}")
    # Monte-Carlo SE of each mean Δ: sqrt(2 x 0.02^2 / 2 / 2000) ~ 4.5e-4 (0.02 noise, 2-eval means, 2000 pairs);
    # 5 SE = 0.0022
    assert abs(final - effect) < 0.0022
    assert abs(with_step_0 - 2 * effect / 3) < 0.0022
