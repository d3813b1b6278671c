"""#52, on every committed compare page (docs/findings/data/*/compare.md, each equal to what `compare` prints
from its export: tests/test_export.py reloads every export and compares byte for byte): no row's printed
interval contradicts its verdict, in its tables or its headlines (tests/compare/verdict_intervals.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compare.verdict_intervals import interval_cells, page_contradictions, table_rows

PAGES = sorted((Path(__file__).resolve().parents[2] / "docs" / "findings" / "data").glob("*/compare.md"))


def test_there_are_pages_to_check():
    assert len(PAGES) >= 9 and sum(len(table_rows(p.read_text())) for p in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_no_committed_page_has_a_verdict_its_interval_contradicts(page):
    md = page.read_text()
    assert len(table_rows(md)) == interval_cells(md)  # every printed interval was read, then checked
    assert page_contradictions(md) == []


def test_the_check_catches_an_equivalence_beside_an_interval_crossing_the_sesoi():
    """The committed page before #52 (dr-grpo-length-bias): "equivalent (|Δ| < 2)" beside the 98.4% interval
    [-1.081, 0.01164] (the 1 - α/m interval, not the TOST's, though inside ±2 here) and "equivalent
    (|Δ| < 0.03)" on accuracy beside [-0.0118, 0.02491]: neither is a TOST interval, so both are caught."""
    head = (
        "| rank | variant | n_seeds | runs | mean [98.4% CI] | IQM [98.4% CI] | Δ vs baseline [x] | "
        "P(improve) [98.4% CI] | p (holm) | verdict | status |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    md = (
        "### final_eval_accuracy (higher is better; baseline: grpo)\n\n"
        + head
        + "| 1 | dr_grpo | 6 | 6 finished | 0.563 [0.5469, 0.5791] | 0.5642 [0.5507, 0.5776] | "
        "0.006556 [-0.0118, 0.02491] (98.4%) | 0.6667 [0.1621, 0.9764] | 0.256 | equivalent (\\|Δ\\| < 0.03) | "
        "equivalent |\n"
    )
    assert page_contradictions(md) == [
        "final_eval_accuracy/dr_grpo table: equivalent within ±0.03 beside [-0.0118, 0.02491] (not TOST)"
    ]
    better = md.replace("equivalent (\\|Δ\\| < 0.03) | equivalent", "better | better")
    assert page_contradictions(better) == ["final_eval_accuracy/dr_grpo table: better beside [-0.0118, 0.02491]"]


def test_the_check_catches_a_futile_row_without_its_bound_or_with_one_outside_the_sesoi():
    """The committed pages before the futility bound was said: "futile (a loss of 0.03 or more excluded)" beside
    the look's 99.9% interval [-0.045, 0.041] (its efficacy level): the verdict gave no bound, so the interval read
    as contradicting it. Now the verdict states the one-sided bound that decided, which must lie inside the SESOI
    on the excluded side (a loss, higher is better: the lower bound above -0.03) and beyond the estimate."""
    head = (
        "| rank | variant | n_seeds | runs | mean [96.6% CI] | Δ vs baseline [CI at tested level] | verdict | "
        "status |\n|---|---|---|---|---|---|---|---|\n"
    )
    row = "| 1 | s2 | 6 | 6 finished | 0.32 [0.3, 0.34] | -0.002 [-0.045, 0.041] (99.9%) | {v} | futile |\n"
    title = "### final_eval_accuracy (higher is better; baseline: s0)\n\n"
    line = "s2 vs s0: -0.2 points final eval accuracy (99.9% CI -4.5 to +4.1), {v}\n\n"
    old = "futile (a loss of 0.03 or more excluded) at look 2 of 3, 6 seeds paired"
    said = "futile (a loss of 0.03 or more excluded: one-sided 98.3% bound {b}) at look 2 of 3, 6 seeds paired"
    points = "futile (a loss of 3.0 points or more excluded: one-sided 98.3% bound {b} points) at look 2 of 3, 6 seeds paired"

    def page(table: str, headline: str) -> str:
        return line.format(v=headline) + title + head + row.format(v=table)

    assert page_contradictions(page(said.format(b="-0.0213"), points.format(b="-2.2"))) == []
    assert page_contradictions(page(old, old)) == [
        f"final_eval_accuracy/s2 table: futile without the bound that decided it: {old}",
        f"final_eval_accuracy/s2 headline: futile without the bound that decided it: {old}",
    ]
    outside = page_contradictions(page(said.format(b="-0.031"), points.format(b="-3.1")))
    assert outside == [
        "final_eval_accuracy/s2 table: futile (a loss of 0.03 excluded) beside its lo bound -0.031 (Δ -0.002)",
        "final_eval_accuracy/s2 headline: futile (a loss of 0.03 excluded) beside its lo bound -0.031 (Δ -0.002)",
    ]
    # a bound on the wrong side of the estimate is not a lower bound; the headline's bound must agree with the table's
    assert page_contradictions(page(said.format(b="+0.01"), points.format(b="-2.2"))) == [
        "final_eval_accuracy/s2 table: futile (a loss of 0.03 excluded) beside its lo bound 0.01 (Δ -0.002)",
        "final_eval_accuracy/s2 headline: futility bound -0.022000000000000002 and the table's 0.01 on two sides of 0.0",
    ]
