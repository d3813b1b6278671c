"""Rendering dashboards and figures from synthetic study frames: every panel has data, bands and
bars carry the statistics of workbench.compare, markers sit on the curves, HTML is self-contained."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.viz.synthetic import health_report, mismatch_records, synthetic_study
from workbench.analysis.health_table import health_cells, health_events
from workbench.compare import CompareSettings, align_curves, compare_variants, curve_bands, summarize_runs
from workbench.viz import DashboardData, html_page, load_spec, parse_spec, render_dashboard, summary_figure
from workbench.viz.figures import health_matrix_figure, is_interval_trace, zoomed_range
from workbench.viz.html import Section, without_generated_time

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


@pytest.fixture(scope="module")
def study():
    history, runs = synthetic_study()
    reports = {rid: health_report([]) for rid in runs["run_id"]}
    first = runs["run_id"].iloc[0]
    reports[first] = health_report(
        [("entropy_collapse", 7, "warn", "entropy/mean", 0.1), ("non_finite", 12, "fail", "grad/norm", float("nan"))]
    )
    reports[runs["run_id"].iloc[1]] = None  # no health.json: from tags (none here) -> unknown
    return history, runs, reports


def traces_in(fig, row, col):
    """Traces placed in the subplot at (row, col)."""
    ref = fig.get_subplot(row, col)
    xa = ref.xaxis.plotly_name.replace("axis", "")
    return [t for t in fig.data if (t.xaxis or "x") == xa]


def test_compare_spec_renders_every_panel_with_bands_from_curve_bands(study):
    history, runs, _ = study
    spec = load_spec(DASHBOARDS / "compare.yaml")
    rendered = render_dashboard(spec, DashboardData(history, runs, baseline="grpo", n_resamples=200))
    assert rendered.warnings == []
    assert rendered.panels_with_data == len(spec.panels)
    places = spec.placements()
    # the eval accuracy panel: per variant one band (filled polygon) and one mean line
    (r, c) = places[0]
    ts = traces_in(rendered.figure, r, c)
    lines = {t.name: t for t in ts if t.fill is None and t.mode.startswith("lines")}
    bands = [t for t in ts if t.fill == "toself"]
    assert set(lines) == {"grpo", "dapo"} and len(bands) == 2
    expected = curve_bands(align_curves(history, "eval/accuracy"))
    exp_dapo = expected[expected["variant"] == "dapo"]
    np.testing.assert_allclose(np.asarray(lines["dapo"].y, dtype=float), exp_dapo["estimate"].to_numpy())
    band = next(t for t in bands if t.legendgroup == "dapo")
    ys = np.asarray(band.y, dtype=float)
    np.testing.assert_allclose(ys[: len(exp_dapo)], exp_dapo["hi"].to_numpy())
    assert (ys[: len(exp_dapo)] >= ys[len(exp_dapo) :][::-1]).all()  # upper edge above the lower edge
    # a two-metric panel tells its metrics apart by dash
    length_panel = next(i for i, p in enumerate(spec.panels) if len(p.metrics) == 2)
    dashes = {t.line.dash for t in traces_in(rendered.figure, *places[length_panel]) if t.fill is None}
    assert dashes == {"solid", "dash"}
    # each variant appears once in the legend, in one colour everywhere
    shown = [t.name for t in rendered.figure.data if t.showlegend]
    assert shown.count("grpo") == 1 and shown.count("dapo") == 1
    colors = {t.line.color for t in rendered.figure.data if t.name == "grpo" and t.fill is None}
    assert len(colors) == 1

    # axes of metrics that cannot go below 0 (catalogue range) stop at 0; a reward's axis does not
    def yaxis(metric):
        i = next(i for i, p in enumerate(spec.panels) if p.metrics[:1] == [metric])
        return rendered.figure.get_subplot(*places[i]).yaxis

    assert yaxis("eval/accuracy").rangemode == "nonnegative"
    assert yaxis("reward/mean").rangemode is None
    # a KL spans decades (1e-6 to 1e-2 between runs): the spec draws it on a log axis
    assert yaxis("mismatch/kl").type == "log"


Z95 = 1.959963984540054  # the 97.5% normal quantile


def test_eval_points_carry_their_binomial_interval_over_problems(study):
    """The compare spec's eval accuracy: every mean point has error bars, the Wilson interval at the mean
    over the 100 problems each run logged (by hand: centre (p + z²/2n)/(1 + z²/n), half-width
    z/(1 + z²/n)·sqrt(p(1-p)/n + z²/4n²)); the hover and a legend entry name it; reward has no bars."""
    history, runs, _ = study
    spec = load_spec(DASHBOARDS / "compare.yaml")
    rendered = render_dashboard(spec, DashboardData(history, runs, baseline="grpo"))
    (r, c) = spec.placements()[0]
    dapo = next(t for t in traces_in(rendered.figure, r, c) if t.name == "dapo" and t.fill is None)
    p, n = np.asarray(dapo.y, dtype=float), 100
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 / (1 + Z95**2 / n) * np.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
    # a Wilson bound minus the estimate: ~20 roundings of numbers below 2: 20 * eps * 2 < 1e-14
    np.testing.assert_allclose(np.asarray(dapo.error_y.array, dtype=float), centre + half - p, rtol=0, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(dapo.error_y.arrayminus, dtype=float), p - (centre - half), rtol=0, atol=1e-14
    )
    assert all("binomial over problems, this checkpoint" in t and "n=100 problems" in t for t in dapo.text)
    assert "at the mean over runs: an upper bound" in dapo.text[0]
    legend = [t.name for t in rendered.figure.data if t.showlegend and t.name.startswith("bars:")]
    assert legend == ["bars: binomial over problems, this checkpoint (95% Wilson)"]
    reward = spec.placements()[1]
    assert all(t.error_y.array is None for t in traces_in(rendered.figure, *reward))


def test_runs_without_a_problem_count_get_no_eval_bars_and_say_so():
    history, runs = synthetic_study(eval_problems=None)  # an older study: no eval/n_problems
    spec = parse_spec("panels:\n  - {metric: eval/accuracy, aggregation: none}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs))
    lines = [t for t in rendered.figure.data if t.name in ("grpo", "dapo")]
    assert lines and all(t.error_y.array is None or np.isnan(np.asarray(t.error_y.array, float)).all() for t in lines)
    assert all("no eval/n_problems logged (older run): no binomial interval" in t for t in lines[0].text)
    shown = [t.name for t in rendered.figure.data if t.showlegend]
    assert "no eval/n_problems logged (older run): no binomial interval" in shown
    assert not any(name.startswith("bars:") for name in shown)
    # 6 runs x 5 evals (steps 0, 5, 10, 15 and the last, 19)
    assert rendered.warnings == [
        "panel 'eval/accuracy': 30 point(s) of eval/accuracy have no binomial interval: "
        "their runs logged no eval/n_problems (older runs)"
    ]


def test_summary_panel_intervals_are_compare_variants_estimates(study):
    history, runs, _ = study
    spec = parse_spec("panels:\n  - {kind: summary, metrics: [final_eval_accuracy, eval/accuracy]}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs, baseline="grpo"))
    bars = [t for t in rendered.figure.data if is_interval_trace(t)]
    summary = summarize_runs(history, runs[["run_id", "variant", "seed"]], ["final_eval_accuracy"])
    table = compare_variants(summary, "grpo", ["final_eval_accuracy"], CompareSettings(rng=0))
    rows = table.for_metric("final_eval_accuracy")
    np.testing.assert_allclose(np.asarray(bars[0].y, dtype=float), rows["mean"].to_numpy())
    np.testing.assert_allclose(
        np.asarray(bars[0].error_y.array, dtype=float), (rows["mean_hi"] - rows["mean"]).to_numpy()
    )
    assert list(bars[0].x) == rows["variant"].tolist()
    assert len(bars) == 2  # eval/accuracy became final:eval/accuracy
    seeds = [t for t in rendered.figure.data if t.type == "box"]
    assert sum(len(t.x) for t in seeds) == 2 * len(runs)  # one circle per run per metric
    assert all(t.boxpoints == "all" for t in seeds)


def test_health_spec_per_run_lines_markers_and_matrix(study):
    history, runs, reports = study
    spec = load_spec(DASHBOARDS / "health.yaml")
    cells, events = health_cells(runs, reports), health_events(reports)
    data = DashboardData(
        history,
        runs,
        health_cells=cells,
        health_events=events,
        baseline="grpo",
        mismatch_records=mismatch_records(runs),
    )
    rendered = render_dashboard(spec, data)
    # kl/ref and the IS correction were never logged: their optional panels are left out, not empty
    titles = [p.title for p in rendered.spec.panels]
    assert "KL to reference" not in titles and len(rendered.spec.panels) == len(spec.panels) - 2
    assert rendered.warnings == [] and rendered.panels_with_data == len(rendered.spec.panels)
    fig = rendered.figure
    entropy_lines = [
        t
        for t in fig.data
        if t.type == "scatter" and t.mode in ("lines", "lines+markers") and "entropy/mean" in (t.hovertemplate or "")
    ]
    assert len(entropy_lines) == len(runs)  # aggregation none: one line per run
    warn = [t for t in fig.data if t.name == "health warn"]
    assert len(warn) == 1 and list(warn[0].x) == [7]
    rid = runs["run_id"].iloc[0]
    h = history[(history["run_id"] == rid) & (history["metric"] == "entropy/mean") & (history["step"] == 7)]
    assert warn[0].y[0] == pytest.approx(h["value"].iloc[0])  # on the run's entropy curve
    (fail,) = [t for t in fig.data if t.name == "health fail"]  # on the event's own metric (grad/norm)
    h = history[(history["run_id"] == rid) & (history["metric"] == "grad/norm") & (history["step"] == 12)]
    assert list(fail.x) == [12] and fail.y[0] == pytest.approx(h["value"].iloc[0])
    (heat,) = [t for t in fig.data if t.type == "heatmap"]
    z = np.asarray(heat.z, dtype=float)
    rules = list(heat.x)
    # each cell says its state in words (#32): "fail@12", "warn@7", "ok"
    assert z[0, rules.index("non_finite")] == 1.0 and heat.text[0][rules.index("non_finite")] == "fail@12"
    assert z[0, rules.index("entropy_collapse")] == 0.5 and heat.text[0][rules.index("entropy_collapse")] == "warn@7"
    assert np.allclose(z[1], 0.0)  # no report, but its tags say ok with no reasons
    # the legend under the figure says what each cell text means (#32), once
    legends = [sec for sec in rendered.sections if sec.title == "Health matrix: what a cell says"]
    assert len(legends) == 1 and "warn@120" in legends[0].body_html and "fail@120" in legends[0].body_html


def test_group_by_run_colours_each_run_and_missing_metrics_are_reported(study):
    history, runs, _ = study
    spec = parse_spec("panels:\n  - {metric: reward/mean, group_by: run}\n  - {metric: no/such_metric}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs))
    lines = [t for t in rendered.figure.data if t.type == "scatter"]
    assert len({t.line.color for t in lines}) == len(runs) and all(t.showlegend for t in lines)
    assert rendered.panels_with_data == 1
    assert rendered.warnings == ["panel 'no/such_metric': no data for no/such_metric"]
    assert any("no data" in a.text for a in rendered.figure.layout.annotations)


def test_x_tokens_aligns_on_cumulative_tokens(study):
    history, runs, _ = study
    spec = parse_spec("panels:\n  - {metric: reward/mean, x: tokens}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs, n_resamples=100))
    line = next(t for t in rendered.figure.data if t.fill is None)
    assert max(line.x) > 1000  # tokens (length/mean x 16 completions per step), not steps
    assert rendered.figure.layout.xaxis.title.text == "tokens"


def test_summary_and_health_figures(study):
    history, runs, reports = study
    summary = summarize_runs(history, runs, ["final_eval_accuracy", "final_reward"])
    table = compare_variants(summary, "grpo", ["final_eval_accuracy", "final_reward"])
    fig = summary_figure(table, summary)
    assert sum(is_interval_trace(t) for t in fig.data) == 2 and [t.type for t in fig.data].count("bar") == 0
    heat = health_matrix_figure(health_cells(runs, reports))
    assert heat.data[0].type == "heatmap" and len(heat.data[0].y) == len(runs)


def test_html_is_self_contained_and_valid_js(study, tmp_path):
    history, runs, _ = study
    rendered = render_dashboard(load_spec(DASHBOARDS / "compare.yaml"), DashboardData(history, runs, n_resamples=50))
    page = rendered.to_html(subtitle="test")
    assert page.count("Plotly.newPlot") == 1
    assert not re.search(r"<script[^>]+src=", page)  # nothing loaded from a CDN or elsewhere
    assert len(page) > 3_000_000  # plotly.js inlined
    two = html_page("t", [Section("a", figure=rendered.figure), Section("b", figure=rendered.figure)])
    assert two.count("Plotly.newPlot") == 2 and len(two) < len(page) * 1.2  # one shared copy of plotly.js
    if shutil.which("node"):
        for i, js in enumerate(re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)):
            f = tmp_path / f"s{i}.js"
            f.write_text(js)
            r = subprocess.run(["node", "--check", str(f)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[:500]


def test_a_page_made_again_later_has_the_same_content():
    """What `compare` hashes to log a report once per content: the page without its generated minute."""
    page = html_page("t", [Section("a", note="same")], subtitle="study <b>s</b>")
    stamp = re.search(r"generated \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", page)
    assert stamp is not None
    later = page.replace(stamp.group(), "generated 2000-01-01 00:00 UTC")
    assert later != page and without_generated_time(later) == without_generated_time(page)
    assert "generated 2000-01-01" not in without_generated_time(later)
    other = html_page("t", [Section("a", note="different")], subtitle="study <b>s</b>")
    assert without_generated_time(other) != without_generated_time(page)


def test_health_cells_from_tags_when_no_report():
    runs = pd.DataFrame(
        {
            "run_id": ["a" * 32, "b" * 32],
            "variant": ["v", "v"],
            "seed": [0, 1],
            "health": ["fail", None],
            "health_reasons": ["non_finite@4,entropy_collapse@2", None],
        }
    )
    cells = health_cells(runs, {"a" * 32: None, "b" * 32: None}).set_index(["run_id", "rule"])
    a = cells.loc["a" * 32]
    assert a.loc["non_finite", "state"] == "fail" and a.loc["non_finite", "step"] == 4
    assert a.loc["entropy_collapse", "state"] == "warn" and a.loc["entropy_collapse", "source"] == "tags"
    assert a.loc["reward_collapse", "state"] == "ok"
    assert (cells.loc["b" * 32, "state"] == "unknown").all()


def test_long_curves_are_thinned_for_drawing_only(study):
    history, runs, _ = study
    spec = parse_spec("panels:\n  - {metric: reward/mean}\n  - {kind: summary, metrics: [final_reward]}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs, n_resamples=50, max_points=5))
    line = next(t for t in rendered.figure.data if t.type == "scatter" and t.fill is None and t.name == "grpo")
    assert list(line.x) == [0, 5, 10, 14, 19]  # evenly spaced, first and last step kept
    bar = next(t for t in rendered.figure.data if is_interval_trace(t))
    summary = summarize_runs(history, runs, ["final_reward"])  # last 10 steps: every point, not the thinned ones
    assert bar.y[list(bar.x).index("grpo")] == pytest.approx(
        summary.loc[summary["variant"] == "grpo", "final_reward"].mean()
    )


def test_summary_intervals_zoom_in_so_close_variants_look_different():
    """0.79 vs 0.81 (5 seeds each): the axis spans the values, not 0..0.8, and every seed is drawn."""
    seeds = [-0.004, -0.002, 0.0, 0.002, 0.004]
    summary = pd.DataFrame(
        [
            {"variant": v, "seed": i, "acc": mu + d}
            for v, mu in (("grpo", 0.79), ("dapo", 0.81))
            for i, d in enumerate(seeds)
        ]
    )
    table = compare_variants(summary, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}, rng=0))
    fig = summary_figure(table, summary)
    lo, hi = fig.layout.yaxis.range
    assert 0.7 < lo < 0.786 and 0.814 < hi < 0.9  # hand: values 0.786..0.814, margin 8% of the span
    (interval,) = [t for t in fig.data if is_interval_trace(t)]
    assert dict(zip(interval.x, interval.y, strict=True)) == pytest.approx(
        {"grpo": 0.79, "dapo": 0.81}, abs=1e-12
    )  # mean of 5: ≤ 5·eps64·0.81 ≈ 1e-15
    assert (np.asarray(interval.error_y.array) > 0).all() and (np.asarray(interval.error_y.arrayminus) > 0).all()
    (points,) = [t for t in fig.data if t.type == "box"]
    assert sorted(np.round(points.y, 6)) == sorted(np.round(summary["acc"], 6))  # all 10 seeds, as given
    assert not [t for t in fig.data if t.type == "bar"]


def test_long_arm_names_are_angled_and_each_row_leaves_them_room():
    """Arm names like "seq_mean_token_sum_norm" are drawn at -30°; the gap below a row holds their drop
    (about 7 px per character × sin 30°) plus the next row's title, so they never overlap it."""
    names = ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
    summary = pd.DataFrame(
        [
            {"variant": v, "seed": i, "a": 0.1 * k + 0.01 * i, "b": k + i, "c": 2.0 * i}
            for k, v in enumerate(names)
            for i in range(3)
        ]
    )
    table = compare_variants(
        summary, names[0], ["a", "b", "c"], CompareSettings(higher_is_better={"a": True, "b": True, "c": True}, rng=0)
    )
    fig = summary_figure(table, summary)  # 3 panels: 2 rows
    assert fig.layout.xaxis.tickangle == -30 and fig.layout.xaxis3.tickangle == -30
    gap_px = (fig.layout.yaxis.domain[0] - fig.layout.yaxis3.domain[1]) * fig.layout.height
    assert round(gap_px) >= int(0.5 * 7 * len("seq_mean_token_sum_norm")) + 60  # whole pixels
    assert fig.layout.showlegend is False  # the title explains the markers: no stray legend caption

    short = compare_variants(
        summary.replace({"variant": dict(zip(names, ["grpo", "dapo", "cispo"]))}),
        "grpo",
        ["a"],
        CompareSettings(higher_is_better={"a": True}, rng=0),
    )
    assert (
        summary_figure(
            short, summary.replace({"variant": dict(zip(names, ["grpo", "dapo", "cispo"]))})
        ).layout.xaxis.tickangle
        is None
    )


def test_zoomed_range_by_hand():
    assert zoomed_range(np.array([0.79, 0.81])) == pytest.approx([0.79 - 0.0016, 0.81 + 0.0016])  # 8% of 0.02
    assert zoomed_range(np.array([0.5, np.nan])) == pytest.approx([0.475, 0.525])  # one value: ±5% of it
    assert zoomed_range(np.array([np.nan])) is None


def test_mismatch_panel_draws_each_runs_first_and_last_record_and_names_the_runs_without(study):
    """Synthetic records (tests/viz/synthetic.py: steps 0, 10, 19): per run the step-0 (dotted) and step-19
    (solid) histograms, exact counts in customdata, shares on y; one run logged none, one an unreadable one:
    both named in the panel, the warnings and under the worst-token table, none dropped."""
    history, runs, _ = study
    ids = list(runs["run_id"])
    records = mismatch_records(runs, without={ids[1]})
    records.unreadable[ids[2]] = "mismatch.json is not JSON: Expecting value"
    del records.records[ids[2]]
    spec = parse_spec("panels:\n  - {title: M, kind: mismatch_record, log_y: true, aggregation: none}\n")
    rendered = render_dashboard(spec, DashboardData(history, runs, mismatch_records=records))
    lines = [t for t in rendered.figure.data if t.meta == "mismatch-histogram"]
    assert len(lines) == 2 * (len(runs) - 2)
    first = next(t for t in lines if t.line.dash == "dot" and "dapo/seed=0" in t.hovertemplate)
    counts = records.records[ids[3]][0]["counts"]  # dapo/seed=0 is the 4th run; its step-0 record
    assert [int(c[0]) for c in first.customdata] == counts and "step 0 " in first.hovertemplate
    assert list(first.y) == [c / sum(counts) for c in counts]
    assert rendered.figure.layout.yaxis.type == "log"
    assert list(rendered.figure.layout.xaxis.ticktext)[:2] == ["-1", "-0.1"]  # whole decades of the bin edges
    assert rendered.warnings == [
        "panel 'M': no mismatch record (health.mismatch_record_every = 0 or an imported run): grpo/seed=1",
        "panel 'M': unreadable mismatch record: mismatch.json is not JSON: Expecting value: grpo/seed=2",
    ]
    notes = [a.text for a in rendered.figure.layout.annotations if "seed=" in a.text]
    assert notes == [
        "grpo/seed=1: no mismatch record (health.mismatch_record_every = 0 or an imported run)<br>"
        "grpo/seed=2: unreadable mismatch record: mismatch.json is not JSON: Expecting value"
    ]
    (section,) = rendered.sections
    assert section.body_html.count("<tr class=") == 3 * (len(runs) - 2)  # 3 worst tokens per recorded run
    assert "grpo/seed=1: no mismatch record" in section.body_html
    assert section.body_html.count('<td class="l">—</td>') == 3 * (len(runs) - 2)  # no tokenizer: ids only
    page = rendered.to_html()
    assert page.index("worst tokens at the last recorded step") > page.index("wb-plot-0")  # below the figure


def test_mismatch_panel_without_any_record_says_so_in_place_of_a_plot(study):
    history, runs, _ = study
    spec = parse_spec("panels:\n  - {title: M, kind: mismatch_record}\n  - {metric: reward/mean}\n")
    rendered = render_dashboard(
        spec, DashboardData(history, runs, mismatch_records=mismatch_records(runs, without=set(runs["run_id"])))
    )
    assert rendered.panels_with_data == 1
    assert len(rendered.warnings) == 1 and rendered.warnings[0].endswith(
        ", ".join(f"{v}/seed={s}" for v, s in zip(runs["variant"], runs["seed"], strict=True))
    )
    (note,) = [a for a in rendered.figure.layout.annotations if "no mismatch record" in a.text]
    assert note.y == 0.5 and note.text.endswith(f"and {len(runs) - 3} more")  # three named, the rest counted
    not_loaded = render_dashboard(spec, DashboardData(history, runs))  # a caller that read no records
    assert not_loaded.warnings == ["panel 'M': the runs' mismatch records were not loaded"]


MARKUP = ["<script>alert('wb')</script>", "<img src=x onerror=\"alert('wb')\">"]


@pytest.mark.parametrize("markup", MARKUP)
def test_a_specs_description_and_title_reach_the_page_escaped(study, markup):
    """The description is shown under the title as text: escaped like the title, never as markup."""
    history, runs, _ = study
    spec = parse_spec(
        f"title: {json.dumps('Mine ' + markup)}\ndescription: {json.dumps('Read ' + markup)}\n"
        "panels:\n  - metric: reward/mean\n"
    )
    page = render_dashboard(spec, DashboardData(history, runs, n_resamples=50)).to_html(subtitle="test")
    assert markup not in page
    assert f'<p class="note">Read {html.escape(markup)}</p>' in page
    assert f"<h1>Mine {html.escape(markup)}</h1>" in page
