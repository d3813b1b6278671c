"""Reflection words (oat-zero's keyword counter): hand-computed rates on a decoded batch. Rates are ratios of
small integers, compared exactly (Python floats divide those exactly enough that == holds for the same ratio)."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.metrics.catalogue import BY_NAME, unlogged_by_config
from workbench.metrics.reflection import OAT_ZERO_KEYWORDS, REFLECTION_METRICS, reflection_metrics
from workbench.train.step import reflection_words

BATCH = [  # (decoded completion, judged correct)
    ("12 + 5 = 17. Let me recheck: 12 + 5 = 17. #### 17", True),  # "recheck"
    ("The answer is 4. #### 4", True),  # none
    ("Hmm, I should RE-EXAMINE this. Try Again: 9. #### 9", False),  # "re-examine", "try again" (one response)
    ("Rethinking the problem: 6 * 7 = 42. #### 42", True),  # "rethink" inside "rethinking" (substring)
    ("I will double-check... no, #### 3", False),  # "double-check" is not among the 11
    ("Let me go over the steps again. #### 10", False),  # "go over the steps"
]


def test_the_default_is_oat_zeros_eleven_keywords():
    assert len(OAT_ZERO_KEYWORDS) == 11 == len(set(OAT_ZERO_KEYWORDS))
    assert {"recheck", "re-examine", "go over the steps", "try again"} <= set(OAT_ZERO_KEYWORDS)
    assert "double-check" not in OAT_ZERO_KEYWORDS  # understand-r1-zero's longer list has it; oat-zero's does not


def test_hand_computed_rates_on_a_decoded_batch():
    texts, correct = zip(*BATCH, strict=True)
    # reflecting: #0, #2, #3, #5 → 4 of 6; correct ones #0, #1, #3 → 2 of 3; incorrect #2, #4, #5 → 2 of 3
    assert reflection_metrics(texts, correct, OAT_ZERO_KEYWORDS) == {
        "behaviour/reflection_rate": 4 / 6,
        "behaviour/reflection_rate_correct": 2 / 3,
        "behaviour/reflection_rate_incorrect": 2 / 3,
    }
    # a custom list (any case): only "double-check" → #4 alone; no correct response holds it
    assert reflection_metrics(texts, correct, ["Double-Check"], prefix="eval") == {
        "eval/reflection_rate": 1 / 6,
        "eval/reflection_rate_correct": 0.0,
        "eval/reflection_rate_incorrect": 1 / 3,
    }
    # a side with no response is absent, not 0
    assert reflection_metrics(texts[:2], correct[:2], OAT_ZERO_KEYWORDS) == {
        "behaviour/reflection_rate": 0.5,
        "behaviour/reflection_rate_correct": 0.5,
    }
    assert reflection_metrics([], [], OAT_ZERO_KEYWORDS) == {}
    with pytest.raises(ValueError, match="2 texts but 1"):
        reflection_metrics(texts[:2], correct[:1], OAT_ZERO_KEYWORDS)


def test_not_applicable_on_the_tiny_model_and_catalogued():
    tiny = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    chat = RunConfig.model_validate({"model": {"path": "/models/qwen"}})
    assert reflection_words(tiny) == () and reflection_words(chat) == OAT_ZERO_KEYWORDS
    own = RunConfig.model_validate({"model": {"path": "/models/qwen"}, "rollout": {"reflection_words": ["wait"]}})
    assert (
        reflection_words(own) == ("wait",)
        and tiny.run_key()
        == RunConfig.model_validate({"model": {"builtin": "tiny"}, "rollout": {"reflection_words": None}}).run_key()
    )
    names = [n for group in REFLECTION_METRICS.values() for n in group]
    assert all(BY_NAME[n].unit == "fraction" for n in names)
    assert set(names) <= set(unlogged_by_config(tiny.flat())) and not set(names) & set(unlogged_by_config(chat.flat()))
    assert "not applicable" in unlogged_by_config(tiny.flat())["behaviour/reflection_rate"]
