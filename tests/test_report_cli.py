"""`workbench health`, `workbench compare`, `workbench dashboard` on a real micro study."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.viz.micro_study import STUDY, build_micro_study, uri_of
from workbench.analysis.health_table import recheck_reports
from workbench.cli.main import app
from workbench.results.reader import StudyReader

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    return build_micro_study(tmp_path_factory)


@pytest.fixture
def in_study(study_dir, monkeypatch):
    """Run commands from the study's directory (its default local store), as a user would."""
    monkeypatch.chdir(study_dir)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # tables unwrapped, as in a wide terminal
    return study_dir


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def runs_of(client, role="run"):
    exp = client.get_experiment_by_name(STUDY)
    return client.search_runs([exp.experiment_id], f"tags.`workbench.role` = '{role}'")


def artifact_paths(client, run_id, path):
    return {a.path for a in client.list_artifacts(run_id, path)}


# ---- health ----------------------------------------------------------------------------------


def test_health_table_shows_first_trigger_steps(in_study):
    # One column per rule that fired, so the table needs width. rich fixes the width when the CLI's console is
    # created, if $COLUMNS is set then: in a process where another test had set a narrow $COLUMNS before the CLI
    # was first imported (an xdist worker's order), the table wraps the rule names whatever this test sets
    # (reproduced: COLUMNS=60 at import). The console's own width is set for this call instead.
    from workbench.cli.output import console

    before = console._width  # None: follows the terminal and $COLUMNS; else fixed at creation
    console.width = 1000
    try:
        result = invoke("health", STUDY)
    finally:
        console._width = before
    assert result.exit_code == 0, result.output
    client = MlflowClient(uri_of(in_study))
    fired = set()
    for run in runs_of(client):
        assert f"{run.data.tags['workbench.variant']}/seed={run.data.tags['workbench.seed']}" in result.output
        fired |= {r.split("@")[0] for r in run.data.tags["workbench.health_reasons"].split(",") if r}
    assert fired, "the micro study is configured so that some rules fire"
    for rule in fired:
        assert rule.replace("_", " ") in result.output
    assert "did not fire in any run" in result.output


def test_health_json_matches_the_runs_tags(in_study):
    result = invoke("health", "study.yaml", "--format", "json")  # the study file works as well as its name
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["study"] == STUDY and data["source"] == "health.json" and len(data["runs"]) == 4
    tags = {r.info.run_id: r.data.tags for r in runs_of(MlflowClient(uri_of(in_study)))}
    for run in data["runs"]:
        t = tags[run["run_id"]]
        assert run["health"] == t["workbench.health"] and run["reasons"] == t["workbench.health_reasons"]
        reasons = {r.split("@")[0]: int(r.split("@")[1]) for r in t["workbench.health_reasons"].split(",") if r}
        fired = {name: cell["step"] for name, cell in run["rules"].items() if cell["state"] in ("warn", "fail")}
        assert fired == reasons
        for name in fired:
            assert run["rules"][name]["message"] and run["rules"][name]["value"] is not None


def test_recheck_reproduces_the_logged_health_json(in_study):
    reader = StudyReader(uri_of(in_study), cache_dir=False)
    frames = reader.load(STUDY)
    logged = reader.health_reports(frames.runs)
    rechecked = recheck_reports(frames.history, frames.runs)
    for rid, live in logged.items():
        again = rechecked[rid]
        for key in ("status", "reasons", "first_fail_step", "steps_observed", "first_step", "last_step", "events"):
            assert again[key] == live[key], key
        for rule, r in live["rules"].items():
            assert again["rules"][rule]["first_trigger"] == r["first_trigger"], rule
            assert again["rules"][rule]["params"] == r["params"], rule  # the run's own config was used
    # and through the CLI: the same cells
    a = json.loads(invoke("health", STUDY, "--format", "json").output)
    b = json.loads(invoke("health", STUDY, "--recheck", "--format", "json").output)
    assert b["source"].startswith("recheck")
    strip = lambda d: [{k: v for k, v in r.items() if k != "source"} for r in d["runs"]]  # noqa: E731 - a one-line helper, named where it is used
    for x, y in zip(strip(a), strip(b), strict=True):
        for rule in x["rules"]:
            assert x["rules"][rule] == y["rules"][rule], (x["label"], rule)
        assert x == y


def test_health_of_one_run_with_another_preset(in_study):
    run = runs_of(MlflowClient(uri_of(in_study)))[0]
    result = invoke("health", run.info.run_id, "--preset", "off", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["run_id"] for r in data["runs"]] == [run.info.run_id]
    assert "off" in data["source"]
    assert all(c["state"] == "off" for c in data["runs"][0]["rules"].values())
    strict = json.loads(invoke("health", run.info.run_id, "--preset", "strict", "--format", "json").output)
    assert strict["runs"][0]["rules"]["length_blowup"]["state"] in ("ok", "warn")


def test_health_errors_are_one_line(in_study):
    result = CliRunner().invoke(app, ["health", "no-such-study"])
    assert result.exit_code == 2 and "no study 'no-such-study'" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["health", STUDY, "--preset", "lenient"])
    assert result.exit_code == 2 and "unknown health preset 'lenient'" in result.output


# ---- compare ---------------------------------------------------------------------------------


def test_compare_table_and_html_report_logged_to_the_parent_run(in_study, tmp_path):
    out = tmp_path / "report.html"
    result = invoke("compare", STUDY, "--out", out)
    assert result.exit_code == 0, result.output
    for text in ("final_eval_accuracy", "final_reward", "baseline grpo", "dr_grpo", "inconclusive"):
        assert text in result.output, text
    html = out.read_text()
    assert html.count("Plotly.newPlot") == 3  # summary bars, curves, health matrix
    assert not re.search(r"<script[^>]+src=", html)  # self-contained: nothing fetched
    for section in ("Which variant wins", "Summary metrics", "Curves", "Health"):
        assert f"<h2>{section}</h2>" in html
    client = MlflowClient(uri_of(in_study))
    (parent,) = runs_of(client, "study")
    logged = artifact_paths(client, parent.info.run_id, "reports")
    assert {"reports/compare.html", "reports/compare.csv", "reports/compare.json", "reports/compare.md"} <= logged
    local = client.download_artifacts(parent.info.run_id, "reports/compare.html", str(tmp_path))
    assert Path(local).stat().st_size > 3_000_000  # self-contained: plotly.js inside
    table = json.loads(
        Path(client.download_artifacts(parent.info.run_id, "reports/compare.json", str(tmp_path))).read_text()
    )
    assert table["baseline"] == "grpo" and table["metrics"] == ["final_eval_accuracy", "final_reward"]


def test_compare_logs_its_report_once_per_content(in_study):
    """Two `compare` calls on the same store log one report (issue 45: each call wrote its 5 MB
    again); a call whose report says something else logs it again."""
    client = MlflowClient(uri_of(in_study))
    (parent,) = runs_of(client, "study")
    root = Path(urlparse(client.get_run(parent.info.run_id).info.artifact_uri).path)
    names = ("compare.html", "compare.csv", "compare.json", "compare.md")

    def written() -> dict[str, int]:  # when each logged file was last written
        return {name: (root / "reports" / name).stat().st_mtime_ns for name in names}

    first = invoke("compare", STUDY, "--metric", "eval_auc")
    assert first.exit_code == 0, first.output
    assert "logged to MLflow run" in first.stderr
    before, sha = written(), client.get_run(parent.info.run_id).data.tags["workbench.compare_report_sha256"]
    again = invoke("compare", STUDY, "--metric", "eval_auc")
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    assert (
        "unchanged since it was logged to MLflow run" in again.stderr
        and "logged to MLflow run" not in again.stderr.replace("unchanged since it was logged to MLflow run", "")
    )
    assert written() == before
    other = invoke("compare", STUDY, "--metric", "eval_auc", "--metric", "final_eval_accuracy")
    assert other.exit_code == 0, other.output
    assert "logged to MLflow run" in other.stderr and "unchanged" not in other.stderr
    changed = written()
    assert all(changed[name] != before[name] for name in names)
    assert client.get_run(parent.info.run_id).data.tags["workbench.compare_report_sha256"] != sha


@pytest.mark.parametrize("fmt", ["json", "csv", "md"])
def test_compare_machine_formats(in_study, fmt):
    result = invoke(
        "compare",
        "study.yaml",
        "--metric",
        "eval/accuracy",
        "--metric",
        "eval_auc",
        "--baseline",
        "dr_grpo",
        "--format",
        fmt,
        "--no-log",
    )
    assert result.exit_code == 0, result.output
    if fmt == "json":
        data = json.loads(result.stdout)
        assert data["baseline"] == "dr_grpo" and data["metrics"] == ["final:eval/accuracy", "eval_auc"]
        assert len(data["rows"]) == 4 and {r["variant"] for r in data["rows"]} == {"grpo", "dr_grpo"}
    elif fmt == "csv":
        header = result.stdout.splitlines()[0].split(",")
        assert header[:3] == ["metric", "rank", "variant"] and len(result.stdout.splitlines()) == 5
    else:
        assert "### final:eval/accuracy" in result.stdout and "| **dr_grpo** |" in result.stdout


def test_compare_bad_input_exits_2(in_study):
    for args, message in [
        (["--baseline", "ppo"], "baseline 'ppo' is not a variant"),
        (["--metric", "final_eval_acc"], "did you mean 'final_eval_accuracy'"),
        (["--format", "xml"], "--format must be one of"),
        (["--spec", "nope"], "no such dashboard spec"),
        (["--png", "figure.jpg"], "--png: figure.jpg must end in .png"),
        (["--png", "."], "must end in .png"),
    ]:
        result = CliRunner().invoke(app, ["compare", STUDY, "--no-log", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
    assert not Path("figure.jpg").exists()


# ---- dashboard -------------------------------------------------------------------------------


def test_dashboard_logs_html_to_the_parent_run(in_study, tmp_path):
    result = invoke("dashboard", STUDY, "--spec", "health", "--out", tmp_path / "h.html")
    assert result.exit_code == 0, result.output
    assert "dashboards/health.html" in result.output
    client = MlflowClient(uri_of(in_study))
    (parent,) = runs_of(client, "study")
    assert "dashboards/health.html" in artifact_paths(client, parent.info.run_id, "dashboards")
    assert (tmp_path / "h.html").stat().st_size > 3_000_000


def test_dashboard_of_one_run_is_logged_to_that_run(in_study):
    run = runs_of(MlflowClient(uri_of(in_study)))[0]
    result = invoke("dashboard", STUDY, "--run", run.info.run_id)  # default spec with --run: health
    assert result.exit_code == 0, result.output
    assert run.info.run_id in result.output
    assert "dashboards/health.html" in artifact_paths(MlflowClient(uri_of(in_study)), run.info.run_id, "dashboards")


def test_user_spec_without_code_and_spec_errors(in_study):
    specs = in_study / "dashboards"
    specs.mkdir(exist_ok=True)
    (specs / "mine.yaml").write_text(
        "title: Mine\npanels:\n  - {metric: reward/mean, aggregation: iqm}\n"
        "  - {kind: summary, metrics: [final_reward]}\n"
    )
    result = invoke("dashboard", STUDY, "--spec", "mine", "--no-log")
    assert result.exit_code == 0, result.output
    assert "2/2 panels with data" in result.output
    (specs / "broken.yaml").write_text("panels:\n  - {metric: reward/mean, aggregation: median}\n")
    try:
        result = CliRunner().invoke(app, ["dashboard", STUDY, "--spec", "broken"])
        assert result.exit_code == 2
        assert "broken.yaml:2: panels[0].aggregation: expected 'mean', 'iqm' or 'none'" in result.output.replace(
            "\n", ""
        )
    finally:  # the micro study's directory is shared by the session: `run` there reads every spec in it
        (specs / "broken.yaml").unlink()
        (specs / "mine.yaml").unlink()


def test_compare_names_the_interval_over_seeds_and_problems(workdir, monkeypatch):
    """Runs written to a real local store by the run writer (eval/accuracy and eval/problems.csv.gz,
    as a run logs them; the micro model's accuracy is 0 everywhere, so its study has no variance to
    show): compare adds the intervals over seeds and problems and names their method in every format."""
    import numpy as np

    from workbench.compare.problems import TWO_WAY_METHOD
    from workbench.tracking.artifacts import PROBLEMS_ARTIFACT, encode_problem_rows
    from workbench.tracking.writer import RunTracker

    monkeypatch.setenv("COLUMNS", "300")
    rng, uri, steps, ids = np.random.default_rng(0), f"sqlite:///{workdir / 'mlflow.db'}", [0, 5, 10], range(40)
    for variant, p in (("grpo", 0.4), ("dr_grpo", 0.5)):
        for seed in range(3):
            tracker = RunTracker(
                uri,
                "two-way",
                f"{variant}/seed={seed}",
                {
                    "workbench.role": "run",
                    "workbench.study": "two-way",
                    "workbench.variant": variant,
                    "workbench.seed": str(seed),
                },
            )
            tracker.start()
            correct = rng.binomial(1, p, (len(steps), len(ids)))
            for i, step in enumerate(steps):
                tracker.log_metrics({"eval/accuracy": correct[i].mean(), "eval/n_problems": len(ids)}, step)
            tracker.log_bytes(
                encode_problem_rows(
                    {
                        "step": np.repeat(steps, len(ids)),
                        "problem_id": [f"q{j}" for _ in steps for j in ids],
                        "correct": correct.ravel(),
                        "length": np.full(correct.size, 7),
                        "truncated": np.zeros(correct.size, int),
                    }
                ),
                PROBLEMS_ARTIFACT,
            )
            tracker.finish("FINISHED")
    for fmt in ("table", "md", "json", "csv"):
        result = invoke("compare", "two-way", "--baseline", "grpo", "--format", fmt, "--no-log")
        assert result.exit_code == 0, result.output
        assert TWO_WAY_METHOD in result.output, fmt
    assert "Δ [CI over seeds and problems]" in invoke("compare", "two-way", "--no-log").output
