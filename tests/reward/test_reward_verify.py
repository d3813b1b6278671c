"""AnswerVerifier: math-verify equivalences, bounded time on pathological input, recovery
from hung and crashed workers."""

from __future__ import annotations

import time

import pytest

from workbench.reward import AnswerVerifier, VerifyResult
from workbench.reward.testing import failing_scorer, misbehaving_scorer, slow_start_scorer

pytestmark = pytest.mark.timeout(60)


# --- math-verify equivalences --------------------------------------------------------------

EQUIVALENCES = [
    # (gold, completion, expected)
    ("\\frac{1}{2}", "\\boxed{0.5}", True),
    ("3", "x=3", True),
    ("3", "so \\boxed{x=3}", True),
    ("85", "\\boxed{85}", True),
    ("85", "The answer is 85.", True),
    ("-12", "Subtracting, we get \\boxed{-12}", True),
    ("3/4", "\\boxed{\\frac{3}{4}}", True),
    ("3/4", "It is 0.75", True),
    ("2", "\\boxed{\\frac{4}{2}}", True),
    ("1000", "\\boxed{1,000}", True),
    ("\\sqrt{2}", "\\boxed{\\sqrt 2}", True),
    ("85", "\\boxed{84}", False),
    ("3", "I am not sure how to solve this.", False),
    ("3", "\\boxed{}", False),
    ("-12", "\\boxed{12}", False),
]


@pytest.mark.parametrize(("gold", "completion", "expected"), EQUIVALENCES)
def test_math_verify_equivalence(verifier, gold, completion, expected):
    (result,) = verifier.score([completion], [gold])
    assert result.correct is expected
    assert result.timed_out is False


def test_batch_results_keep_input_order(verifier):
    golds = [g for g, _, _ in EQUIVALENCES]
    completions = [c for _, c, _ in EQUIVALENCES]
    results = verifier.score(completions, golds)
    assert [r.correct for r in results] == [e for _, _, e in EQUIVALENCES]
    assert all(isinstance(r, VerifyResult) for r in results)


def test_extracted_answer_is_reported(verifier):
    found, missing = verifier.score(["so \\boxed{85}", "no answer"], ["85", "85"])
    assert found.extracted == "85"
    assert missing.extracted is None and missing.correct is False


def test_only_the_tail_of_a_long_completion_is_checked(verifier):
    assert verifier.max_chars == 2000
    padding = "blah " * 1000  # 5000 chars
    early, late = verifier.score([f"\\boxed{{7}} {padding}", f"{padding} \\boxed{{7}}"], ["7", "7"])
    assert early.correct is False  # the answer fell outside the last 2000 characters
    assert late.correct is True


def test_empty_batch_and_argument_checks(verifier):
    assert verifier.score([], []) == []
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        verifier.score(["a", "b"], ["1"])
    for bad in (
        {"timeout_s": 0},
        {"timeout_s": float("nan")},
        {"workers": 0},
        {"max_chars": 0},
        {"memory_limit_mb": 0},
    ):
        with pytest.raises(ValueError):
            AnswerVerifier(**bad)


def test_non_string_inputs_do_not_crash(verifier):
    results = verifier.score([None, b"\\boxed{5}", b"\xff\xfe\\boxed{5}", 5], ["5", "5", "5", "5"])
    assert [r.correct for r in results] == [False, True, True, True]


# --- pathological completions --------------------------------------------------------------

PATHOLOGICAL = {
    "power tower": "9^9^9^9^9",
    "boxed power tower": "\\boxed{9^{9^{9^{9^{9}}}}}",
    "10,000-digit number": "The answer is " + "7" * 10_000,
    "boxed 10,000-digit number": "\\boxed{" + "1" * 10_000 + "}",
    "unbalanced frac": "\\frac{1}{",
    "unclosed boxed": "\\boxed{",
    "empty": "",
    "junk": "\udcff\udc80\x00\x01\x1b[31m\ufffd\u202e\ufeff" + "\x00" * 50 + "\\boxed{\udcff}",
    "huge integer in C": "\\boxed{\\gcd(9^{9^{9}}, 6)}",  # evaluated while parsing
    "huge integer beyond the memory cap": "\\boxed{\\gcd(3^{3^{21}}, 6)}",  # 4.4 GB uncapped
    "factorial tower": "\\boxed{100!!!}",
    "symbolic blow-up": "\\boxed{(x+y+z+1)^{40}}",  # pure-Python sympy: 5 s+ in-process
    "very long": "\\frac{" * 20_000 + "x" * 1_000_000,
}


def test_pathological_completions_score_zero_within_bound(verifier):
    names = list(PATHOLOGICAL)
    t0 = time.monotonic()
    results = verifier.score([PATHOLOGICAL[n] for n in names], ["3"] * len(names))
    elapsed = time.monotonic() - t0
    assert elapsed < 5.0, f"pathological batch took {elapsed:.1f}s"
    for name, r in zip(names, results, strict=True):
        assert r.correct is False, name
    by_name = dict(zip(names, results, strict=True))
    # astronomically large numbers are refused before math-verify evaluates them
    assert not by_name["power tower"].timed_out and not by_name["boxed power tower"].timed_out
    assert not by_name["factorial tower"].timed_out
    assert by_name["symbolic blow-up"].timed_out and by_name["huge integer in C"].timed_out
    assert not by_name["empty"].timed_out and by_name["empty"].extracted is None


def test_astronomical_answers_are_refused_fast_but_ordinary_powers_are_not(verifier):
    completions = ["\\boxed{9^{9^{9}}}", "\\boxed{2^{10}}", "\\boxed{10^{100}}", "\\boxed{2^{2^{3}}}", "\\boxed{5!}"]
    answers = ["3", "1024", "10^{100}", "256", "120"]
    t0 = time.monotonic()
    results = verifier.score(completions, answers)
    assert time.monotonic() - t0 < 0.75  # well under one soft timeout
    assert [(r.correct, r.timed_out) for r in results] == [(False, False)] + [(True, False)] * 4


def test_mixed_batch_scores_normal_items_correctly(verifier):
    normal = [("\\boxed{85}", "85", True), ("\\boxed{0.5}", "\\frac{1}{2}", True), ("\\boxed{4}", "5", False)]
    completions, answers, expected = [], [], []
    for i, bad in enumerate(PATHOLOGICAL.values()):
        c, a, e = normal[i % len(normal)]
        completions += [c, bad]
        answers += [a, "3"]
        expected += [e, False]
    t0 = time.monotonic()
    results = verifier.score(completions, answers)
    assert time.monotonic() - t0 < 10.0
    assert [r.correct for r in results] == expected


def test_gold_answers_in_their_own_delimiters(verifier):
    results = verifier.score(["\\boxed{85}", "\\boxed{85}"], ["$85$", "\\boxed{85}"])
    assert [r.correct for r in results] == [True, True]


# --- worker failures (deterministic, via the misbehaving test scorer) -----------------------


@pytest.fixture()
def flaky():
    with AnswerVerifier(timeout_s=0.5, workers=1, scorer=misbehaving_scorer) as v:
        v.score(["warm"], ["warm"])
        yield v


def test_hung_worker_is_killed_and_remaining_items_continue(flaky):
    completions = ["1", "HANG a", "2", "HANG b", "3"]
    answers = ["1", "x", "2", "x", "3"]
    t0 = time.monotonic()
    results = flaky.score(completions, answers)
    elapsed = time.monotonic() - t0
    assert [r.correct for r in results] == [True, False, True, False, True]
    assert [r.timed_out for r in results] == [False, True, False, True, False]
    assert flaky.restarts == 2
    assert elapsed < 5.0, f"took {elapsed:.1f}s for two 0.5 s timeouts"


def test_verifier_is_reusable_after_a_timeout(flaky):
    assert [r.timed_out for r in flaky.score(["HANG"], ["x"])] == [True]
    results = flaky.score(["a", "b", "c"], ["a", "x", "c"])
    assert [r.correct for r in results] == [True, False, True]
    assert flaky.restarts == 1


def test_slow_python_item_times_out_without_killing_the_worker(flaky):
    results = flaky.score(["a", "SLOW", "b"], ["a", "x", "b"])
    assert [(r.correct, r.timed_out) for r in results] == [(True, False), (False, True), (True, False)]
    assert flaky.restarts == 0  # the worker's own soft budget ended it


def test_crashed_worker_is_replaced(flaky):
    results = flaky.score(["a", "CRASH", "b", "RAISE", "c"], ["a", "x", "b", "x", "c"])
    assert [(r.correct, r.timed_out) for r in results] == [
        (True, False),
        (False, False),
        (True, False),
        (False, False),
        (True, False),
    ]
    assert flaky.restarts == 1


def test_several_workers_share_a_batch_with_failures():
    with AnswerVerifier(timeout_s=0.5, workers=2, scorer=misbehaving_scorer) as v:
        completions = [str(i) if i % 7 else "HANG" for i in range(40)]
        answers = [str(i) for i in range(40)]
        results = v.score(completions, answers)
    assert [r.correct for r in results] == [i % 7 != 0 for i in range(40)]
    assert [r.timed_out for r in results] == [i % 7 == 0 for i in range(40)]


def test_broken_scorer_fails_loudly_not_with_zero_rewards():
    with AnswerVerifier(timeout_s=0.5, scorer=failing_scorer) as v:
        with pytest.raises(RuntimeError, match="start-up check"):
            v.score(["a"], ["a"])


def test_a_slow_first_parse_is_not_a_failed_start_up_check():
    """The start-up check gets its own time limit: on a loaded machine math-verify's first parse (lazy
    imports) outlasted the 1 s per-item limit and failed whole runs of a study."""
    with AnswerVerifier(timeout_s=1.0, workers=1, scorer=slow_start_scorer) as v:
        assert [r.correct for r in v.score(["a", "b"], ["a", "c"])] == [True, False]


def test_closed_verifier_refuses_work():
    v = AnswerVerifier(scorer=misbehaving_scorer)
    v.close()
    v.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        v.score(["a"], ["a"])


# --- throughput -------------------------------------------------------------------------------


def test_common_case_throughput(verifier):
    """1000 ordinary items with one worker: ~1 s measured on a quiet 2-core machine.
    The bound is loose so a loaded CI machine does not flake; a per-item round trip or a
    lost gold cache would still blow it."""
    completions = [f"Adding the terms step by step gives \\boxed{{{i % 97}}}." for i in range(1000)]
    answers = [str(i % 97 if i % 4 else i % 97 + 1) for i in range(1000)]
    t0 = time.monotonic()
    results = verifier.score(completions, answers)
    elapsed = time.monotonic() - t0
    assert sum(r.correct for r in results) == 750
    assert elapsed < 10.0, f"1000 items took {elapsed:.1f}s"


def test_worker_that_died_while_idle_does_not_cost_an_item(flaky):
    (slot,) = flaky._slots
    slot.proc.kill()
    slot.proc.join(5)
    results = flaky.score(["a", "b"], ["a", "b"])
    assert [(r.correct, r.timed_out) for r in results] == [(True, False), (True, False)]


def test_duplicate_items_are_scored_once(flaky):
    completions = ["a", "HANG", "a", "HANG", "b"] * 20
    answers = ["a", "x", "a", "x", "c"] * 20
    t0 = time.monotonic()
    results = flaky.score(completions, answers)
    assert time.monotonic() - t0 < 3.0  # one 0.5 s timeout, not forty
    assert [r.correct for r in results] == [True, False, True, False, False] * 20
    assert [r.timed_out for r in results] == [False, True, False, True, False] * 20
    assert flaky.restarts == 1


@pytest.mark.parametrize("control", ["\x00", "\x01", "\x07", "\x08", "\x1b", "\x7f"])
def test_a_control_character_inside_an_answer_is_not_removed_before_verification(verifier, control):
    """`\\boxed{4<NUL>2}` is not 42: a control character must not vanish and join its neighbours."""
    broken, clean = verifier.score([f"\\boxed{{4{control}2}}", "\\boxed{42}"], ["42", "42"])
    assert broken.correct is False and clean.correct is True
