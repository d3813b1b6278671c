"""The notebook API (issue 32, finding 5) on the real micro study: ``from workbench import load_study``
gives the frames and the very tables the CLI prints; docs/notebook.md's example runs; and `run`'s
end-of-run table and `compare` agree on each run's final eval accuracy (finding 3)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.viz.micro_study import STUDY, build_micro_study, copy_store
from workbench.cli.main import app

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parent.parent / "docs" / "notebook.md"
DOC_STUDY = '"grpo-vs-dr-grpo"'  # the study the doc's example names; the test runs it on the micro study


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    return build_micro_study(tmp_path_factory)


@pytest.fixture
def in_study(study_dir, monkeypatch):
    monkeypatch.chdir(study_dir)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return study_dir


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_the_documented_example_runs(in_study, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert code.count(DOC_STUDY) == 1
    exec(compile(code.replace(DOC_STUDY, repr(STUDY)), str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "dr_grpo vs grpo: " in printed and "mean of the last 3 evals after step 0" in printed


def test_load_study_gives_the_tables_the_cli_prints(in_study):
    from workbench import load_study

    study = load_study(STUDY)
    assert set(study.runs["variant"]) == {"grpo", "dr_grpo"} and len(study.runs) == 4
    assert {"run_id", "variant", "seed", "step", "metric", "value"} <= set(study.history.columns)
    table = study.compare()
    md = invoke("compare", STUDY, "--no-log", "--format", "md")
    assert md.exit_code == 0, md.output
    assert md.stdout.splitlines()[0] == table.headlines()[0].splitlines()[0]  # the CLI's first line is the headline
    assert md.stdout == table.to_markdown()
    cli = json.loads(invoke("compare", STUDY, "--no-log", "--format", "json").stdout)
    assert cli["rows"] == json.loads(table.to_json())["rows"]
    health = study.health()
    assert set(health["run_id"]) == set(study.runs["run_id"]) and health["state"].isin(["warn", "fail"]).any()


def test_bad_input_is_a_value_error_with_the_cli_line(in_study):
    from workbench import load_study

    with pytest.raises(ValueError, match="no-such-study"):
        load_study("no-such-study")
    with pytest.raises(ValueError, match="baseline 'ppo' is not a variant"):
        load_study(STUDY).compare(baseline="ppo")


NOTEBOOK_CALLS = """
import sys
from workbench import load_study
study = load_study(sys.argv[1])
study.summary(); study.compare().headlines(); study.health(); study.health(recheck=True)
try:
    study.compare(baseline="ppo")
except ValueError:
    pass
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("typer", "rich", "click")
                      or m == "workbench.cli" or m.startswith("workbench.cli."))))
"""


def test_the_notebook_and_its_calls_load_no_terminal_code_path(in_study):
    """Issue 45: the notebook is a caller of workbench.analysis, as the CLI is: loading a study, its
    summary, comparison and health (and a bad baseline) import no typer, rich or workbench.cli."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK_CALLS, STUDY],
        capture_output=True,
        text=True,
        cwd=in_study,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"the notebook loaded {done.stdout.strip()}"


def plant_evals(db: Path) -> None:
    """Give every run distinct eval accuracies, the step-0 one far from the rest (the micro model
    scores 0 everywhere, which any definition of "final" would agree on): at step s of run i,
    0.9 at step 0, else s/10 + i/100."""
    with sqlite3.connect(db) as con:
        run_ids = sorted({r for (r,) in con.execute("SELECT run_uuid FROM metrics WHERE key = 'eval/accuracy'")})
        for i, run_id in enumerate(run_ids):
            for table in ("metrics", "latest_metrics"):
                con.execute(
                    f"UPDATE {table} SET value = CASE WHEN step = 0 THEN 0.9 ELSE step / 10.0 + ? END "
                    "WHERE key = 'eval/accuracy' AND run_uuid = ?",
                    (i / 100, run_id),
                )


def test_run_and_compare_print_the_same_final_for_each_run(study_dir, tmp_path, monkeypatch):
    """Running the finished study again skips every run and prints its summary table, read back from
    MLflow: its "eval final" per run is compare's final_eval_accuracy (3 decimals printed)."""
    from workbench import load_study

    home = tmp_path / "home"
    copy_store(study_dir, home)  # `run` writes to the store (parent run state, views): a private copy
    plant_evals(home / "mlflow.db")
    shutil.copy(study_dir / "study.yaml", home / "study.yaml")
    monkeypatch.chdir(home)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    result = invoke("run", "study.yaml")
    assert result.exit_code == 0, result.output
    assert "eval final: mean of the last 3 evals after step 0" in result.stdout
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in result.stdout.splitlines() if "SKIPPED" in line]
    printed = {r[0]: r[4] for r in rows}  # run, status, steps, eval first, eval final, Δ, health
    study = load_study(STUDY)
    summary = study.summary(["final_eval_accuracy"])
    labels = study.runs.set_index("run_id")["run_name"]
    expected = {labels[r]: f"{v:.3f}" for r, v in zip(summary["run_id"], summary["final_eval_accuracy"], strict=True)}
    # evals at steps 0, 2, 3 (micro config): final = mean of steps 2 and 3 = 0.25 + i/100, never 0.9's pull
    assert sorted(expected.values()) == ["0.250", "0.260", "0.270", "0.280"]
    assert printed == expected, result.stdout
    assert {r[3] for r in rows} == {"0.900"}  # eval first: the step-0 eval, shown beside it
