"""Reward shapers: hand-computed values, properties, and one contract every shaper passes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.reward.shaping import REWARD_SHAPERS, ShapingInput, has_boxed_answer

pytestmark = pytest.mark.timeout(60)


def make_input(lengths, correct=None, group_ids=None, completions=None, truncated=None) -> ShapingInput:
    b = len(lengths)
    return ShapingInput(
        completions=completions if completions is not None else ["x"] * b,
        lengths=torch.tensor(lengths, dtype=torch.int64),
        correct=torch.tensor(correct if correct is not None else [True] * b, dtype=torch.bool),
        group_ids=torch.tensor(group_ids if group_ids is not None else [0] * b, dtype=torch.int64),
        truncated=torch.tensor(truncated if truncated is not None else [False] * b, dtype=torch.bool),
    )


# --- format ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is \\boxed{85}", True),
        ("\\boxed{\\frac{1}{2}}", True),
        ("\\boxed{\\{1, 2\\}}", True),  # escaped braces are literal
        ("} stray close, then \\boxed{3}", True),
        ("\\boxed {3}", True),
        ("\\boxed{4} then \\boxed{", True),  # one well-formed box is enough
        ("\\boxed{", False),
        ("\\boxed{}", False),
        ("\\boxed{   }", False),
        ("\\boxed{\\frac{1}{2}", False),  # unbalanced
        ("\\boxed{\\}", False),  # the only closer is escaped
        ("the answer is 85", False),
        ("", False),
        ("\\fbox{3}", False),
    ],
)
def test_has_boxed_answer(text, expected):
    assert has_boxed_answer(text) is expected


def test_format_values():
    inp = make_input([1, 1, 1], completions=["\\boxed{1}", "1", "\\boxed{"])
    out = REWARD_SHAPERS.get("format")(inp)
    assert out.dtype == torch.float32
    assert out.tolist() == [1.0, 0.0, 0.0]


def test_has_boxed_answer_on_adversarial_nesting_is_fast():
    import time

    t0 = time.monotonic()
    # innermost box is empty; the one around it holds "\\boxed{}", which is non-blank
    assert has_boxed_answer("\\boxed{" * 50_000 + "}" * 2) is True
    assert has_boxed_answer("\\boxed{" * 50_000 + "}") is False
    assert has_boxed_answer("\\boxed{" * 50_000) is False
    assert time.monotonic() - t0 < 2.0  # linear scan; a rescan per opener would take minutes


# --- overlong_soft (DAPO Eq. 13) -----------------------------------------------------------


def test_overlong_soft_hand_computed():
    # L_max = 10, L_cache = 4: free up to 6, then -1/4 per token, -1 from 10 on.
    inp = make_input([0, 5, 6, 7, 8, 9, 10, 11, 100])
    out = REWARD_SHAPERS.get("overlong_soft")(inp, max_length=10, cache_length=4)
    assert out.dtype == torch.float32
    assert out.tolist() == [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]


def test_overlong_soft_cache_equal_to_max():
    out = REWARD_SHAPERS.get("overlong_soft")(make_input([0, 2, 4, 5]), max_length=4, cache_length=4)
    assert out.tolist() == [0.0, -0.5, -1.0, -1.0]


@pytest.mark.parametrize(("max_length", "cache_length"), [(10, 0), (10, 11), (10, -1)])
def test_overlong_soft_rejects_bad_params(max_length, cache_length):
    with pytest.raises(ValueError, match="cache_length"):
        REWARD_SHAPERS.get("overlong_soft")(make_input([1]), max_length=max_length, cache_length=cache_length)


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5000), min_size=1, max_size=30),
    max_length=st.integers(1, 4096),
    cache_frac=st.floats(0.01, 1.0),
)
def test_overlong_soft_is_bounded_and_non_increasing(lengths, max_length, cache_frac):
    cache_length = max(1, int(max_length * cache_frac))
    lengths = sorted(lengths)
    out = REWARD_SHAPERS.get("overlong_soft")(make_input(lengths), max_length=max_length, cache_length=cache_length)
    assert ((out <= 0) & (out >= -1)).all()
    assert (out[1:] <= out[:-1]).all()
    for n, v in zip(lengths, out.tolist(), strict=True):
        if n <= max_length - cache_length:
            assert v == 0.0
        if n >= max_length:
            assert v == -1.0


# --- kimi_length (Kimi k1.5 §2.3.3) --------------------------------------------------------


def test_kimi_length_hand_computed():
    # group 7: lengths 10/20/30 -> lambda 0.5/0/-0.5; group 3: both wrong, 10/30 -> lambda 0.5/-0.5;
    # group 5: equal lengths -> 0; group 9: a single sample -> 0. Ids interleaved on purpose.
    lengths = [10, 10, 20, 30, 30, 5, 5, 42]
    correct = [True, False, True, False, False, True, False, True]
    group_ids = [7, 3, 7, 7, 3, 5, 5, 9]
    out = REWARD_SHAPERS.get("kimi_length")(make_input(lengths, correct, group_ids))
    assert out.dtype == torch.float32
    assert out.tolist() == [0.5, 0.0, 0.0, -0.5, -0.5, 0.0, 0.0, 0.0]


def test_kimi_length_correct_long_answer_is_penalised():
    out = REWARD_SHAPERS.get("kimi_length")(make_input([10, 15, 30], [True, True, True]))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.25, -0.5]))  # exact: integer lengths, quotients 0, 1/4, 1


@settings(max_examples=50, deadline=None)
@given(data=st.lists(st.tuples(st.integers(1, 2000), st.booleans(), st.integers(0, 4)), min_size=1, max_size=40))
def test_kimi_length_properties(data):
    lengths, correct, groups = map(list, zip(*data, strict=True))
    out = REWARD_SHAPERS.get("kimi_length")(make_input(lengths, correct, groups))
    assert ((out >= -0.5) & (out <= 0.5)).all()
    assert (out[~torch.tensor(correct)] <= 0).all()
    for g in set(groups):
        idx = [i for i, gi in enumerate(groups) if gi == g]
        ls = [lengths[i] for i in idx]
        if max(ls) == min(ls):
            assert all(out[i] == 0 for i in idx)
        else:  # the group's shortest correct answer gets the full +0.5
            for i in idx:
                if correct[i] and lengths[i] == min(ls):
                    assert out[i] == 0.5


# --- contract: every registered shaper -----------------------------------------------------

EXAMPLE_PARAMS = {"overlong_soft": {"max_length": 32, "cache_length": 8}}


def test_builtin_shapers_are_registered():
    assert {"format", "overlong_soft", "kimi_length"} <= set(REWARD_SHAPERS.names())


@pytest.mark.parametrize("name", REWARD_SHAPERS.names())
def test_shaper_contract(name):
    fn = REWARD_SHAPERS.get(name)
    assert fn.__doc__ and any(year in fn.__doc__ for year in ("2024", "2025", "2026")), "docstring must cite a paper"
    inp = make_input(
        [3, 40, 17, 17, 9, 25],
        correct=[True, False, True, True, False, False],
        group_ids=[0, 0, 0, 1, 1, 1],
        completions=["\\boxed{1}", "no", "\\boxed{2}", "x", "\\boxed{", "\\boxed{3}"],
        truncated=[False, True, False, False, False, False],
    )
    before = {k: getattr(inp, k).clone() for k in ("lengths", "correct", "group_ids", "truncated")}
    out = fn(inp, **EXAMPLE_PARAMS.get(name, {}))
    assert isinstance(out, torch.Tensor) and out.shape == (6,) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, fn(inp, **EXAMPLE_PARAMS.get(name, {})))  # pure
    for k, v in before.items():
        assert torch.equal(getattr(inp, k), v), f"{name} mutated {k}"
    empty = fn(make_input([]), **EXAMPLE_PARAMS.get(name, {}))
    assert empty.shape == (0,)
    with pytest.raises(TypeError):
        fn(inp, not_a_param=1, **EXAMPLE_PARAMS.get(name, {}))


def test_unknown_shaper_lists_valid_names():
    with pytest.raises(ValueError, match="valid: .*format.*kimi_length.*overlong_soft"):
        REWARD_SHAPERS.get("overlong")


def test_shaping_input_checks_shapes():
    with pytest.raises(ValueError, match="lengths"):
        ShapingInput(
            completions=["a", "b"],
            lengths=torch.tensor([1]),
            correct=torch.tensor([True, False]),
            group_ids=torch.tensor([0, 0]),
            truncated=torch.tensor([False, False]),
        )
