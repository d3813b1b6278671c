"""Dashboard specs: the bundled ones validate; every mistake names the file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.viz.spec import DashboardSpec, SpecError
from workbench.viz.spec_loader import find_spec, list_specs, load_spec, parse_spec

PROJECT_DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


@pytest.mark.parametrize("name", ["health", "compare"])
def test_bundled_specs_validate(name):
    spec = load_spec(PROJECT_DASHBOARDS / f"{name}.yaml")
    assert spec.name == name and spec.panels
    assert find_spec(name) == PROJECT_DASHBOARDS / f"{name}.yaml"
    assert name in list_specs()


def test_health_spec_plots_the_training_health_signals_and_the_health_matrix():
    spec = load_spec(PROJECT_DASHBOARDS / "health.yaml")
    metrics = {m for p in spec.panels for m in p.metrics}
    for m in [
        "reward/mean",
        "entropy/mean",
        "length/correct_mean",
        "length/incorrect_mean",
        "length/truncated_frac",
        "clip/frac_low",
        "clip/frac_high",
        "mismatch/kl",
        "kl/ref",
        "grad/norm",
    ]:
        assert m in metrics, m
    assert any(p.kind == "health_matrix" for p in spec.panels)
    assert spec.defaults.health_markers


def problems(text: str, source: str = "dashboards/mine.yaml") -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source)
    assert info.value.source == source
    for line in info.value.problems:
        assert line.startswith(source), line
    return info.value.problems


def test_bad_literal_names_file_line_field_and_choices():
    (p,) = problems("panels:\n  - metrics: [reward/mean]\n    aggregation: median\n")
    assert p.startswith("dashboards/mine.yaml:3: panels[0].aggregation: ")
    assert "expected 'mean', 'iqm' or 'none', got 'median'" in p


def test_unknown_field_suggests_the_right_one():
    (p,) = problems("panels:\n  - metrics: [a]\n  - metrcs: [b]\n")
    assert "dashboards/mine.yaml:3: panels[1].metrcs: unknown field; did you mean 'metrics'?" in p
    (p,) = problems("layuot: {cols: 2}\npanels: [{metric: a}]\n")
    assert ":1: layuot: unknown field" in p and "'layout'" in p
    (p,) = problems("layout: {colz: 2}\npanels: [{metric: a}]\n")
    assert "layout.colz" in p and "'cols'" in p


def test_every_problem_is_reported_at_once():
    ps = problems("layout: {cols: 9}\npanels:\n  - {metrics: [a], x: time}\n  - {metrics: [b], group_by: seed}\n")
    assert len(ps) == 3
    assert any("layout.cols" in p and "must be <= 4, got 9" in p for p in ps)
    assert any(":3: panels[0].x" in p and "expected 'step', 'samples' or 'tokens', got 'time'" in p for p in ps)
    assert any(":4: panels[1].group_by" in p and "expected 'variant' or 'run', got 'seed'" in p for p in ps)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("panels: []\n", "panels: must not be empty"),
        ("title: x\n", "panels: missing required field"),
        ("panels:\n  - {title: no metrics}\n", "a curve panel needs `metrics`"),
        ("panels:\n  - {metrics: [a], group_by: run, aggregation: iqm}\n", "aggregation 'iqm' needs group_by: variant"),
        ("panels:\n  - {kind: summary, metrics: [final_eval_acc]}\n", "did you mean 'final_eval_accuracy'"),
        ("panels:\n  - {kind: health_matrix, metrics: [a]}\n", "takes no `metrics`"),
        ("panels:\n  - {metric: a, metrics: [b]}\n", "either `metric` or `metrics`"),
        ("panels:\n  - {metrics: [a, a]}\n", "listed twice"),
        ("panels:\n  - {metrics: [a], row: 1}\n", "both `row` and `col`"),
        ("layout: {cols: 2}\npanels:\n  - {metrics: [a], width: 3}\n", "width 3 exceeds layout.cols 2"),
        ("panels:\n  - {metrics: [a], row: 1, col: 1}\n  - {metrics: [b], row: 1, col: 1}\n", "overlaps panels[0]"),
        ("panels: [\n", "invalid YAML"),
        ("- just a list\n", "a dashboard spec is a mapping"),
    ],
)
def test_invalid_specs(text, fragment):
    ps = problems(text)
    assert any(fragment in p for p in ps), ps


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(SpecError, match="nope.yaml: no such dashboard spec"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match=r"no such dashboard spec.*did you mean 'health'"):
        find_spec("helth")


def test_user_specs_in_cwd_dashboards_are_found_without_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "mine.yaml").write_text("panels:\n  - metric: reward/mean\n")
    assert find_spec("mine") == tmp_path / "dashboards" / "mine.yaml"
    assert load_spec(find_spec("mine")).name == "mine"


def test_placement_row_major_with_spans_and_explicit_cells():
    spec = parse_spec(
        "layout: {cols: 2}\npanels:\n"
        "  - {metric: a}\n  - {metric: b}\n  - {metric: c, width: 2}\n  - {metric: d, row: 5, col: 2}\n"
        "  - {metric: e}\n"
    )
    assert spec.placements() == [(1, 1), (1, 2), (2, 1), (5, 2), (3, 1)]
    assert isinstance(spec, DashboardSpec)


def test_defaults_fill_unset_panel_fields():
    spec = parse_spec(
        "defaults: {aggregation: iqm, x: tokens, band: false}\npanels:\n"
        "  - {metric: a}\n  - {metric: b, group_by: run}\n  - {metric: c, aggregation: mean}\n"
    )
    a, b, c = (p.resolved(spec.defaults) for p in spec.panels)
    assert (a.aggregation, a.group_by, a.x, a.band) == ("iqm", "variant", "tokens", False)
    assert (b.aggregation, b.group_by) == ("none", "run")  # a run has nothing to aggregate
    assert c.aggregation == "mean"


def test_a_mismatch_record_panel_takes_no_metrics():
    (p,) = problems("panels:\n  - {kind: mismatch_record, metrics: [mismatch/kl]}\n")
    assert "a mismatch_record panel takes no `metrics`" in p
    assert (
        parse_spec("panels:\n  - {kind: mismatch_record, width: 2, log_y: true}\n").panels[0].kind == "mismatch_record"
    )
