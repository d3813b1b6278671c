"""Per-problem eval rows: stable problem ids, what a resumed run keeps, the artifact's round trip."""

from __future__ import annotations

import hashlib

from workbench.tasks import Problem
from workbench.tracking.artifacts import decode_problem_rows, encode_problem_rows
from workbench.train.evaluate import ProblemResults, problem_ids


def test_problem_ids_depend_on_the_text_only_and_number_repeats():
    a, b = Problem("1+2=", "3"), Problem("2+2=", "4")
    digest = hashlib.sha1(b"1+2=\x003").hexdigest()[:12]
    assert problem_ids([a, b, a]) == [digest, problem_ids([b])[0], f"{digest}#1"]
    assert problem_ids([b, a]) == problem_ids([a, b])[::-1]  # the order of the set does not matter
    assert problem_ids([Problem("1+2=", "4")]) != problem_ids([a])  # another answer is another problem


def test_a_resume_at_step_k_keeps_only_the_evals_before_k():
    rows = ProblemResults(
        step=[0, 0, 2, 2, 4],
        problem_id=list("ababa"),
        correct=[0, 1, 1, 1, 0],
        length=[5, 6, 7, 8, 9],
        truncated=[0, 0, 0, 1, 0],
    )
    kept = rows.before(4)  # the eval at step 4 runs again after the resume
    assert kept.step == [0, 0, 2, 2] and kept.length == [5, 6, 7, 8] and len(rows) == 5


def test_the_artifact_round_trips_and_is_byte_stable():
    rows = ProblemResults(step=[0, 0], problem_id=["0a1b", "00ff#1"], correct=[1, 0], length=[3, 4], truncated=[0, 1])
    data = rows.to_csv_gz()
    assert data == encode_problem_rows(vars(rows))  # mtime=0: the same rows, the same bytes
    frame = decode_problem_rows(data)
    assert frame["problem_id"].tolist() == ["0a1b", "00ff#1"]  # ids stay strings ("00ff" is not a number)
    assert frame[["step", "correct", "length", "truncated"]].to_numpy().tolist() == [[0, 1, 3, 0], [0, 0, 4, 1]]
