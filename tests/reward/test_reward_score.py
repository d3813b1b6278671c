"""score_completions: correctness + weighted shaping terms, and config validation."""

from __future__ import annotations

import pytest
import torch

from workbench.reward import AnswerVerifier, RewardBatch, score_completions, validate_shaping
from workbench.reward.testing import misbehaving_scorer

pytestmark = pytest.mark.timeout(60)

COMPLETIONS = ["\\boxed{85}", "I think it is 84", "long... \\boxed{85}", "\\boxed{0.5}", "\\boxed{"]
ANSWERS = ["85", "85", "85", "\\frac{1}{2}", "\\frac{1}{2}"]
LENGTHS = [10, 20, 30, 8, 8]
TRUNCATED = [False, False, True, False, False]
GROUPS = [0, 0, 0, 1, 1]


def test_reward_is_correct_plus_weighted_terms(verifier):
    batch = score_completions(
        verifier,
        COMPLETIONS,
        ANSWERS,
        torch.tensor(LENGTHS),
        torch.tensor(TRUNCATED),
        torch.tensor(GROUPS),
        shaping=[
            ("format", 0.1, {}),
            ("overlong_soft", 2.0, {"max_length": 30, "cache_length": 20}),
            ("kimi_length", 0.5, {}),
        ],
    )
    assert isinstance(batch, RewardBatch)
    assert batch.correct.tolist() == [True, False, True, True, False]
    assert batch.timed_out.tolist() == [False] * 5
    assert list(batch.terms) == ["correct", "format", "overlong_soft", "kimi_length"]
    # hand-computed, weighted:
    expected_terms = {
        "correct": [1.0, 0.0, 1.0, 1.0, 0.0],
        "format": [0.1, 0.0, 0.1, 0.1, 0.0],
        # (10 - L) / 20, clamped to [-1, 0], times 2
        "overlong_soft": [0.0, -1.0, -2.0, 0.0, 0.0],
        # group 0 lambdas 0.5/0/-0.5 (the wrong one keeps min(0, 0) = 0); group 1 equal lengths
        "kimi_length": [0.25, 0.0, -0.25, 0.0, 0.0],
    }
    for name, values in expected_terms.items():
        torch.testing.assert_close(batch.terms[name], torch.tensor(values))
        assert batch.terms[name].dtype == torch.float32
    # torch's float32 defaults (rtol 1.3e-6, atol 1e-5) hold the analysis: each reward is a sum of ≤ 4
    # weighted terms ≤ 1.35, ≤ 8 roundings: 8·eps32·1.35 ≈ 1.3e-6 absolute
    torch.testing.assert_close(batch.reward, torch.tensor([1.35, -1.0, -1.15, 1.1, 0.0]))
    torch.testing.assert_close(batch.reward, sum(batch.terms.values()))
    assert batch.extracted[0] == "85" and batch.extracted[4] is None


def test_no_shaping_is_plain_accuracy_and_lists_are_accepted(verifier):
    batch = score_completions(verifier, COMPLETIONS, ANSWERS, LENGTHS, TRUNCATED, GROUPS)
    assert list(batch.terms) == ["correct"]
    assert batch.reward.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert batch.reward.dtype == torch.float32 and batch.correct.dtype == torch.bool


def test_empty_batch(verifier):
    batch = score_completions(verifier, [], [], [], [], [], shaping=[("format", 1.0, {})])
    assert batch.reward.shape == (0,) and batch.terms["format"].shape == (0,)


def test_timed_out_items_score_zero_and_are_flagged():
    with AnswerVerifier(timeout_s=0.5, scorer=misbehaving_scorer) as v:
        batch = score_completions(v, ["a", "HANG"], ["a", "b"], [1, 1], [False, False], [0, 0])
    assert batch.reward.tolist() == [1.0, 0.0]
    assert batch.timed_out.tolist() == [False, True]


class _NeverCalled:
    """A verifier stand-in: config errors must surface before any scoring."""

    def score(self, completions, answers):  # pragma: no cover - must not run
        raise AssertionError("verifier called despite an invalid shaping config")


@pytest.mark.parametrize(
    ("shaping", "match"),
    [
        ([("overlong", 1.0, {})], r"unknown reward shaper 'overlong'.*valid: format, kimi_length, overlong_soft"),
        ([("format", 1.0, {}), ("format", 0.5, {})], "listed twice"),
        ([("overlong_soft", 1.0, {"max_length": 10})], "cache_length"),
        ([("overlong_soft", 1.0, {"max_length": 10, "cache_length": 2, "L_max": 3})], "L_max"),
        ([("format", 1.0, {"bonus": 1.0})], "accepts no params"),
        ([("format", float("inf"), {})], "finite"),
        ([("format", "heavy", {})], "must be a number"),
        ([("format", 1.0)], "triples"),
    ],
)
def test_invalid_shaping_config_is_rejected_before_scoring(shaping, match):
    with pytest.raises(ValueError, match=match):
        score_completions(_NeverCalled(), ["a"], ["a"], [1], [False], [0], shaping=shaping)
    with pytest.raises(ValueError, match=match):
        validate_shaping(shaping)


def test_mismatched_sizes_are_rejected():
    with pytest.raises(ValueError, match="lengths has 1 entries for 2 completions"):
        score_completions(_NeverCalled(), ["a", "b"], ["a", "b"], [1], [False, False], [0, 0])
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        score_completions(_NeverCalled(), ["a", "b"], ["a"], [1, 1], [False, False], [0, 0])


def test_validate_shaping_normalises():
    assert validate_shaping([("format", 1, None), ["kimi_length", "0.5", {}]]) == [
        ("format", 1.0, {}),
        ("kimi_length", 0.5, {}),
    ]
