"""Dashboard specs as MLflow saved views (workbench/viz/saved_view.py, workbench/viz/mlflow_views.py).

Pure compiler: hand-listed chart cards of dashboards/health.yaml, the envelope MLflow's
frontend reads (plain or deflated, never over 20,000 characters), stable ids. Writing: a real
sqlite MLflow store (views, experiment description, run colours and health lines; rewriting
replaces, never duplicates; hand-written notes are left alone). End to end: `workbench run` of
the micro study leaves the views; `workbench dashboard` refreshes them; a broken spec stops
`workbench run` with exit 2 before anything is written. The browser check that MLflow's UI
opens them grouped is in tests/test_browser.py.
"""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from workbench.metrics import CATALOGUE
from workbench.viz.mlflow_views import (
    NOTE_MARKER,
    StudyLayout,
    list_views,
    publish_study_views,
    read_layout,
    run_note,
    study_question,
)
from workbench.viz.saved_view import (
    MAX_TAG_CHARS,
    VIEW_TAG_PREFIX,
    compile_view,
    decode_envelope,
    encode_envelope,
    view_id,
    view_link,
    views_for_specs,
)
from workbench.viz.spec_loader import find_spec, list_specs, load_spec, parse_spec

CANONICAL = [m.name for m in CATALOGUE]
HEALTH = load_spec(find_spec("health"))
GROUP_BY_VARIANT = {
    "aggregateFunction": "average",
    "groupByKeys": [{"mode": "tag", "groupByData": "workbench.variant"}],
}


def shown(view):
    return [c for c in view.state["compareRunCharts"] if not c["deleted"]]


# ---- the compiler (pure) ---------------------------------------------------------------------


def test_health_view_has_the_spec_panels_as_cards_in_order_grouped_by_variant():
    view = compile_view(HEALTH, known_metrics=CANONICAL)
    # dashboards/health.yaml, panel by panel (the health matrix becomes the health/status curve)
    assert [(c["type"], c["selectedMetricKeys"] if c["type"] == "LINE" else [c["metricKey"]]) for c in shown(view)] == [
        ("LINE", ["reward/mean"]),
        ("LINE", ["entropy/mean"]),
        ("LINE", ["length/correct_mean", "length/incorrect_mean"]),
        ("LINE", ["length/truncated_frac"]),
        ("LINE", ["clip/frac_low", "clip/frac_high"]),
        ("LINE", ["mismatch/prob_abs_diff_max"]),
        ("LINE", ["mismatch/kl"]),
        ("LINE", ["mismatch/is_clipped_frac"]),
        ("LINE", ["kl/ref"]),
        ("LINE", ["grad/norm"]),
        ("LINE", ["batch/zero_std_frac"]),
        ("LINE", ["health/status"]),
    ]
    assert [c["displayName"] for c in shown(view)][:2] == ["Reward", "Entropy (token-mean over responses)"]
    s = view.state
    assert s["searchFilter"] == "tags.`workbench.role` = 'run'"
    assert s["groupBy"] == GROUP_BY_VARIANT and s["useGroupedValuesInCharts"] is True
    assert s["runsHiddenMode"] == "SHOW_ALL"
    # order kept: the page re-sorts sections unless reordered, and inserts new charts alphabetically
    assert s["isAccordionReordered"] is True
    assert s["compareRunSections"] == [
        {
            "uuid": "workbench-health-section",
            "name": "Training health",
            "display": True,
            "isReordered": True,
            "deleted": False,
            "isGenerated": False,
            # the spec's 2 columns, cards tall enough for their legends (#32)
            "columns": 2,
            "cardHeight": 480,
        }
    ]
    assert {c["metricSectionId"] for c in s["compareRunCharts"]} == {"workbench-health-section"}
    assert view.view_id == "workbench-health" and view.name == "Training health (by variant)"


def test_every_metric_not_charted_is_listed_deleted_once_so_the_page_does_not_add_it_back():
    view = compile_view(HEALTH, known_metrics=[*CANONICAL, "custom/thing"])
    keys = [c["metricKey"] for c in view.state["compareRunCharts"]]
    assert len(keys) == len(set(keys))  # the page matches cards to metrics by metricKey
    deleted = {c["metricKey"] for c in view.state["compareRunCharts"] if c["deleted"]}
    # the second metric of a two-metric panel is charted, but not under its own metricKey
    assert deleted == (set(CANONICAL) | {"custom/thing"}) - {c["metricKey"] for c in shown(view)}
    assert {"length/incorrect_mean", "clip/frac_high", "custom/thing", "eval/accuracy"} <= deleted


def test_per_seed_view_is_ungrouped_and_has_its_own_id():
    grouped, per_seed = compile_view(HEALTH), compile_view(HEALTH, grouped=False)
    assert per_seed.view_id == "workbench-health-per-seed" != grouped.view_id
    # one group per run: ungrouped, MLflow folds the runs under their parent run and charts nothing
    assert per_seed.state["groupBy"] == {
        "aggregateFunction": "average",
        "groupByKeys": [
            {"mode": "tag", "groupByData": "workbench.variant"},
            {"mode": "tag", "groupByData": "workbench.seed"},
        ],
    }
    assert per_seed.name == "Training health (per seed)"
    assert [c["selectedMetricKeys"] for c in shown(per_seed)] == [c["selectedMetricKeys"] for c in shown(grouped)]


def test_grid_parameters_become_group_keys():
    view = compile_view(HEALTH, grid_params=["learner.lr"])
    assert view.state["groupBy"]["groupByKeys"] == [
        {"mode": "tag", "groupByData": "workbench.variant"},
        {"mode": "param", "groupByData": "learner.lr"},
    ]


def test_summary_panels_chart_the_metric_they_read_and_say_what_mlflow_cannot_show():
    spec = parse_spec(
        "name: s\npanels:\n  - {title: Final, kind: summary, metrics: [final_eval_accuracy, "
        "eval/length_mean]}\n  - {title: R, metric: reward/mean, log_y: true, x: tokens}\n"
    )
    view = compile_view(spec)
    assert [(c["type"], c["metricKey"]) for c in shown(view)] == [
        ("BAR", "eval/accuracy"),
        ("BAR", "eval/length_mean"),
        ("LINE", "reward/mean"),
    ]
    assert shown(view)[2]["scaleType"] == "log"
    assert view.notes == (
        "panel 'Final': MLflow draws the last logged value (no bootstrap CI)",
        "panel 'R': x = tokens is drawn against step in MLflow",
    )


def test_a_mismatch_record_panel_has_no_chart_and_says_why():
    """Its data is the runs' mismatch.json artifact, which MLflow's charts cannot read (the health spec's
    panel: the hand list of cards above has none for it)."""
    (title,) = [p.title for p in HEALTH.panels if p.kind == "mismatch_record"]
    assert compile_view(HEALTH).notes == (
        f"panel {title!r}: the mismatch record is a run artifact, not a metric: "
        "no MLflow chart (the HTML dashboard draws it)",
    )


def test_views_for_specs_puts_health_first_then_the_others_then_the_per_seed_view():
    compare = load_spec(find_spec("compare"))
    ids = [v.view_id for v in views_for_specs([compare, HEALTH])]
    assert ids == ["workbench-health", "workbench-compare", "workbench-health-per-seed"]


def test_view_ids_are_stable_and_safe_in_a_tag_key_and_a_url():
    assert view_id("health") == view_id("health") == "workbench-health"
    assert view_id("my spec/v2") == "workbench-my-spec-v2"
    assert view_link("7", "workbench-health", "http://h:5") == (
        "http://h:5/#/experiments/7/runs?viewStateShareKey=workbench-health"
        "&compareRunsMode=CHART&workflowType=machine_learning"
    )


@pytest.mark.parametrize("name", sorted(list_specs()))
def test_every_project_spec_compiles_to_a_view_that_fits_one_tag(name):
    for view in views_for_specs([load_spec(list_specs()[name])], known_metrics=CANONICAL):
        value = encode_envelope(view, 1000)
        assert len(value) <= MAX_TAG_CHARS
        assert decode_envelope(value) == (view.name, 1000, view.state)


def test_envelope_is_plain_json_when_it_fits_and_deflated_when_not():
    small = compile_view(HEALTH)
    value = json.loads(encode_envelope(small, 5, 6))
    assert value == {
        "name": small.name,
        "createdAt": 5,
        "updatedAt": 6,
        "state": json.dumps(small.state, separators=(",", ":")),
    }
    # 400 extra metrics (~170 characters per deleted card) push the plain state over the limit
    big = compile_view(HEALTH, known_metrics=[f"extra/metric_{i:03d}" for i in range(400)])
    assert len(json.dumps(big.state)) > MAX_TAG_CHARS
    state = json.loads(encode_envelope(big, 5))["state"]
    assert state.startswith("deflate;")
    # zlib format, as MLflow's pako.inflate reads it
    assert json.loads(zlib.decompress(base64.b64decode(state[len("deflate;") :]))) == big.state


def test_a_view_too_large_even_deflated_is_refused():
    # random-looking names do not compress: 3,000 of them cannot fit in 20,000 characters
    import hashlib

    names = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3000)]
    with pytest.raises(ValueError, match="even deflated"):
        encode_envelope(compile_view(HEALTH, known_metrics=names), 1)


def test_run_note_is_one_line():
    assert run_note({"workbench.health": "warn", "workbench.health_reasons": "length_blowup@2"}, "FINISHED") == (
        "rl-workbench health: warn (length_blowup@2) · FINISHED"
    )
    assert run_note({"workbench.health": "ok"}, "FINISHED") == "rl-workbench health: ok (no rule fired) · FINISHED"
    assert run_note({}, "RUNNING") == "rl-workbench health: not judged yet · RUNNING"


def test_study_question_is_the_description_else_the_leading_comment(tmp_path):
    from workbench.study import load_study

    path = tmp_path / "s.yaml"
    path.write_text("# Does Dr. GRPO\n# shorten wrong answers?\nname: s\nbase: {model: {builtin: tiny}}\n")
    assert study_question(load_study(path)) == "Does Dr. GRPO shorten wrong answers?"
    path.write_text("# comment\nname: s\ndescription: >\n  The question.\nbase: {model: {builtin: tiny}}\n")
    assert study_question(load_study(path)) == "The question."


# ---- writing to a real MLflow store ------------------------------------------------------------


@pytest.fixture()
def store(tmp_path):
    """A real sqlite store with a study experiment: 2 variants x 2 seeds of finished runs."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("st", artifact_location=(tmp_path / "art").as_uri())
    runs = {}
    for variant, health in (("grpo", "ok"), ("dr_grpo", "warn")):
        for seed in (0, 1):
            run = client.create_run(
                exp,
                run_name=f"{variant}/seed={seed}",
                tags={
                    "workbench.role": "run",
                    "workbench.variant": variant,
                    "workbench.seed": str(seed),
                    "workbench.health": health,
                    "workbench.health_reasons": "" if health == "ok" else "length_blowup@2",
                },
            )
            client.log_metric(run.info.run_id, "reward/mean", 0.5, step=1)
            client.log_metric(run.info.run_id, "my/extra", 1.0, step=1)
            client.set_terminated(run.info.run_id)
            runs[(variant, seed)] = run.info.run_id
    layout = StudyLayout(study="st", question="Which one?", variants=["grpo", "dr_grpo"], baseline="grpo", seeds=[0, 1])
    return client, exp, runs, layout


def view_tags(client, exp):
    return {k: v for k, v in client.get_experiment(exp).tags.items() if k.startswith(VIEW_TAG_PREFIX)}


def test_publish_writes_the_views_the_description_and_each_runs_colour_and_health(store):
    client, exp, runs, layout = store
    compare = load_spec(find_spec("compare"))
    links = publish_study_views(client, exp, layout, [compare, HEALTH], now_ms=1000)
    assert [v.view_id for v in links] == ["workbench-health", "workbench-compare", "workbench-health-per-seed"]
    tags = view_tags(client, exp)
    assert set(tags) == {VIEW_TAG_PREFIX + v.view_id for v in links}
    name, created, state = decode_envelope(tags[VIEW_TAG_PREFIX + "workbench-health"])
    assert (name, created, state["groupBy"]) == ("Training health (by variant)", 1000, GROUP_BY_VARIANT)
    # a metric the runs logged that no panel shows is listed deleted
    assert any(c["metricKey"] == "my/extra" and c["deleted"] for c in state["compareRunCharts"])
    note = client.get_experiment(exp).tags["mlflow.note.content"]
    assert "Which one?" in note and "`grpo`, `dr_grpo`" in note and NOTE_MARKER in note
    assert f"(#/experiments/{exp}/runs?viewStateShareKey=workbench-health&compareRunsMode=CHART" in note
    assert "workbench compare st" in note and "seeds 0, 1." in note
    assert client.get_experiment(exp).tags["mlflow.experimentKind"] == "custom_model_development"
    colours = {k: client.get_run(r).data.tags["mlflow.runColor"] for k, r in runs.items()}
    # baseline grey, the other variant the first palette colour (as the HTML reports draw them)
    assert colours == {
        ("grpo", 0): "#4D4D4D",
        ("grpo", 1): "#4D4D4D",
        ("dr_grpo", 0): "#0072B2",
        ("dr_grpo", 1): "#0072B2",
    }
    assert client.get_run(runs[("dr_grpo", 1)]).data.tags["mlflow.note.content"] == (
        "rl-workbench health: warn (length_blowup@2) · FINISHED"
    )
    assert read_layout(client, exp) == layout
    assert [v.view_id for v in list_views(exp, client.get_experiment(exp).tags)] == [v.view_id for v in links]


def test_rewriting_replaces_the_views_under_the_same_ids_and_keeps_their_creation_time(store):
    client, exp, _, layout = store
    publish_study_views(client, exp, layout, [HEALTH], now_ms=1000)
    first = view_tags(client, exp)
    publish_study_views(client, exp, layout, [HEALTH], now_ms=2000)
    second = view_tags(client, exp)
    assert set(second) == set(first) and len(second) == 2
    for value in second.values():
        assert decode_envelope(value)[1] == 1000 and json.loads(value)["updatedAt"] == 2000


def test_hand_written_notes_and_views_saved_in_the_ui_are_left_alone(store):
    client, exp, runs, layout = store
    client.set_experiment_tag(exp, "mlflow.note.content", "my own notes")
    client.set_tag(runs[("grpo", 0)], "mlflow.note.content", "checked by hand")
    hand_made = json.dumps({"name": "Mine", "createdAt": 1, "state": json.dumps({"searchFilter": ""})})
    client.set_experiment_tag(exp, VIEW_TAG_PREFIX + "abc123", hand_made)
    links = publish_study_views(client, exp, layout, [HEALTH])
    assert client.get_experiment(exp).tags["mlflow.note.content"] == "my own notes"
    assert client.get_run(runs[("grpo", 0)]).data.tags["mlflow.note.content"] == "checked by hand"
    assert client.get_experiment(exp).tags[VIEW_TAG_PREFIX + "abc123"] == hand_made
    listed = list_views(exp, client.get_experiment(exp).tags)
    assert [v.view_id for v in listed] == [*(v.view_id for v in links), "abc123"]


# ---- through the CLI -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_study_run_leaves_the_views_and_workbench_dashboard_refreshes_them(tmp_path_factory, monkeypatch):
    from tests.viz.micro_study import STUDY, build_micro_study, copy_store
    from workbench.cli.main import app

    home = tmp_path_factory.mktemp("views-home")
    uri = copy_store(build_micro_study(tmp_path_factory), home)  # `workbench run` of the micro study
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(STUDY).experiment_id
    tags = client.get_experiment(exp).tags
    ids = [v.view_id for v in list_views(exp, tags)]
    assert ids[0] == "workbench-health" and "workbench-health-per-seed" in ids and "workbench-compare" in ids
    children = client.search_runs([exp], "tags.`workbench.role` = 'run'")
    assert len(children) == 4
    for run in children:  # refreshed when the study ended: every run has its colour and health line
        assert run.data.tags["mlflow.runColor"].startswith("#")
        assert run.data.tags["mlflow.note.content"].startswith("rl-workbench health: ")
    created = {k: decode_envelope(v)[1] for k, v in tags.items() if k.startswith(VIEW_TAG_PREFIX)}

    monkeypatch.chdir(home)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(app, ["dashboard", STUDY, "--spec", "health"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # full URLs (issue #32), at the address `workbench ui` serves a local store by default
    assert (
        f"  Training health (by variant): http://127.0.0.1:5000/#/experiments/{exp}/runs?"
        "viewStateShareKey=workbench-health&compareRunsMode=CHART"
    ) in result.output, result.output
    after = {
        k: decode_envelope(v)[1] for k, v in client.get_experiment(exp).tags.items() if k.startswith(VIEW_TAG_PREFIX)
    }
    assert after == created  # same views, rewritten in place


def test_a_broken_dashboard_spec_stops_workbench_run_with_exit_2_before_anything_is_written(tmp_path, monkeypatch):
    import yaml

    from tests.conftest import micro_run_config
    from workbench.cli.main import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "mine.yaml").write_text("panels:\n  - {metric: reward/mean, aggregation: median}\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": micro_run_config()}))
    result = CliRunner().invoke(app, ["run", "s.yaml", "--quiet"])
    assert result.exit_code == 2, result.output
    assert "mine.yaml:2: panels[0].aggregation: expected 'mean', 'iqm' or 'none'" in result.output
    assert not (tmp_path / "mlflow.db").exists()


def test_views_are_written_when_a_study_starts_before_any_run(tmp_path, monkeypatch):
    """open_study (the start of `workbench run` and of every `workbench worker`) writes them, so a
    running study is browsable."""
    import yaml

    from tests.conftest import micro_run_config
    from workbench.execution.study import open_study
    from workbench.study import expand, load_study

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "s.yaml").write_text(
        "# Is dr_grpo any different?\n"
        + yaml.safe_dump(
            {
                "name": "s",
                "base": micro_run_config(),
                "variants": {"grpo": {}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
                "grid": {"learner.lr": [1.0e-4, 3.0e-4]},
            }
        )
    )
    study = load_study(tmp_path / "s.yaml")
    ctx = open_study(study, expand(study))
    client = MlflowClient(ctx.tracking_uri)
    tags = client.get_experiment(ctx.experiment_id).tags
    assert client.search_runs([ctx.experiment_id], "tags.`workbench.role` = 'run'") == []
    views = list_views(ctx.experiment_id, tags)
    assert [v.view_id for v in views][0] == "workbench-health"
    _, _, state = decode_envelope(tags[VIEW_TAG_PREFIX + "workbench-health"])
    assert state["groupBy"]["groupByKeys"][1] == {"mode": "param", "groupByData": "learner.lr"}  # the grid axis
    assert tags["mlflow.note.content"].startswith("**Study `s`**: Is dr_grpo any different?")
    assert "grid over `learner.lr`" in tags["mlflow.note.content"]


def test_the_description_names_the_seeds_run_so_far(store):
    """`run --only seed=0` on a study with seeds 0, 1, 2: the description says seed 0 so far (#32)."""
    client, exp, runs, layout = store
    layout.seeds = [0, 1, 2]
    for run_id in runs.values():  # the store has seeds 0 and 1; pretend only seed 0 ran
        if client.get_run(run_id).data.tags["workbench.seed"] == "1":
            client.delete_run(run_id)
    publish_study_views(client, exp, layout, [HEALTH], starting_seeds={0})
    note = client.get_experiment(exp).tags["mlflow.note.content"]
    assert "seeds 0 so far (the study has 0, 1, 2)." in note, note
    publish_study_views(client, exp, layout, [HEALTH], starting_seeds={0, 1, 2})
    assert "; seeds 0, 1, 2." in client.get_experiment(exp).tags["mlflow.note.content"]
