"""A study run off a terminal (stdout redirected to a file, as under nohup or in CI) prints plain progress
lines while it runs: run, step/total, reward, last eval, ETA."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from tests.execution_helpers import write_study
from workbench.execution.study_progress import StudyProgress

LINE = re.compile(
    r"^\d\d:\d\d:\d\d progress (?P<run>\S+) step (?P<step>\d+)/(?P<total>\d+) "
    r"reward -?\d+\.\d\d acc \d\.\d\d(?: eval (?P<eval>\d\.\d\d)@(?P<at>\d+))? "
    r"\| study \d+/\d+ ETA (?:-:--|\d+:\d\d(?::\d\d)?)$"
)


@pytest.mark.slow  # trains two micro runs in a subprocess
def test_study_with_stdout_to_a_file_prints_plain_progress_lines(tmp_path):
    study = write_study(
        tmp_path / "study.yaml",
        "plain-progress",
        steps=4,
        seeds=(0,),
        variants={"a": {}, "b": {"learner": {"lr": 2.0e-4}}},
    )
    log = tmp_path / "log.txt"
    with log.open("w") as out:  # a file, not a terminal
        result = subprocess.run(
            [sys.executable, "-m", "workbench.cli.main", "run", str(study), "--progress-every", "0"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            env=os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
        )
    text = log.read_text()
    assert result.returncode == 0, text
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    for run in ("a/seed=0", "b/seed=0"):
        steps = [int(m["step"]) for m in lines if m["run"] == run]
        assert steps and set(range(1, 5)) <= set(steps), (run, text)  # every step (interval 0), whole
        assert all(int(m["total"]) == 4 for m in lines if m["run"] == run)
        evals = {int(m["at"]) for m in lines if m["run"] == run and m["eval"]}
        assert evals == {0}, text  # eval_every=4: the step-0 eval, carried on the later lines
    assert re.search(r"^\d\d:\d\d:\d\d start a/seed=0 \(4 steps\)", text, re.MULTILINE)
    assert re.search(r"^\d\d:\d\d:\d\d FINISHED a/seed=0 ", text, re.MULTILINE)
    assert "\x1b[" not in text  # no terminal control codes in a log file


def test_periodic_lines_wait_for_the_interval_but_evals_print_at_once():
    out = io.StringIO()
    bar = StudyProgress("s", total=1, console=Console(file=out), plain_every=3600)
    with bar:
        bar.run_started("a/seed=0", 10)
        bar.run_step("a/seed=0", 0, {"reward/mean": 0.5, "accuracy/train": 0.25})  # before the interval: silent
        bar.run_step("a/seed=0", 1, {"reward/mean": 0.5, "accuracy/train": 0.25, "eval/accuracy": 0.75})
        bar.run_step("a/seed=0", 2, {"reward/mean": 0.5, "accuracy/train": 0.25})
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 1)[1].split(" |")[0] for line in lines] == [
        "start a/seed=0 (10 steps)",
        "progress a/seed=0 step 2/10 reward 0.50 acc 0.25 eval 0.75@1",
    ]
    assert bar.plain


def test_a_terminal_gets_the_live_bar_and_no_plain_lines():
    out = io.StringIO()
    bar = StudyProgress("s", total=1, console=Console(file=out, force_terminal=True), plain_every=0)
    assert not bar.plain
    with bar:
        bar.run_started("a/seed=0", 2)
        bar.run_step("a/seed=0", 0, {"reward/mean": 0.5, "eval/accuracy": 0.5})
    assert "progress a/seed=0" not in out.getvalue()


def test_the_finished_line_prints_the_final_eval_accuracy_as_run_and_compare_define_it():
    """#53: a newcomer saw 0.43 on the FINISHED line (the last eval), 0.388 in `run`'s table and another
    figure in the README for one run. The line now prints "eval final" with the table's definition: the
    mean of the last 3 evals after step 0 — here (0.40 + 0.45 + 0.50) / 3 = 0.450, not the last 0.50
    and not counting step 0's 0.10."""
    from workbench.metrics.final import final_eval_value

    out = io.StringIO()
    bar = StudyProgress("s", total=1, console=Console(file=out), plain_every=3600)
    evals = {0: 0.10, 2: 0.30, 4: 0.40, 6: 0.45, 8: 0.50}
    with bar:
        bar.run_started("a/seed=0", 8)
        for step in range(9):
            bar.run_step(
                "a/seed=0", step, {"reward/mean": 0.5} | ({"eval/accuracy": evals[step]} if step in evals else {})
            )
        bar.run_ended("a/seed=0", "FINISHED", "health ok")
    (finished,) = [line for line in out.getvalue().splitlines() if " FINISHED " in line]
    assert " eval final 0.450 health ok " in finished, finished
    assert final_eval_value(list(evals), list(evals.values())) == pytest.approx(0.45)  # the same function
