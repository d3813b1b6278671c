"""`workbench compare` on a study with a grid: an arm is (variant, grid point), and each arm is
compared with the baseline variant's arm at the same grid point, paired by seed.

The store is real: the study YAML (2 variants x learner.lr in {3e-5, 1e-4} x 3 seeds) is expanded
by `workbench.study`, and each run is written through the project's own `RunTracker` with the
tags of `workbench.execution.run.run_tags` and the run label as its MLflow run name, exactly as a study run
writes it; only the training is replaced by planted metric values:

    final eval accuracy = 0.30 + 0.30 [lr = 1e-4] + 0.20 [dr_grpo and lr = 3e-5] + 0.05 seed + noise

So dr_grpo is better than grpo at lr = 3e-5 only. Pooling the grid points as seeds (what compare
did before arms) or comparing with the other grid point's baseline would get this wrong.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app
from workbench.compare import CompareSettings, compare_variants
from workbench.compare.arms import NO_BASELINE, grid_point, match_baselines
from workbench.results.reader import StudyReader
from workbench.results.readers.frames import arm_from_name

STUDY = "grid-arms"
SEEDS = (0, 1, 2)
NOISE_SD = 0.004
# Arm names as a user sees them: the run labels of workbench.study without "/seed=N".
GRPO_LO, GRPO_HI = "grpo/lr=3e-05", "grpo/lr=0.0001"
DR_LO, DR_HI = "dr_grpo/lr=3e-05", "dr_grpo/lr=0.0001"


def study_yaml() -> dict:
    return {
        "name": STUDY,
        "base": micro_run_config(),
        "variants": {"grpo": {}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
        "grid": {"learner.lr": [3.0e-5, 1.0e-4]},
        "seeds": list(SEEDS),
        "compare": {"baseline": "grpo", "metrics": ["final_eval_accuracy"]},
    }


def planted(variant: str, lr: float, seed: int, rng: np.random.Generator) -> float:
    effect = 0.20 if (variant == "dr_grpo" and lr == 3.0e-5) else 0.0
    return 0.30 + 0.30 * (lr == 1.0e-4) + effect + 0.05 * seed + rng.normal(0.0, NOISE_SD)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(root, uri, final)``: the store, and each run's planted final accuracy by label."""
    from workbench.execution.run import run_tags
    from workbench.study import expand, load_study
    from workbench.tracking.writer import RunTracker

    root = tmp_path_factory.mktemp("grid-arms")
    (root / "study.yaml").write_text(yaml.safe_dump(study_yaml(), sort_keys=False))
    specs = expand(load_study(root / "study.yaml"))
    assert len(specs) == 12
    uri = f"sqlite:///{root / 'mlflow.db'}"
    parent = RunTracker(uri, STUDY, f"study:{STUDY}", {"workbench.role": "study", "workbench.study": STUDY})
    parent.start()
    parent.log_text((root / "study.yaml").read_text(), "study.yaml")  # compare reads its `compare:` from here
    rng = np.random.default_rng(7)
    final: dict[str, float] = {}
    for spec in specs:
        value = planted(spec.variant, spec.grid["learner.lr"], spec.seed, rng)
        final[spec.label] = value
        tags = run_tags(STUDY, spec.variant, spec.config) | {"workbench.health": "ok", "workbench.health_reasons": ""}
        run = RunTracker(uri, STUDY, spec.label, tags, parent_run_id=parent.run_id)
        run.start()
        run.log_params(spec.config.flat())
        for step in range(7):
            run.log_metrics({"reward/mean": value * step / 6}, step)
        for step, acc in [(0, 0.1), (2, value), (4, value), (6, value)]:  # last 3 evals: the planted value
            run.log_metrics({"eval/accuracy": acc}, step)
        run.finish("FINISHED")
    parent.finish("FINISHED")
    return root, uri, final


def compare_json(uri: str, *args: str, study: str = STUDY) -> dict:
    result = CliRunner().invoke(
        app, ["compare", study, "--tracking-uri", uri, "--format", "json", "--no-log", *args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def per_seed(final: dict[str, float], arm: str) -> np.ndarray:
    return np.array([final[f"{arm}/seed={s}"] for s in SEEDS])


# ---- the reader: each run's arm ----------------------------------------------------------------


def test_reader_gives_each_run_its_arm_from_the_run_label(store):
    _, uri, _ = store
    runs = StudyReader(uri, cache_dir=False).load_runs(STUDY)[1]
    assert len(runs) == 12
    for r in runs.to_dict("records"):
        assert r["run_name"] == f"{r['arm']}/seed={r['seed']}"  # the arm is the label without its seed
        assert r["arm"].startswith(r["variant"] + "/lr=")
    assert list(pd.unique(runs["arm"])) == [GRPO_LO, GRPO_HI, DR_LO, DR_HI]  # grouped, in run order


def test_arm_from_run_name_falls_back_to_the_variant():
    """Runs not named by a study label (older or hand-made runs) form one arm per variant, as before."""
    assert arm_from_name("dapo", "dapo/lr=3e-05/seed=1", "1") == "dapo/lr=3e-05"
    assert arm_from_name("dapo", "dapo/seed=1", "1") == "dapo"  # a study without a grid
    assert arm_from_name("dapo", "dapo/lr=3e-05/seed=1", "2") == "dapo"  # the name's seed is not the run's
    assert arm_from_name("dapo", "grpo/lr=3e-05/seed=1", "1") == "dapo"  # another variant's label
    assert arm_from_name("dapo", "dapo/lr=3e-05", "1") == "dapo"  # no seed suffix: not a study label
    assert arm_from_name("dapo", None, None) == "dapo"


def test_an_arm_tag_wins_over_the_run_name(store, tmp_path):
    root, _, _ = store
    shutil.copy(root / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    reader = StudyReader(uri, cache_dir=False)
    rid = reader.load_runs(STUDY)[1]["run_id"].iloc[0]
    client.set_tag(rid, "workbench.arm", "grpo/custom")
    runs = reader.load_runs(STUDY)[1].set_index("run_id")
    assert runs.at[rid, "arm"] == "grpo/custom"


# ---- compare ------------------------------------------------------------------------------------


def test_grid_study_compares_each_arm_with_the_baseline_at_its_grid_point(store):
    _, uri, final = store
    data = compare_json(uri)  # baseline and metric from the study's compare: section
    rows = {r["variant"]: r for r in data["rows"]}
    assert data["baseline"] == "grpo" and set(rows) == {GRPO_LO, GRPO_HI, DR_LO, DR_HI}  # 4 arms
    assert {a for a, r in rows.items() if r["verdict"] == "baseline"} == {GRPO_LO, GRPO_HI}
    compared = {a: r for a, r in rows.items() if r["verdict"] != "baseline"}
    assert set(compared) == {DR_LO, DR_HI}  # 2 comparisons
    for arm, base in [(DR_LO, GRPO_LO), (DR_HI, GRPO_HI)]:
        r = compared[arm]
        assert r["baseline_arm"] == base
        assert r["n_seeds"] == 3 and r["paired"] is True and r["test"] == "paired t"
        # delta is the mean of the per-seed differences with the same grid point's baseline
        assert r["delta"] == pytest.approx(float(np.mean(per_seed(final, arm) - per_seed(final, base))), abs=1e-12)
    assert compared[DR_LO]["delta"] == pytest.approx(0.20, abs=4 * NOISE_SD)
    assert compared[DR_LO]["verdict"] == "better"
    assert compared[DR_HI]["verdict"].startswith("inconclusive with 3 seeds")
    # Holm across the 2 arm comparisons: the smaller p-value is doubled
    p = sorted((r["p_value"], r["p_adjusted"]) for r in compared.values())
    assert p[0][1] == pytest.approx(min(1.0, 2 * p[0][0]))
    # the baseline rows are summaries of their own 3 runs
    assert rows[GRPO_LO]["mean"] == pytest.approx(per_seed(final, GRPO_LO).mean())


def test_pooling_grid_points_as_seeds_would_have_hidden_the_effect(store):
    """Why arms: the same runs grouped by variant only (the pre-arm behaviour) mix two learning
    rates whose gap (0.3) swamps the planted 0.2 effect; no pairing is possible (a seed twice)."""
    _, uri, _ = store
    from workbench.compare import summarize_runs

    frames = StudyReader(uri, cache_dir=False).load(STUDY, ["eval/accuracy"])
    summary = summarize_runs(frames.history, frames.runs, ["final_eval_accuracy"])
    pooled = compare_variants(summary.drop(columns="arm"), "grpo", ["final_eval_accuracy"]).df
    dr = pooled[pooled["variant"] == "dr_grpo"].iloc[0]
    assert dr["n_seeds"] == 6 and not dr["paired"] and dr["verdict"].startswith("inconclusive")


def test_terminal_table_and_html_report_show_arms(store, tmp_path, monkeypatch):
    _, uri, _ = store
    monkeypatch.setenv("COLUMNS", "250")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["compare", STUDY, "--tracking-uri", uri, "--no-log", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "baseline grpo at the same grid point" in result.output
    assert re.search(r"dr_grpo/lr=3e-05\s.*grpo/lr=3e-05\s.*better", result.output)  # arm, its baseline arm
    html = out.read_text()

    def cell(text: str) -> str:  # a left-aligned table cell
        return f'<td class="l">{text}</td>'

    assert html.count(cell(GRPO_LO)) == 3  # runs overview, its own row, DR_LO's baseline arm
    for arm in (GRPO_HI, DR_LO, DR_HI):
        assert cell(arm) in html
    assert "baseline: grpo at the same grid point" in html
    assert html.count('<th class="l">arm</th>') == 2 and '<th class="l">baseline arm</th>' in html
    # health matrix and hovers: runs labelled by their run label (variant/seed=N would repeat);
    # plotly's JSON writes "/" as \u002f
    assert "dr_grpo\\u002flr=0.0001\\u002fseed=2" in html and "dr_grpo\\u002fseed=2" not in html


def test_md_and_csv_name_arms(store):
    _, uri, _ = store
    result = CliRunner().invoke(app, ["compare", STUDY, "--tracking-uri", uri, "--no-log", "--format", "md"])
    assert result.exit_code == 0, result.output
    assert "| rank | arm | baseline arm | n_seeds |" in result.stdout
    assert f"| {DR_LO} | {GRPO_LO} | 3 |" in result.stdout
    result = CliRunner().invoke(app, ["compare", STUDY, "--tracking-uri", uri, "--no-log", "--format", "csv"])
    csv = pd.read_csv(pd.io.common.StringIO(result.stdout))
    assert set(csv["variant"]) == {GRPO_LO, GRPO_HI, DR_LO, DR_HI}
    assert dict(zip(csv["variant"], csv["baseline_arm"], strict=True))[DR_HI] == GRPO_HI


def test_baseline_can_name_one_arm(store):
    """--baseline VARIANT/POINT: every other arm against that one arm (here across grid points)."""
    _, uri, final = store
    data = compare_json(uri, "--baseline", GRPO_HI)
    rows = {r["variant"]: r for r in data["rows"]}
    assert [a for a, r in rows.items() if r["verdict"] == "baseline"] == [GRPO_HI]
    assert {r["baseline_arm"] for r in rows.values()} == {GRPO_HI}
    assert rows[GRPO_LO]["verdict"] == "worse" and rows[DR_LO]["verdict"] == "worse"  # 0.3 and 0.1 lower
    assert rows[DR_HI]["verdict"].startswith("inconclusive with 3 seeds")
    expected = np.mean(per_seed(final, DR_LO) - per_seed(final, GRPO_HI))
    assert rows[DR_LO]["delta"] == pytest.approx(expected, abs=1e-12)


def test_grid_point_without_baseline_runs_gets_an_explicit_verdict(store, tmp_path):
    """grpo's runs at lr=1e-4 are still running: dr_grpo there has no baseline; no crash, no pooling.
    Once they FAILED they count (ranked worst) and dr_grpo's verdict there is withheld, with why."""
    root, _, _ = store
    shutil.copy(root / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = StudyReader(uri, cache_dir=False).load_runs(STUDY)[1]
    client = MlflowClient(uri)
    for rid in runs.loc[runs["arm"] == GRPO_HI, "run_id"]:
        client.set_terminated(rid, "FAILED")
    failed = {r["variant"]: r for r in compare_json(uri)["rows"]}
    assert failed[DR_HI]["verdict"] == "withheld: baseline: all 3 runs failed"
    assert failed[GRPO_HI]["n_failed"] == 3 and failed[GRPO_HI]["n_finished"] == 0
    for rid in runs.loc[runs["arm"] == GRPO_HI, "run_id"]:
        client.update_run(rid, status="RUNNING")
    rows = {r["variant"]: r for r in compare_json(uri)["rows"]}
    assert set(rows) == {GRPO_LO, DR_LO, DR_HI}
    assert rows[DR_HI]["verdict"] == NO_BASELINE and rows[DR_HI]["baseline_arm"] == ""
    assert rows[DR_HI]["p_value"] is None and "no grpo run at lr=0.0001" in rows[DR_HI]["note"]
    assert rows[DR_LO]["verdict"] == "better" and rows[DR_LO]["p_adjusted"] == rows[DR_LO]["p_value"]  # m = 1


def test_bad_baseline_lists_variants_and_arms(store):
    _, uri, _ = store
    result = CliRunner().invoke(app, ["compare", STUDY, "--tracking-uri", uri, "--no-log", "--baseline", "ppo"])
    assert result.exit_code == 2
    text = result.output.replace("\n", "")
    assert "baseline 'ppo' is not a variant or arm" in text and GRPO_HI in text


def test_dashboard_groups_curves_by_arm(store):
    from workbench.viz import DashboardData, load_spec, render_dashboard
    from workbench.viz.spec_loader import find_spec
    from workbench.viz.style import BASELINE_GREYS

    _, uri, _ = store
    history, runs = StudyReader(uri, cache_dir=False).load(STUDY)
    rendered = render_dashboard(
        load_spec(find_spec("compare")), DashboardData(history, runs, baseline="grpo", n_resamples=50)
    )
    names = {t.name for t in rendered.figure.data if t.type == "scatter" and t.name}
    assert {GRPO_LO, GRPO_HI, DR_LO, DR_HI} <= names and "grpo" not in names
    bars = [t for t in rendered.figure.data if getattr(t, "meta", None) == "summary-interval"]  # intervals
    assert bars and set(bars[0].x) == {GRPO_LO, GRPO_HI, DR_LO, DR_HI}
    colors = {
        t.name: t.line.color for t in rendered.figure.data if t.type == "scatter" and t.name in names and t.line.color
    }
    assert {colors[GRPO_LO], colors[GRPO_HI]} <= set(BASELINE_GREYS) and colors[GRPO_LO] != colors[GRPO_HI]


# ---- compare_variants on frames -----------------------------------------------------------------


def test_without_a_grid_the_arm_column_changes_nothing():
    """A grid-less study's arms are its variants: the table is the one compare made before arms."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame(
        [
            {"variant": v, "seed": s, "acc": mu + rng.normal(0, 0.05)}
            for v, mu in [("grpo", 0.5), ("dapo", 0.7), ("gspo", 0.5)]
            for s in range(4)
        ]
    )
    plain = compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    armed = compare_variants(
        df.assign(arm=df["variant"]), "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True})
    )
    pd.testing.assert_frame_equal(plain.df, armed.df)
    assert not armed.by_arm and not armed.per_grid_point and armed.unit == "variant"
    assert set(plain.df["baseline_arm"]) == {"grpo"}
    assert "| rank | variant | n_seeds |" in plain.to_markdown()


def test_match_baselines_by_hand():
    arms = {"grpo/lr=1": "grpo", "grpo/lr=2": "grpo", "dapo/lr=1": "dapo", "dapo/lr=2": "dapo", "dapo/lr=3": "dapo"}
    assert match_baselines(arms, "grpo") == {
        "grpo/lr=1": "grpo/lr=1",
        "grpo/lr=2": "grpo/lr=2",
        "dapo/lr=1": "grpo/lr=1",
        "dapo/lr=2": "grpo/lr=2",
        "dapo/lr=3": None,
    }
    assert set(match_baselines(arms, "dapo/lr=3").values()) == {"dapo/lr=3"}
    assert match_baselines({"grpo": "grpo", "dapo": "dapo"}, "grpo") == {"grpo": "grpo", "dapo": "grpo"}
    assert grid_point("dapo/lr=1/clip=0.2", "dapo") == "lr=1/clip=0.2" and grid_point("dapo", "dapo") == ""
    with pytest.raises(ValueError, match=r"baseline 'ppo' not among the variants \['grpo', 'dapo'\] or arms"):
        match_baselines(arms, "ppo")


def test_correction_counts_every_arm_comparison():
    """4 arms compared at 2 grid points x 2 variants: Holm's m is 4, across grid points."""
    rng = np.random.default_rng(5)
    rows = [
        {"variant": v, "arm": f"{v}/lr={lr}", "seed": s, "acc": 0.5 + 0.02 * s + rng.normal(0, 0.01)}
        for v in ("grpo", "a", "b")
        for lr in (1, 2)
        for s in range(4)
    ]
    t = compare_variants(pd.DataFrame(rows), "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    compared = t.df[t.df["verdict"] != "baseline"]
    assert len(compared) == 4
    p, adj = compared["p_value"].to_numpy(), compared["p_adjusted"].to_numpy()
    assert adj[np.argmin(p)] == pytest.approx(min(1.0, 4 * p.min()))
