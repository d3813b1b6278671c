"""Spurious-reward controls (reward.control): each replaces the correctness term, the verifier still judges.

Real math-verify throughout (the session's verifier fixture). Values are exact (0/1 or the constant), so
comparisons are exact; the random control's rate is checked against a binomial bound stated in its test.
"""

from __future__ import annotations

import math

import pytest
import torch

from workbench.config import RewardConfig, RunConfig
from workbench.reward import score_completions
from workbench.reward.controls import REWARD_CONTROLS, validate_control, wrong_label

pytestmark = pytest.mark.timeout(60)

# gold 12 everywhere: right and boxed | right, no box | 13 (= 12 + 1) boxed | 13 in words | no answer at all
COMPLETIONS = ["so \\boxed{12}", "#### 12", "\\boxed{13}", "it is 13", "no idea"]
ANSWERS = ["12"] * 5


def score(verifier, control=None, seed=0, shaping=()):
    n = len(COMPLETIONS)
    return score_completions(
        verifier,
        COMPLETIONS,
        ANSWERS,
        torch.full((n,), 5),
        torch.zeros(n, dtype=torch.bool),
        torch.zeros(n, dtype=torch.long),
        shaping=shaping,
        control=control,
        seed=seed,
    )


def test_the_four_controls_are_registered():
    assert {"random", "format_only", "incorrect_label", "constant"} <= set(REWARD_CONTROLS)


def test_without_a_control_the_reward_is_correctness(verifier):
    batch = score(verifier)
    assert batch.correct.tolist() == [True, True, False, False, False]
    assert batch.reward.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0] and list(batch.terms) == ["correct"]


def test_constant_pays_everyone_and_the_verifier_still_judges(verifier):
    batch = score(verifier, ("constant", {"value": 0.5}))
    assert batch.reward.tolist() == [0.5] * 5 and list(batch.terms) == ["control"]
    assert batch.correct.tolist() == [True, True, False, False, False]  # accuracy stays true correctness


def test_format_only_pays_a_stated_answer_right_or_wrong(verifier):
    # math-verify reads an answer from the first four (12, 12, 13, 13); "no idea" has none
    assert score(verifier, ("format_only", {})).reward.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    # the paper's rule: a non-empty \boxed{}
    assert score(verifier, ("format_only", {"boxed": True})).reward.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_incorrect_label_pays_the_wrong_answer_only(verifier):
    assert wrong_label("12", 1) == "13" and wrong_label("1,000", -2) == "998" and wrong_label("-3", 1) == "-2"
    batch = score(verifier, ("incorrect_label", {}))
    assert batch.reward.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]  # 13 is paid, the right 12 is not
    assert batch.correct.tolist() == [True, True, False, False, False]
    with pytest.raises(ValueError, match="numeric gold answers"):
        score_completions(verifier, ["x"], ["\\frac{1}{2}"], [1], [False], [0], control=("incorrect_label", {}))


def test_random_is_seeded_by_the_batch_and_has_its_rate(verifier):
    first, again = (score(verifier, ("random", {"p": 0.5}), seed=7).reward for _ in range(2))
    assert torch.equal(first, again)  # the same run and step draw the same rewards (a resume too)
    assert set(first.tolist()) <= {0.0, 1.0}
    assert score(verifier, ("random", {"p": 0.0})).reward.tolist() == [0.0] * 5
    assert score(verifier, ("random", {"p": 1.0})).reward.tolist() == [1.0] * 5
    # the rate over many completions: 4000 Bernoulli(0.3) draws have sd sqrt(0.3·0.7/4000) = 0.0072;
    # 5 sd = 0.036 bounds a correct draw's deviation (a false failure has probability < 1e-6)
    n = 4000
    from workbench.reward.controls import ControlInput, random_reward

    inp = ControlInput(
        completions=[""] * n,
        answers=["1"] * n,
        correct=torch.zeros(n, dtype=torch.bool),
        extracted=[None] * n,
        seed=3,
        judge=lambda texts, labels: torch.zeros(len(texts)),
    )
    assert abs(float(random_reward(inp, p=0.3).mean()) - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n)
    other = ControlInput(**(vars(inp) | {"seed": 4}))
    assert not torch.equal(random_reward(inp), random_reward(other))  # another run or step: other draws


def test_a_control_adds_to_the_shaping_terms(verifier):
    batch = score(verifier, ("constant", {"value": 1.0}), shaping=[("format", 0.5, {})])
    assert batch.reward.tolist() == [1.5, 1.0, 1.5, 1.0, 1.0] and list(batch.terms) == ["control", "format"]


def test_config_validates_the_control_and_keeps_run_keys():
    with pytest.raises(ValueError, match="unknown reward control"):
        RewardConfig(control="randm")
    with pytest.raises(ValueError, match="bad params for reward control 'random'"):
        RewardConfig(control="random", control_params={"q": 0.1})
    with pytest.raises(ValueError, match="needs reward.control"):
        RewardConfig(control_params={"p": 0.1})
    validate_control("constant", {"value": 2.0})
    base = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    assert base.reward.control_spec() is None
    assert (
        RunConfig.model_validate({"model": {"builtin": "tiny"}, "reward": {"control": None}}).run_key()
        == base.run_key()
    )
    random_arm = RunConfig.model_validate({"model": {"builtin": "tiny"}, "reward": {"control": "random"}})
    assert random_arm.run_key() != base.run_key() and random_arm.reward.control_spec() == ("random", {})
