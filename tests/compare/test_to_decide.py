"""#52: an inconclusive verdict says what would decide it, on the headline's next line: the seeds `workbench plan`
computes for that comparison at its SESOI, and the `--until-decided` command."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from statsmodels.stats.power import TTestPower

from workbench.analysis.comparison import LoadedComparison
from workbench.analysis.next_step import study_command, what_would_decide
from workbench.analysis.target import Target
from workbench.compare import CompareSettings, compare_variants


def _runs() -> pd.DataFrame:
    # 3 variants and the baseline at 3 seeds; a: +10 points (better), b and c: noise (inconclusive)
    rng = np.random.default_rng(52)
    rows = [
        {"variant": v, "seed": s, "final_eval_accuracy": mu + rng.normal(0, 0.03)}
        for v, mu in (("base", 0.5), ("a", 0.6), ("b", 0.51), ("c", 0.5))
        for s in range(3)
    ]
    return pd.DataFrame(rows)


def _loaded(compare: dict, where: str) -> LoadedComparison:
    target = Target(study="toy", tracking_uri="sqlite:////nonexistent/mlflow.db", reader=None, compare=compare)
    return LoadedComparison(target, ["final_eval_accuracy"], dict(compare["sesoi"]), None, _runs(), {}, None, where)


def test_the_line_names_plans_seeds_and_the_until_decided_command():
    """noise SD 0.025 and SESOI 0.03 declared (no store read), 3 comparisons: plan tests at 0.05 / 3 with a paired
    SD of sqrt(2) x 0.025, effect size 0.03 / 0.035355 = 0.8485; statsmodels' TTestPower (its own solver) needs
    n = 17.5 seeds at 80% power: 18 seeds per arm."""
    compare = {"sesoi": {"final_eval_accuracy": 0.03}, "noise_sd": {"final_eval_accuracy": 0.025}, "baseline": "base"}
    n = TTestPower().solve_power(effect_size=0.03 / (math.sqrt(2) * 0.025), alpha=0.05 / 3, power=0.8)
    assert 17 < n < 18
    lines = what_would_decide(
        _loaded(compare, "/somewhere/studies/toy.yaml"), _runs(), "base", ["final_eval_accuracy"], []
    )
    assert lines["final_eval_accuracy"] == (
        "to decide it: `workbench plan` sizes this comparison at 18 seeds per arm (80% power at its SESOI ±3.0 "
        "points, α 0.0167 per comparison); run `workbench run studies/toy.yaml --until-decided`"
    )
    assert (
        what_would_decide(
            _loaded(compare, "toy.yaml"), _runs(), "base", ["final_eval_accuracy"], ["final_eval_accuracy"]
        )
        == {}
    )  # a secondary metric keeps no study running
    no_sd = {"sesoi": {"final_eval_accuracy": 0.03}, "baseline": "base"}  # and no store to measure it in
    line = what_would_decide(_loaded(no_sd, "toy.yaml"), _runs(), "base", ["final_eval_accuracy"], [])
    assert line["final_eval_accuracy"].startswith("to decide it: `workbench plan` cannot size it (no compare.noise_sd")


def test_only_an_inconclusive_headline_carries_the_line():
    table = compare_variants(_runs(), "base", ["final_eval_accuracy"], CompareSettings(n_resamples=0))
    table.settings["to_decide"] = {"final_eval_accuracy": "to decide it: X"}
    status = dict(zip(table.df["variant"], table.df["status"], strict=True))
    assert status["a"] == "better" and status["b"] == status["c"] == "inconclusive"
    heads = {h.split(" vs ")[0]: h for h in table.headlines()}
    assert "\n" not in heads["a"]
    assert heads["b"].endswith("\nto decide it: X") and heads["c"].endswith("\nto decide it: X")
    assert "\nto decide it: X\n" in table.to_markdown()


def test_the_command_names_the_study_file_as_a_reader_types_it():
    assert study_command("/home/x/repo/studies/priming.yaml") == "workbench run studies/priming.yaml --until-decided"
    assert study_command("my/study.yml") == "workbench run my/study.yml --until-decided"
    assert study_command("/tmp/a.yaml") == "workbench run a.yaml --until-decided"
    assert study_command("priming") == "workbench run <priming's study YAML> --until-decided"
