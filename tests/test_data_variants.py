"""Data as a variant (issue #36): the pass-rate filter, the curriculum, the priming forms, the curation
cache, the run key, and the zero-variance group metrics, each on hand-built inputs."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats

from tests.conftest import MICRO_MODEL
from tests.tolerance import EPS64, order_tolerance
from workbench.config import PrimeConfig, RunConfig, TaskConfig
from workbench.metrics.compute import solved_group_fractions
from workbench.models.tiny import tiny_cache_key
from workbench.reward._worker import math_verify_scorer
from workbench.tasks import ArithmeticTask, Problem, ScratchpadTask, boxed
from workbench.tasks.curation import (
    CURATORS,
    PromptOrder,
    curriculum_stages,
    difficulty_of,
    draw_pool,
    easy_to_hard,
    keep_by_pass_rate,
    pass_rate_histogram,
)
from workbench.tasks.priming import primed_solutions, wrong_answer
from workbench.tasks.scratchpad import parse_prompt, worked_solution
from workbench.train.data import cached_pass_rates


def problems(n: int) -> list[Problem]:
    return [Problem(f"{i}+0=", str(i), boxed(str(i))) for i in range(n)]


# ----- curation: the pass-rate filter -------------------------------------------------------------


def test_pass_rate_filter_keeps_exactly_the_prompts_in_range():
    # hand-built verifier outcomes: 10 completions per prompt, correct or not
    outcomes = np.array(
        [
            [True] * 10,  # 1.0: too easy
            [True] * 9 + [False],  # 0.9: the boundary, kept
            [True] * 5 + [False] * 5,  # 0.5
            [True] + [False] * 9,  # 0.1: the lower boundary of [0.1, 0.9], kept
            [False] * 10,
        ]
    )  # 0.0: never solved
    rates = outcomes.mean(axis=1)
    assert keep_by_pass_rate(rates, keep=(0.0, 0.9)).tolist() == [False, True, True, True, True]
    assert keep_by_pass_rate(rates, keep=(0.1, 0.9)).tolist() == [False, True, True, True, False]
    assert keep_by_pass_rate(rates, keep=(0.5, 0.5)).tolist() == [False, False, True, False, False]
    assert CURATORS.get("pass_rate") is keep_by_pass_rate
    assert pass_rate_histogram(rates) == [1, 1, 0, 0, 0, 1, 0, 0, 0, 2]  # 1.0 and 0.9 share the last decile


def test_ten_samples_make_a_noisy_filter_as_the_binomial_says():
    """Seeded simulation of the filter's error: a prompt whose true pass rate is p survives keep [0, 0.9]
    with 10 samples with probability P(Binomial(10, p) <= 9) = 1 - p^10. At p = 0.95 that is 0.40: two in
    five too-easy prompts stay. The simulated rates match the exact ones within 4 binomial standard errors."""
    rng = np.random.default_rng(36)
    trials = 20_000
    for p in (0.5, 0.8, 0.9, 0.95, 0.99):
        rates = rng.binomial(10, p, size=trials) / 10
        kept = keep_by_pass_rate(rates, keep=(0.0, 0.9)).mean()
        exact = stats.binom.cdf(9, 10, p)
        print(f"true pass rate {p}: kept {kept:.3f} (exact {exact:.3f})")
        assert abs(kept - exact) < 4 * np.sqrt(exact * (1 - exact) / trials) + 1e-12


def test_keep_range_is_checked_and_a_curator_must_exist():
    with pytest.raises(ValueError, match=r"data.curate.keep must be \[lo, hi\]"):
        RunConfig(data={"curate": {"keep": [0.9, 0.1]}})
    with pytest.raises(ValueError, match="unknown prompt curator 'pass_rat'"):
        RunConfig(data={"curate": {"name": "pass_rat"}})


# ----- order: curriculum and shuffled --------------------------------------------------------------


def test_curriculum_orders_by_the_measured_rate_easy_first_and_walks_its_stages():
    pool = problems(8)
    rates = [0.2, 0.9, 0.5, 0.0, 0.7, 0.4, 1.0, 0.1]
    ranked = easy_to_hard(rates, larger_is_easier=True)
    assert [rates[i] for i in ranked] == [1.0, 0.9, 0.7, 0.5, 0.4, 0.2, 0.1, 0.0]
    ordered = [rates[i] for i in ranked]
    stages = curriculum_stages(ordered, stages=4, steps=8)
    assert [(s.first_step, s.last_step, s.start, s.stop) for s in stages] == [
        (0, 1, 0, 2),
        (2, 3, 2, 4),
        (4, 5, 4, 6),
        (6, 7, 6, 8),
    ]
    assert [s.key_range for s in stages] == [(0.9, 1.0), (0.5, 0.7), (0.2, 0.4), (0.0, 0.1)]
    order = PromptOrder(
        ScratchpadTask(eval_size=10),
        random.Random(0),
        order="curriculum",
        pool=[pool[i] for i in ranked],
        pass_rates=ordered,
        stages=stages,
    )
    by_prompt = {p.prompt: r for p, r in zip(pool, rates, strict=True)}
    for step in range(8):
        drawn = order.draw(step, 3)
        stage = stages[step // 2]
        assert {by_prompt[p.prompt] for p in drawn} <= set(ordered[stage.start : stage.stop])
        assert order.step_metrics(step, drawn)["data/curriculum_stage"] == step // 2
    # pass rates fall stage by stage: the schedule goes easy to hard
    means = [order.step_metrics(2 * k, order.draw(2 * k, 4))["data/prompt_pass_rate"] for k in range(4)]
    # each a float64 mean of 4 values <= 1 (two passes over a stage of two): 4 operands x eps x 1
    assert means == pytest.approx([0.95, 0.6, 0.3, 0.05], abs=order_tolerance(4, 1.0, EPS64))


def test_curriculum_by_the_tasks_difficulty_knob():
    task = ScratchpadTask(digits=1, operands=4, eval_size=20)
    pool = draw_pool(task, 60, seed=0)
    keys = [difficulty_of(task, p) for p in pool]
    assert keys == [float(p.prompt.count("+") + p.prompt.count("-") + 1) for p in pool]
    ranked = easy_to_hard(keys, larger_is_easier=False)
    assert [keys[i] for i in ranked] == sorted(keys)
    assert difficulty_of(ArithmeticTask(digits=3, eval_size=10), Problem("7+123=", "130")) == 3.0
    with pytest.raises(ValueError, match="task 'jsonl' has no difficulty knob"):
        RunConfig(
            task={"name": "jsonl", "path": "x.jsonl"}, data={"order": "curriculum", "curriculum": {"by": "difficulty"}}
        )


def test_shuffled_passes_visit_every_prompt_once_per_pass():
    pool = problems(10)
    order = PromptOrder(ScratchpadTask(eval_size=10), random.Random(1), order="shuffled", pool=pool)
    drawn = [p.prompt for step in range(5) for p in order.draw(step, 4)]  # 20 draws = two passes
    assert sorted(drawn[:10]) == sorted(drawn[10:]) == sorted(p.prompt for p in pool)


def test_the_pool_is_distinct_and_fixed_by_the_seed():
    task = ScratchpadTask(digits=1, operands=3, eval_size=50)
    pool = draw_pool(task, 200, seed=3)
    assert len({p.prompt for p in pool}) == 200
    assert draw_pool(task, 200, seed=3) == pool != draw_pool(task, 200, seed=4)
    assert not {p.prompt for p in pool} & {p.prompt for p in task.eval_problems()}


def test_default_order_is_the_tasks_own_draws():
    """No data section: exactly the draws runs made before it existed (same prompts, same rng stream)."""
    task = ScratchpadTask(eval_size=10)
    order = PromptOrder(task, random.Random("train-0"))
    assert order.draw(0, 16) == task.sample_train(16, random.Random("train-0"))


# ----- priming forms -------------------------------------------------------------------------------


def test_priming_forms_wrong_answers_are_wrong_and_steps_are_the_tasks_own():
    task = ScratchpadTask(digits=2, operands=5, eval_size=20)
    rng = random.Random(0)
    for i, problem in enumerate(task.sample_train(300, rng)):
        operands, ops = parse_prompt(problem.prompt)
        worked = worked_solution(operands, ops)
        forms = task.solution_forms(problem, wrong_answer(problem.answer, rng))
        assert forms["worked"] == worked and forms["terse"] == boxed(problem.answer)
        wrong_steps, true_steps = forms["wrong"].split(","), worked.split(",")
        assert wrong_steps[:-2] == true_steps[:-2]  # every step before the last is the task's own
        assert wrong_steps[-2].split("=")[0] == true_steps[-2].split("=")[0]  # the last step's operands too
        shown = wrong_steps[-1][len("\\boxed{") : -1]
        assert wrong_steps[-2].split("=")[1] == shown != problem.answer and int(shown) >= 0
        if i < 20:  # the verifier RL uses agrees (slow: a few problems)
            assert not math_verify_scorer(forms["wrong"], problem.answer, 5.0)[0]
            assert math_verify_scorer(forms["worked"], problem.answer, 5.0)[0]
    arithmetic = ArithmeticTask(eval_size=10)
    for problem in arithmetic.sample_train(100, rng):
        forms = arithmetic.solution_forms(problem, wrong_answer(problem.answer, rng))
        assert forms["worked"] == forms["terse"] == boxed(problem.answer) != forms["wrong"]


def test_a_mix_draws_each_form_with_its_share():
    """Seeded: 3,000 rewritten problems with shares 0.5/0.3/0.2; a chi-square test of the counts."""
    task = ScratchpadTask(digits=1, operands=3, eval_size=20)
    rewrite = primed_solutions(task, {"worked": 0.5, "terse": 0.3, "wrong": 0.2})
    rng = random.Random(7)
    counts = {"worked": 0, "terse": 0, "wrong": 0}
    for problem in task.sample_train(3000, rng):
        text = rewrite(problem, rng).solution
        right = text.endswith(boxed(problem.answer))
        counts["terse" if right and "," not in text else "worked" if right else "wrong"] += 1
    p = stats.chisquare(list(counts.values()), [1500, 900, 600]).pvalue
    print(f"form counts {counts}, chi-square p = {p:.3f}")
    assert p > 0.001


def test_the_priming_mix_keys_the_cold_start_cache_and_the_run_key():
    model = RunConfig(model=MICRO_MODEL).model
    task = TaskConfig(name="scratchpad", digits=1, operands=3)
    worked = PrimeConfig(mix={"worked": 1.0})
    assert tiny_cache_key(model, task) == tiny_cache_key(model, task, None)
    assert (
        len(
            {
                tiny_cache_key(model, task),
                tiny_cache_key(model, task, worked),
                tiny_cache_key(model, task, PrimeConfig(mix={"worked": 0.5, "wrong": 0.5})),
            }
        )
        == 3
    )
    with pytest.raises(ValueError, match="must sum to 1"):
        PrimeConfig(mix={"worked": 0.5, "wrong": 0.2})
    with pytest.raises(ValueError, match="data.prime.path is an SFT stage for model.path"):
        RunConfig(data={"prime": {"path": "solutions.jsonl"}})


# ----- caching and the run key ---------------------------------------------------------------------


def test_a_second_measurement_with_the_same_settings_reads_the_cache(tmp_path):
    calls = []

    def measure() -> list[float]:
        calls.append(1)
        return [0.1, 0.5, 1.0]

    path = tmp_path / "curation" / "key.json"
    assert cached_pass_rates(path, ["a", "b", "c"], measure) == ([0.1, 0.5, 1.0], False)
    assert cached_pass_rates(path, ["a", "b", "c"], measure) == ([0.1, 0.5, 1.0], True)
    assert len(calls) == 1
    assert cached_pass_rates(path, ["a", "b", "x"], measure)[1] is False  # another pool measures again
    assert len(calls) == 2


def test_every_data_setting_changes_the_run_key_and_the_default_keeps_old_keys():
    base = RunConfig()
    assert base.run_key() == RunConfig(data={}).run_key()
    assert "data" not in base.model_dump(exclude_defaults=True)
    curate = {"curate": {}}
    variants = [
        curate,
        {"pool": 100, **curate},
        {"curate": {"samples": 5}},
        {"curate": {"temperature": 0.7}},
        {"curate": {"keep": [0.1, 0.9]}},
        {"curate": {"seed": 1}},
        {"order": "shuffled"},
        {"order": "curriculum", **curate},
        {"order": "curriculum", "curriculum": {"stages": 2}, **curate},
        {"order": "curriculum", "curriculum": {"by": "difficulty"}},
        {"prime": {"mix": {"worked": 1.0}}},
        {"prime": {"mix": {"terse": 1.0}}},
        {"prime": {"mix": {"worked": 0.5, "wrong": 0.5}}},
    ]
    keys = [RunConfig(data=v).run_key() for v in variants]
    assert len(set(keys) | {base.run_key()}) == len(variants) + 1


# ----- the zero-variance group metrics -------------------------------------------------------------


def test_all_correct_and_all_wrong_group_fractions():
    group_ids = torch.arange(4).repeat_interleave(3)  # groups of 3: all right, mixed, mixed, all wrong
    correct = torch.tensor([1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0], dtype=torch.bool)
    assert solved_group_fractions(correct, group_ids) == {"batch/all_correct_frac": 0.25, "batch/all_wrong_frac": 0.25}
