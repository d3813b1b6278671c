"""Width-safe tables (workbench/cli/console.py) and `workbench metrics` on a terminal and off one."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.cli.console import render_table, wrap_words
from workbench.metrics import CATALOGUE
from workbench.metrics.catalogue import range_text


def run_on_a_terminal(args: list[str], columns: int) -> str:
    """`workbench ARGS` with its stdout on a pseudo-terminal of ``columns`` (COLUMNS, as a shell sets it)."""
    master, slave = os.openpty()
    env = os.environ | {"COLUMNS": str(columns), "TERM": "dumb"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli.main", *args],
        stdout=slave,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n")


def whole_word(word: str, text: str) -> bool:
    return re.search(rf"(^|\s){re.escape(word)}(\s|$)", text, re.MULTILINE) is not None


@pytest.mark.parametrize("columns", [80, 40])
def test_metrics_on_a_narrow_terminal_shows_every_name_whole(columns):
    out = run_on_a_terminal(["metrics"], columns)
    assert "…" not in out and "..." not in out
    for metric in CATALOGUE:
        assert whole_word(metric.name, out), metric.name  # e.g. mismatch/prob_abs_diff_mean, not cut
        assert whole_word(metric.unit, out) and whole_word(metric.healthy, out)
    assert "mismatch/prob_abs_diff_mean" in out
    for line in out.splitlines():
        assert len(line) <= columns, line  # no name is longer than 40 columns: everything fits
    # every word of every meaning is there, in order
    words = out.split()
    for metric in CATALOGUE:
        first = metric.meaning.split()[0]
        assert first in words


def test_metrics_off_a_terminal_is_one_tab_separated_line_per_metric():
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", "metrics"],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "40"},
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0] == "name\tmeaning\tunit\thealthy\trange"
    assert [line.split("\t") for line in lines[1:]] == [
        [m.name, m.meaning, m.unit, m.healthy, range_text(m.bounds)] for m in CATALOGUE
    ]
    assert lines[1 + [m.name for m in CATALOGUE].index("mismatch/kl")].endswith("\t>= 0")


def test_columns_when_they_fit_wrapped_text_then_stacked_blocks():
    headers, rows = ["arm", "mean", "note"], [["dr_grpo/lr=3e-05", "0.8123456", "better than the baseline"]]
    wide = render_table(headers, rows, width=60, wrap=["note"])
    assert wide.splitlines()[2].split("  ")[0] == "dr_grpo/lr=3e-05"  # one line per row
    assert len(wide.splitlines()) == 3
    wrapped = render_table(headers, rows, width=50, wrap=["note"])
    assert wrapped.splitlines()[2:] == [
        "dr_grpo/lr=3e-05  0.8123456  better than the",
        " " * (16 + 2 + 9 + 2) + "baseline",
    ]  # arm, gap, mean, gap
    stacked = render_table(headers, rows, width=30, wrap=["note"])
    assert stacked.splitlines() == [
        "dr_grpo/lr=3e-05",
        "  mean: 0.8123456",
        "  note: better than the",
        "        baseline",
    ]  # "  note: " + 24 characters is 32 > 30


def test_a_word_longer_than_the_width_is_kept_whole():
    assert wrap_words("see mismatch/prob_abs_diff_mean now", 10) == ["see", "mismatch/prob_abs_diff_mean", "now"]
    out = render_table(["name", "value"], [["mismatch/prob_abs_diff_mean", "1.23456789e-05"]], width=12)
    assert "mismatch/prob_abs_diff_mean" in out.split() and "1.23456789e-05" in out.split()


def test_plain_output_keeps_cells_on_one_line():
    out = render_table(["a", "b"], [["x\ty", "multi\nline"]], plain=True)
    assert out == "a\tb\nx y\tmulti line\n"


WORD = st.text(alphabet=st.sampled_from("abcdefghij/_.-0123456789"), min_size=1, max_size=30)
CELL = st.lists(WORD, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(CELL, min_size=3, max_size=3), min_size=1, max_size=5), width=st.integers(8, 120))
def test_property_no_word_is_ever_cut_and_lines_fit_unless_one_word_is_too_long(rows, width):
    out = render_table(["name", "value", "text"], rows, width=width, wrap=["text"])
    printed = out.split()
    for row in rows:
        for cell in row:
            for word in cell.split():
                assert word in printed
    for line in out.splitlines():
        if len(line) > width:  # only a single word too long for the room after its indent or label
            words = [w for w in line.split() if w not in ("name:", "value:", "text:")]
            assert len(words) == 1, (line, width)
