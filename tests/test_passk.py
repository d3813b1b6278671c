"""Unbiased pass@k (Chen et al. 2021) and the eval that samples n answers per problem.

Tolerances: the estimator is a product of c ≤ n factors in [0, 1], each one rounding, then one
subtraction; in float64 with n ≤ 256 its error is ≤ (n + 1) · 2⁻⁵³ < 1e-13, the bound used below.
The hand values are exact rationals.
"""

from __future__ import annotations

from math import comb

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from workbench.config import RolloutConfig, RunConfig
from workbench.metrics.catalogue import BY_NAME, unlogged_by_config
from workbench.metrics.passk import MAX_EVAL_SAMPLES, ks_for, pass_at_k, pass_at_k_metrics
from workbench.tracking.artifacts import decode_problem_rows
from workbench.train.evaluate import ProblemResults

TOL = (MAX_EVAL_SAMPLES + 1) * 2.0**-53  # ≤ n + 1 float64 roundings on values ≤ 1


def test_verl_pr_7240_one_correct_of_four_is_pass_at_4_one():
    # 1 − C(3,4)/C(4,4) = 1 − 0/1: every 4-subset of the 4 samples holds the correct one. A bootstrapped
    # best@4 (draws with replacement) would read 1 − (3/4)^4 = 0.684; the unbiased estimator does not.
    assert pass_at_k(4, 1, 4) == 1.0
    assert 1 - (3 / 4) ** 4 == pytest.approx(0.684, abs=5e-4)
    assert pass_at_k(4, 1, 1) == 0.25  # 1 − C(3,1)/C(4,1) = 1 − 3/4
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, abs=TOL)  # 1 − C(3,2)/C(4,2) = 1 − 3/6


def test_hand_values():
    assert pass_at_k(10, 3, 2) == pytest.approx(24 / 45, abs=TOL)  # 1 − C(7,2)/C(10,2) = 1 − 21/45
    assert pass_at_k(10, 0, 5) == 0.0  # no correct answer: never
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 6, 5) == 1.0  # n − c = 4 < 5: every 5-subset holds a correct one
    # two problems (1 of 4, 4 of 4) and one with none: pass@2 = (1/2 + 1 + 0)/3, mean@n = 5/12
    metrics = pass_at_k_metrics(4, [1, 4, 0])
    assert metrics == pytest.approx(
        {"eval/pass_at_1": 5 / 12, "eval/pass_at_2": 1.5 / 3, "eval/pass_at_4": 2 / 3, "eval/mean_at_n": 5 / 12},
        abs=TOL,
    )
    assert ks_for(1) == [1] and ks_for(16) == [1, 2, 4, 8, 16] and ks_for(12) == [1, 2, 4, 8]


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_out_of_range_is_a_value_error(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


@given(n=st.integers(1, MAX_EVAL_SAMPLES), data=st.data())
@example(n=1, data=None)
def test_pass_at_k_agrees_with_binomials_and_is_non_decreasing_in_k(n, data):
    c = 0 if data is None else data.draw(st.integers(0, n))
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(a <= b + TOL for a, b in zip(values, values[1:], strict=False))  # more draws never hurt
    assert values[0] == pytest.approx(c / n, abs=TOL)  # pass@1 is the fraction correct
    for k in {1, n // 2 or 1, n}:  # the exact rational, from Python's integer binomials
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=TOL)


@given(correct=st.lists(st.integers(0, 1), min_size=1, max_size=50))
def test_with_one_sample_pass_at_1_is_the_accuracy(correct):
    assert pass_at_k_metrics(1, correct)["eval/pass_at_1"] == pytest.approx(sum(correct) / len(correct), abs=TOL)


def test_defaults_keep_the_run_key_and_greedy_many_samples_is_refused():
    cfg = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    with_default = RunConfig.model_validate({"model": {"builtin": "tiny"}, "rollout": {"eval_samples": 1}})
    assert cfg.rollout.eval_samples == 1 and cfg.run_key() == with_default.run_key()
    assert (
        RunConfig.model_validate(
            {"model": {"builtin": "tiny"}, "rollout": {"eval_samples": 4, "eval_temperature": 1.0}}
        ).run_key()
        != cfg.run_key()
    )
    with pytest.raises(ValueError, match="eval_temperature > 0"):
        RolloutConfig(eval_samples=4)


def test_catalogue_declares_every_k_and_says_which_a_run_does_not_log():
    assert all(f"eval/pass_at_{k}" in BY_NAME for k in ks_for(MAX_EVAL_SAMPLES)) and "eval/mean_at_n" in BY_NAME
    assert BY_NAME["eval/pass_at_4"].unit == "fraction" and BY_NAME["eval/pass_at_4"].bounds == (0.0, 1.0)
    absent = unlogged_by_config({"rollout.eval_samples": "4"})
    assert "eval/pass_at_8" in absent and "eval/pass_at_4" not in absent and "eval/mean_at_n" not in absent
    assert "eval/pass_at_1" in unlogged_by_config({"rollout.eval_samples": 1})
    # MLflow's rule for metric names (a real store refused "eval/pass@1"): letters, digits, _ - . space : /
    from mlflow.utils.validation import _validate_metric_name

    for name in [*BY_NAME]:
        _validate_metric_name(name)


def test_the_table_gains_the_counts_only_with_many_samples():
    one = ProblemResults(step=[0], problem_id=["a"], correct=[1], length=[3], truncated=[0])
    assert decode_problem_rows(one.to_csv_gz()).columns.tolist() == [
        "step",
        "problem_id",
        "correct",
        "length",
        "truncated",
    ]
    many = ProblemResults(
        step=[0, 0],
        problem_id=["a", "b"],
        correct=[1, 0],
        length=[3, 4],
        truncated=[0, 0],
        samples=[4, 4],
        n_correct=[3, 0],
    )
    frame = decode_problem_rows(many.to_csv_gz())
    assert frame["n_correct"].tolist() == [3, 0] and frame["samples"].tolist() == [4, 4]
    assert many.before(1).n_correct == [3, 0] and many.before(0).n_correct == []


@pytest.mark.slow
def test_eval_with_n_samples_counts_each_problems_correct_answers():
    """A real micro policy answers one character per problem ('d+0=' → 'd'); the counts equal a
    count by hand over the same sampled texts (same seed, one generate call), and the metrics follow."""
    from tests.learner_helpers import micro_policy
    from workbench.config import SamplerConfig
    from workbench.reward import AnswerVerifier
    from workbench.rollout.hf import HFSampler
    from workbench.tasks import Problem
    from workbench.train.evaluate import evaluate

    model, tok = micro_policy()
    sampler = HFSampler(model, tok, SamplerConfig(max_new_tokens=1))
    problems = [Problem(f"{d}+0=", str(d)) for d in range(10)]
    n = 16
    roll = RolloutConfig(eval_samples=n, eval_temperature=1.0, log_samples=2)
    with AnswerVerifier(timeout_s=5, workers=1) as verifier:
        metrics, samples, rows = evaluate(sampler, verifier, problems, roll, seed=0, step=0)
        greedy, _, greedy_rows = evaluate(sampler, verifier, problems, RolloutConfig(), seed=0, step=0)
    texts = sampler.generate(problems, n, temperature=1.0, seed=0).texts
    by_hand = [sum(texts[i * n + j].strip() == p.answer for j in range(n)) for i, p in enumerate(problems)]
    assert rows.n_correct == by_hand and sum(by_hand) > 0 and rows.samples == [n] * 10
    assert rows.correct == [int(texts[i * n].strip() == p.answer) for i, p in enumerate(problems)]  # first answers
    assert metrics == pytest.approx(
        {
            "eval/accuracy": sum(rows.correct) / 10,
            "eval/length_mean": 1.0,
            "eval/n_problems": 10.0,
            "eval/verify_timeout_frac": 0.0,  # none of the 160 answers ran out of time
            **pass_at_k_metrics(n, by_hand),
        },
        abs=TOL,
    )
    assert samples[0]["completion"] == texts[0] and len(samples) == 2
    assert "eval/pass_at_1" not in greedy and greedy_rows.n_correct == []  # n = 1: today's eval, nothing added
