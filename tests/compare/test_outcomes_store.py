"""`workbench compare` on a real MLflow store whose runs did not all finish (issue 12, finding 1).

Runs are written through the project's own `RunTracker` with `workbench.execution.run.run_tags`, their run
label as run name, statuses and health tags exactly as `workbench.execution.run.execute_run` closes them
(a crash: FAILED; a health stop: FINISHED with `workbench.stopped_early=true`,
`workbench.health=fail`, `workbench.health_reasons=rule@step`); only training is replaced by
planted eval curves:

* grpo (baseline): 6 seeds, eval accuracy 0.60, reaches 0.5 at step 20;
* crashy: 3 seeds crash at step 10 (FAILED, accuracy 0.10 logged), 3 finish at 0.90;
* collapsed: all 6 stopped by entropy_collapse at step 20, their truncated curves at 0.95;
* slow: reaches 0.5 at step 10 in 2 seeds, never in 4 (stays at 0.30);
* strong: 6 seeds at 0.90 throughout: a true large effect.

None but strong may be called better; strong must be; every output counts the runs per outcome.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app
from workbench.config import RunConfig

STUDY = "outcomes"
SEEDS = range(6)
METRICS = ("final_eval_accuracy", "steps_to_threshold")


def curve(arm: str, seed: int, rng: np.random.Generator) -> tuple[list[tuple[int, float]], str, bool]:
    """``(evals, status, stopped)`` of one run."""
    noise = lambda: float(rng.normal(0.0, 0.01))  # noqa: E731 - a one-line helper, named where it is used
    if arm == "grpo":
        return [(0, 0.1), (20, 0.6 + noise()), (40, 0.6 + noise()), (60, 0.6 + noise())], "FINISHED", False
    if arm == "crashy" and seed < 3:
        return [(0, 0.1), (10, 0.1)], "FAILED", False
    if arm in ("crashy", "strong"):
        return [(0, 0.9 + noise()), (20, 0.9 + noise()), (40, 0.9 + noise()), (60, 0.9 + noise())], "FINISHED", False
    if arm == "collapsed":
        return [(0, 0.1), (10, 0.95 + noise()), (20, 0.95 + noise())], "FINISHED", True
    reached = seed < 2  # slow
    return (
        [
            (0, 0.1),
            (10, 0.6 if reached else 0.3),
            (40, 0.6 if reached else 0.3),
            (60, 0.6 + noise() if reached else 0.3 + noise()),
        ],
        "FINISHED",
        False,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from workbench.execution.run import run_tags
    from workbench.tracking.writer import RunTracker

    root = tmp_path_factory.mktemp("outcomes")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    parent = RunTracker(uri, STUDY, f"study:{STUDY}", {"workbench.role": "study", "workbench.study": STUDY})
    parent.start()
    rng = np.random.default_rng(3)
    for arm in ("grpo", "crashy", "collapsed", "slow", "strong"):
        for seed in SEEDS:
            cfg = RunConfig.model_validate(micro_run_config() | {"seed": seed})
            evals, status, stopped = curve(arm, seed, rng)
            health = {
                "workbench.health": "fail" if stopped else "ok",
                "workbench.health_reasons": "entropy_collapse@20" if stopped else "",
            }
            run = RunTracker(
                uri, STUDY, f"{arm}/seed={seed}", run_tags(STUDY, arm, cfg) | health, parent_run_id=parent.run_id
            )
            run.start()
            for step, acc in evals:
                run.log_metrics({"eval/accuracy": acc}, step)
            if status == "FINISHED":
                run.set_tags(
                    {
                        "workbench.stopped_early": str(stopped).lower(),
                        "workbench.stop_reason": "health: entropy_collapse@20" if stopped else "",
                    }
                )
            run.finish(status)
    parent.finish("FINISHED")
    return uri


def compare(uri: str, *args: str) -> str:
    result = CliRunner().invoke(
        app,
        ["compare", STUDY, "--tracking-uri", uri, "--no-log", *(a for m in METRICS for a in ("-m", m)), *args],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_incomplete_runs_are_never_called_better_and_a_true_effect_is(store):
    rows = {(r["metric"], r["variant"]): r for r in json.loads(compare(store, "--format", "json"))["rows"]}
    acc, steps = METRICS
    assert rows[acc, "strong"]["verdict"] == "better"
    assert rows[acc, "crashy"]["verdict"] == "withheld: 3/6 runs failed"
    assert rows[acc, "collapsed"]["verdict"] == "withheld: all 6 runs stopped early by entropy_collapse"
    assert "never reached 0.5 in 4/6 runs" in rows[steps, "slow"]["verdict"]
    for arm in ("crashy", "collapsed", "slow"):
        for metric in METRICS:
            assert rows[metric, arm]["verdict"] != "better", (metric, arm)
    counts = {
        a: tuple(rows[acc, a][f"n_{o}"] for o in ("runs", "finished", "failed", "stopped"))
        for a in ("grpo", "crashy", "collapsed", "strong")
    }
    assert counts == {"grpo": (6, 6, 0, 0), "crashy": (6, 3, 3, 0), "collapsed": (6, 0, 0, 6), "strong": (6, 6, 0, 0)}
    assert rows[steps, "slow"]["n_censored"] == 4


def test_every_output_counts_runs_per_outcome(store, tmp_path):
    csv = compare(store, "--format", "csv")
    header = csv.splitlines()[0].split(",")
    assert {"n_runs", "n_finished", "n_failed", "n_stopped", "n_censored", "n_missing"} <= set(header)
    md = compare(store, "--format", "md")
    assert "| 6: 3 finished, 3 failed |" in md and "| 6: 6 stopped |" in md and "| 6: 2 finished, 4 censored |" in md
    out = tmp_path / "r.html"
    plain = compare(store, "--out", str(out))  # not a terminal: plain tab-separated lines
    assert "crashy\t6: 3 finished, 3 failed\t" in plain
    assert re.search(r"collapsed\t6: 6 stopped\t.*withheld: all 6 runs stopped early by entropy_collapse", plain)
    html = out.read_text()
    assert "6: 3 finished, 3 failed" in html and "6: 2 finished, 4 censored" in html
    assert "finished / failed / stopped early" in html and ">3 / 3 / 0<" in html and ">0 / 0 / 6<" in html


def _all_cells(table) -> list[str]:
    from workbench.cli.report import _table_cells

    return [c for m in table.metrics for c in [m, *sum(_table_cells(table, m)[1], [])]]


@pytest.mark.parametrize("width", [80, 250])
def test_terminal_output_keeps_every_name_and_number_whole(store, width):
    """Issue 15: at COLUMNS=80 the table used to cut names and numbers ("final_eval_accu…",
    "0.59…"). In a terminal of any width every cell's whole text is printed: a table when it fits,
    one block per arm when not."""
    from workbench.cli.report import print_table
    from workbench.compare import compare_variants, summarize_runs
    from workbench.results.reader import StudyReader

    frames = StudyReader(store, cache_dir=False).load(STUDY, ["eval/accuracy"])
    table = compare_variants(summarize_runs(frames.history, frames.runs, list(METRICS)), "grpo", list(METRICS))
    buf = io.StringIO()
    print_table(table, out=Console(file=buf, force_terminal=True, width=width, color_system=None))
    text = buf.getvalue()
    for cell in _all_cells(table):
        assert cell in text, cell
    assert "…" not in text
    if width == 80:
        # only a verdict with its reason may run past 80: the terminal wraps it, nothing is cut
        assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("  verdict"))
        assert "\n  verdict" in text  # blocks: one line per field
    else:
        assert "┃" in text or "│" in text  # a table


@pytest.mark.slow
def test_compare_in_an_80_column_terminal_prints_every_cell_whole(store):
    """`COLUMNS=80 workbench compare ...` in a real (pseudo-)terminal: blocks, nothing cut."""
    import os
    import pty
    import subprocess
    import sys

    from workbench.compare import compare_variants, summarize_runs
    from workbench.results.reader import StudyReader

    master, slave = pty.openpty()
    env = os.environ | {"COLUMNS": "80", "LINES": "50", "TERM": "xterm", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench.cli.main",
            "compare",
            STUDY,
            "--tracking-uri",
            store,
            "--no-log",
            *(a for m in METRICS for a in ("-m", m)),
        ],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:  # read while it writes: a full pty buffer would block the child
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")
    frames = StudyReader(store, cache_dir=False).load(STUDY, ["eval/accuracy"])
    table = compare_variants(summarize_runs(frames.history, frames.runs, list(METRICS)), "grpo", list(METRICS))
    for cell in _all_cells(table):
        assert cell in text, cell
    assert "…" not in text and "\n  verdict" in text
