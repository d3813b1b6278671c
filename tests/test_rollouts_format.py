"""The ``rollouts`` command's pure parts: step ranges and user text in markdown and rich markup (issue 51)."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.markup import escape

from workbench.cli.rollouts import md_cell, parse_steps, visible


@pytest.mark.parametrize(
    ("text", "want"), [("5:10", (5, 10)), ("5:", (5, None)), (":20", (None, 20)), ("7", (7, 7)), (None, None)]
)
def test_step_ranges(text, want):
    assert parse_steps(text) == want


@pytest.mark.parametrize("text", ["x", "1:y", ""])
def test_a_step_range_that_is_not_one_says_what_is_expected(text):
    with pytest.raises(ValueError, match="expected FIRST:LAST"):
        parse_steps(text)


def test_completions_are_literal_text_in_a_markdown_cell():
    # a completion with table syntax, emphasis, a link, HTML and a newline renders as itself, in one cell
    cell = md_cell("a | b *x* [y](z) <script>&\nnext")
    assert cell == r"a \| b \*x\* \[y\]\(z\) &lt;script&gt;&amp;<br>next"
    assert "|" not in cell.replace(r"\|", "")


def test_completions_are_literal_text_in_rich_markup():
    console = Console(record=True, width=80)
    console.print(escape("[bold]not bold[/bold] \\[x]"))
    assert console.export_text().strip() == "[bold]not bold[/bold] \\[x]"


def test_a_completion_cannot_restyle_the_terminal():
    # an ANSI colour sequence and a bell a model emitted are shown, not obeyed; a newline stays readable
    assert visible("red\x1b[31mtext\x07\nline2\tx") == r"red\x1b[31mtext\x07\nline2\tx"
    assert md_cell("a\x1b[0m") == r"a\x1b\[0m"


def test_runs_missing_completions_get_one_note_each():
    from workbench.cli.rollouts import notes

    attrs = {
        "manifests": {
            "a" * 32: {"rows": {"train": 90, "eval": 10}, "dropped": {"train": 30, "eval": 0}},
            "b" * 32: {"rows": {"train": 5, "eval": 5}, "dropped": {"train": 0, "eval": 0}},
        },
        "unreadable": {"c" * 32: "rollouts/completions-00000.parquet is not a parquet file: bad"},
    }
    assert notes(attrs) == [
        "note: run aaaaaaaa stored 100 of 130 completions (tracking.rollouts_budget_mb; its rollouts/manifest.json "
        "says which steps)",
        "note: run cccccccc: rollouts not read: rollouts/completions-00000.parquet is not a parquet file: bad",
    ]
