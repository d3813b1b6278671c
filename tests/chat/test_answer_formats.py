"""task.answer_format: where a completion's final answer is read, checked by math-verify in the real
worker processes. GSM8K answers with thousands separators and units, `#### 42` and `\\boxed{}`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.reward import AnswerVerifier
from workbench.reward._worker import ANSWER_SCORERS
from workbench.tasks import JsonlTask

GSM8K_FIXTURE = Path(__file__).parent / "data" / "gsm8k_mini.jsonl"

# (completion, gold answer, correct under auto, under gsm8k, under boxed)
CASES = [
    ("4 * 250 = 1000 plants.\n#### 1,000", "1000", True, True, False),
    ("#### 1000", "1,000", True, True, False),  # a gold answer with a separator
    ("He has 20 - 15 = 5 dollars left.\n#### $5", "5", True, True, False),
    ("#### 5 dollars", "5", True, True, False),  # a unit after the number
    # gold: a GSM8K solution (auto parses its last number, here the same)
    ("#### 10,000", "She pays 4 * 2500 = 10,000.\n#### 10,000", True, True, False),
    ("#### 42\n\nThen 7 more apples arrive.", "42", False, True, False),  # text after the answer line
    ("The answer is 42.", "42", True, False, False),  # no '####': auto reads the last number, gsm8k nothing
    ("#### 41", "42", False, False, False),
    ("so the total is \\boxed{1,000}", "1000", True, False, True),
    ("\\boxed{\\$5}", "5", True, False, True),
    ("\\boxed{42} and then 7", "42", True, False, True),  # auto prefers a boxed answer to a later number
    ("#### 42 \\boxed{41}", "42", False, True, False),  # each format reads its own place
    ("####42.", "42", False, True, False),  # math-verify alone extracts nothing from "####42."
    ("#### The answer is 42", "42", True, False, False),  # gsm8k: the word right after "####" only
]


@pytest.fixture(scope="module", params=["auto", "gsm8k", "boxed"])
def scored(request):
    with AnswerVerifier(timeout_s=2.0, scorer=ANSWER_SCORERS[request.param]) as verifier:
        results = verifier.score([c[0] for c in CASES], [c[1] for c in CASES])
    return request.param, results


def test_each_answer_format_reads_its_own_place(scored):
    fmt, results = scored
    column = {"auto": 2, "gsm8k": 3, "boxed": 4}[fmt]
    got = [r.correct for r in results]
    want = [case[column] for case in CASES]
    assert got == want, [(c[0], c[1]) for c, g, w in zip(CASES, got, want, strict=True) if g != w]
    assert not any(r.timed_out for r in results)


def test_gsm8k_lines_load_as_they_are(tmp_path):
    """GSM8K's own JSONL ({"question", "answer": "<solution> #### 72"}) loads; the gold answer keeps the
    solution, which the gsm8k scorer reads after '####'."""
    task = JsonlTask(path=str(GSM8K_FIXTURE), eval_path=str(GSM8K_FIXTURE))
    problems = task.eval_problems()
    rows = [json.loads(line) for line in GSM8K_FIXTURE.read_text().splitlines()]
    assert [p.prompt for p in problems] == [r["question"] for r in rows]
    assert all(p.answer.rsplit("####", 1)[1].strip() for p in problems)
    with AnswerVerifier(timeout_s=2.0, scorer=ANSWER_SCORERS["gsm8k"]) as verifier:
        finals = [f"Let me think.\n#### {p.answer.rsplit('####', 1)[1].strip()}" for p in problems]
        assert all(r.correct for r in verifier.score(finals, [p.answer for p in problems]))
        off_by_one = [int(p.answer.rsplit("####", 1)[1].replace(",", "")) + 1 for p in problems]
        wrong = [f"#### {n:,}" for n in off_by_one]
        assert not any(r.correct for r in verifier.score(wrong, [p.answer for p in problems]))
