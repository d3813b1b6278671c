"""The headline of a comparison (issue 32, finding 2): one plain sentence per comparison, the first
line of every output of ``compare`` (terminal, md, json, HTML), its words matching the verdict's status."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from workbench.cli.report import comparison_table_html, headline_html, print_table
from workbench.compare import CompareSettings, compare_variants
from workbench.compare.wording import headline, level_percent
from workbench.viz.html import Section, html_page


def summary_of(means: dict[str, float], *, n: int = 4, sd: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """``final_eval_accuracy`` of ``n`` seeds per variant, N(mean, sd), seeded."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [
            {
                "run_id": f"{v}-{s}",
                "variant": v,
                "seed": s,
                "status": "FINISHED",
                "final_eval_accuracy": mu + sd * rng.standard_normal(),
            }
            for v, mu in means.items()
            for s in range(n)
        ]
    )


@pytest.fixture(scope="module")
def table():
    # dapo 10 points up (better), dr_grpo the same as grpo with a SESOI of 5 points (equivalent),
    # loose 1 point up at 2 seeds with sd 0.05 (inconclusive)
    summary = pd.concat(
        [summary_of({"grpo": 0.30, "dapo": 0.40, "dr_grpo": 0.30}), summary_of({"loose": 0.31}, n=4, sd=0.05, seed=1)],
        ignore_index=True,
    )
    return compare_variants(
        summary, "grpo", ["final_eval_accuracy"], CompareSettings(sesoi={"final_eval_accuracy": 0.05}, n_resamples=0)
    )


def test_one_sentence_per_comparison_in_the_words_of_its_status(table):
    lines = table.headlines()
    print("\n".join(lines))
    by_arm = {line.split(" vs ")[0]: line for line in lines}
    assert set(by_arm) == {"dapo", "dr_grpo", "loose"}  # no line for the baseline itself
    statuses = dict(zip(table.df["variant"], table.df["status"], strict=True))
    assert (statuses["dapo"], statuses["dr_grpo"], statuses["loose"]) == ("better", "equivalent", "inconclusive")
    # 3 comparisons: each interval at 1 - 0.05/3 = 98.3%, the three together at 95% (Bonferroni)
    assert re.fullmatch(
        r"dapo vs grpo: \+\d+\.\d points final eval accuracy \(98\.3% CI \+\d+\.\d to \+\d+\.\d\), "
        r"dapo is better with 4 seeds",
        by_arm["dapo"],
    ), by_arm["dapo"]
    assert by_arm["dr_grpo"].endswith(
        "equivalent with 4 seeds: the difference is within ±5.0 points, the smallest effect of interest"
    )
    assert re.search(
        r"not distinguishable with 4 seeds \(they would likely detect only ±\d+\.\d points or more\)$", by_arm["loose"]
    ), by_arm["loose"]
    # the interval in the sentence is the table's (at delta_level, the level Holm tested it at), in points,
    # rounded outward: the lower bound down, the upper up, to 1 decimal
    row = table.df.set_index("variant").loc["dapo"]
    lo, hi = math.floor(1000 * row["delta_lo"]) / 10, math.ceil(1000 * row["delta_hi"]) / 10
    assert f"{lo:+.1f} to {hi:+.1f}" in by_arm["dapo"]
    # beside "equivalent", the TOST's interval: 1 - 2 x 0.05 / 3 (Holm's first step of 3 TOSTs) = 96.7%
    assert "(96.7% TOST CI " in by_arm["dr_grpo"]


@pytest.mark.parametrize(
    "status, verdict, expected",
    [
        ("worse", "worse", "dapo is worse with 3 seeds"),
        (
            "not testable",
            "not testable: clip_high acted on 0.1% of tokens (min 1%) [the test alone: worse]",
            "not testable: clip_high acted on 0.1% of tokens (min 1%)",
        ),
        # the excluded effect in the sentence's unit (points), the same bound as its interval's
        (
            "not testable",
            "not testable: clip_high acted on 0.1% of tokens (min 1%); |Δ| > 0.11 excluded",
            "not testable: clip_high acted on 0.1% of tokens (min 1%); |Δ| > 10.2 points excluded",
        ),
        ("withheld", "withheld: 2/5 runs failed", "verdict withheld: 2/5 runs failed"),
        (
            "better",
            "better (but |Δ| < 0.05)",
            "dapo is better with 3 seeds, but by less than the smallest effect of interest (5.0 points)",
        ),
    ],
)
def test_each_status_reads_in_plain_words(status, verdict, expected):
    line = headline(
        variant="dapo",
        baseline="grpo",
        metric="final_eval_accuracy",
        status_word=status,
        verdict_text=verdict,
        delta=-0.045,
        lo=-0.102,
        hi=0.012,
        level=0.95,
        n_x=3,
        n_y=3,
        mde=0.081,
        sesoi=0.05,
        points=True,
    )
    assert line == f"dapo vs grpo: -4.5 points final eval accuracy (95% CI -10.2 to +1.2), {expected}"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("better", "dapo is better at look 2 of 3 (6 seeds)"),
        ("worse", "dapo is worse at look 2 of 3 (6 seeds)"),
        (
            "equivalent",
            "equivalent at look 2 of 3 (6 seeds): the difference is within ±5.0 points, the smallest effect of interest",
        ),
    ],
)
def test_a_sequential_decision_names_its_look(status, expected):
    """A sequential study's verdict is its design's decision (#52): the headline says the look that took it."""
    line = headline(
        variant="dapo",
        baseline="grpo",
        metric="final_eval_accuracy",
        status_word=status,
        verdict_text=f"{status} at look 2 of 3, 6 seeds paired",
        delta=-0.045,
        lo=-0.102,
        hi=0.012,
        level=0.95,
        n_x=6,
        n_y=6,
        mde=0.081,
        sesoi=0.05,
        points=True,
        look="look 2 of 3",
    )
    assert line == f"dapo vs grpo: -4.5 points final eval accuracy (95% CI -10.2 to +1.2), {expected}"


def test_a_metric_outside_0_1_reads_in_its_own_units_and_the_rank_test_has_no_interval():
    line = headline(
        variant="a",
        baseline="b",
        metric="final:length/mean",
        status_word="inconclusive",
        verdict_text="inconclusive with 3 vs 5 seeds",
        delta=12.25,
        lo=float("nan"),
        hi=float("nan"),
        level=float("nan"),
        n_x=3,
        n_y=5,
        mde=float("nan"),
        sesoi=float("nan"),
        points=False,
        ranked=True,
    )
    assert line == (
        "a vs b: +12.2 final length/mean (of the finished runs; the rank test decides), "
        "not distinguishable with 3 vs 5 seeds"
    )


def test_the_headline_is_the_first_line_of_markdown_json_and_the_terminal(table):
    lines = table.headlines()
    md = table.to_markdown()
    assert md.splitlines()[0] == lines[0]
    assert md.split("\n\n")[: len(lines)] == lines  # each its own paragraph, before anything else
    assert "| n_seeds |" in md and "| seeds |" not in md
    assert json.loads(table.to_json())["headline"] == lines
    for terminal in (True, False):  # a terminal, and a pipe (tab-separated tables follow)
        out = io.StringIO()
        print_table(table, Console(file=out, force_terminal=terminal, width=200, color_system=None))
        assert out.getvalue().splitlines()[: len(lines)] == lines, terminal
        assert "final_eval_accuracy: Final eval/accuracy: the mean of the last 3 evals after step 0" in out.getvalue()


def test_the_headline_opens_the_html_report(table):
    page = html_page(
        "Comparison report: s",
        [Section("Which variant wins", body_html=comparison_table_html(table))],
        lead_html=headline_html(table),
    )
    body = page.split("<body>", 1)[1]
    first_text = re.sub(r"<[^>]+>", "\n", body).strip().splitlines()[0]
    assert first_text == table.headlines()[0].replace("&", "&amp;")
    header = re.search(r"<thead><tr>(.*?)</tr></thead>", body).group(1)
    names = re.findall(r"<th[^>]*>(.*?)</th>", header)
    assert names[:4] == ["rank", "variant", "verdict", "n_seeds"]  # the verdict beside the name, a count of seeds


@pytest.mark.parametrize(
    ("confidence", "label"),
    [
        (0.95, "95%"),
        (0.975, "97.5%"),
        (1 - 0.05 / 3, "98.3%"),
        (1 - 0.0157, "98.4%"),
        (1 - 0.0157 / 3, "99.5%"),
        (0.9995, "99.95%"),
        (1 - 0.000687, "99.93%"),
        (0.99, "99%"),
    ],
)
def test_a_confidence_level_is_printed_with_the_digits_its_alpha_needs(confidence, label):
    """A design's last look tests at α = 0.000687: `.0%` printed "100% CI" in the tables (and `.3g`
    "100%" at 0.9995). The label keeps α's first significant digit below 1%."""
    assert level_percent(confidence) == label


@given(st.floats(min_value=0.5, max_value=1 - 1e-7))
def test_a_confidence_label_is_never_100_and_within_its_last_digit(confidence):
    text = level_percent(confidence)
    value = float(text.rstrip("%"))
    digits = len(text.rstrip("%").partition(".")[2])
    assert value < 100
    assert abs(value - 100 * confidence) <= 0.5 * 10**-digits + 1e-9  # rounded, never truncated past a digit


def test_interval_bounds_round_outward_and_never_onto_a_threshold():
    """One rounding for every printed interval (#52): the lower bound down, the upper up, at the digits
    shown; a digit more where the rounded bound would reach or cross 0 or ±SESOI and the computed one does not."""
    from workbench.compare.wording import ci_text, effect_interval, excluded_text, interval_texts

    one_decimal = lambda v: (False, 1)  # noqa: E731 - a precision for the example
    assert interval_texts(0.13, 0.57, one_decimal) == ("0.1", "0.6")  # outward: down, up
    assert interval_texts(0.13, 0.57, one_decimal, thresholds=[0.1]) == ("0.13", "0.6")  # 0.1 would sit on it
    assert interval_texts(-0.57, -0.13, one_decimal, thresholds=[0.0]) == ("-0.6", "-0.1")  # not onto 0: fine
    assert interval_texts(0.04, 0.2, one_decimal, thresholds=[0.0]) == ("0.04", "0.2")  # 0.0 would sit on 0
    # a TOST interval inside ±3 points reads inside: -2.96 would round to -3.0, onto the SESOI
    assert effect_interval(-0.0296, 0.0297, points=True, sesoi=0.03) == ("-2.96", "+2.97")
    # decimal arithmetic: 0.102 is 10.2 points, not 10.200000000000001 (which would round up to 10.3)
    assert excluded_text(0.102, points=True) == "10.2" and excluded_text(0.1021, points=True) == "10.3"
    assert excluded_text(0.0013, points=True) == "0.2"  # an excluded 0.13 points never reads as 0.1
    assert ci_text(0.5, 0.12344, 12345.6) == "0.5 [0.1234, 12,346]"
    assert ci_text(0.7, 0.5004, 0.99, thresholds=(0.5,)) == "0.7 [0.5004, 0.99]"
    assert ci_text(0.7, 0.50004, 0.99, thresholds=(0.5,)) == "0.7 [0.50004, 0.99]"  # 4 digits would be 0.5
