"""What a user sees of a search: the end-of-tune tables (best trials, parameter importances), the
HTML report written by default, the optimisation history on the search's MLflow run
(``trial_value``/``best_value`` by trial number) and the search's saved views."""

from __future__ import annotations

import math

import optuna
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.search.helpers import load_spec, write_search_study
from tests.search.test_schema import LR, spec_of
from workbench.search.history import BEST_VALUE, TRIAL_VALUE, history_metrics
from workbench.search.importance import param_importances
from workbench.viz.saved_view import decode_envelope, search_views


def _study(direction: str, outcomes: list[tuple[str, float | None]]):
    """An in-memory Optuna study whose trials end as ``outcomes`` (state, value), in order."""
    study = optuna.create_study(direction=direction)
    for state, value in outcomes:
        trial = study.ask({"learner.lr": optuna.distributions.FloatDistribution(1e-5, 1e-2, log=True)})
        if state == "PRUNED":
            trial.report(0.5, 1)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif state == "FAIL":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
    return study


def test_history_logs_each_complete_value_and_the_best_so_far_by_trial_number():
    spec = spec_of({"params": {"learner.lr": LR}, "n_trials": 5})  # eval/accuracy: maximised
    study = _study(
        "maximize", [("COMPLETE", 0.3), ("PRUNED", None), ("COMPLETE", 0.2), ("FAIL", None), ("COMPLETE", 0.6)]
    )
    trials = study.get_trials(deepcopy=False)
    got = [history_metrics(trials, spec, n) for n in range(5)]
    assert got == [
        {TRIAL_VALUE: 0.3, BEST_VALUE: 0.3},
        {BEST_VALUE: 0.3},  # pruned: no value of its own
        {TRIAL_VALUE: 0.2, BEST_VALUE: 0.3},
        {BEST_VALUE: 0.3},
        {TRIAL_VALUE: 0.6, BEST_VALUE: 0.6},
    ]
    # the same curve as Optuna's own optimisation history (its best value over complete trials)
    assert got[-1][BEST_VALUE] == study.best_value

    spec = spec_of({"metric": "length/incorrect_mean", "params": {"learner.lr": LR}, "n_trials": 2})  # minimised
    trials = _study("minimize", [("COMPLETE", 12.0), ("COMPLETE", 15.0)]).get_trials(deepcopy=False)
    assert history_metrics(trials, spec, 1) == {TRIAL_VALUE: 15.0, BEST_VALUE: 12.0}


def test_history_names_do_not_collide_with_catalogue_metrics():
    """Search-level metrics live on the search run only; the catalogue's per-step names are all group/name."""
    from workbench.metrics.catalogue import BY_NAME

    assert TRIAL_VALUE not in BY_NAME and BEST_VALUE not in BY_NAME
    assert all("/" in name for name in BY_NAME) and "/" not in TRIAL_VALUE + BEST_VALUE


def test_importances_rank_the_parameter_that_moves_the_value_or_say_why_not():
    spec = spec_of({"params": {"learner.lr": LR, "algorithm.preset": ["grpo", "dr_grpo"]}, "n_trials": 12})
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    assert param_importances(study, spec) == ({}, "0 complete trial(s): importances need at least 2")
    # the value follows log10(lr) alone; the preset is noise-free and irrelevant
    study.optimize(lambda t: math.log10(spec.suggest(t)["learner.lr"]), n_trials=12)
    importances, reason = param_importances(study, spec)
    assert reason == "" and list(importances) == ["learner.lr", "algorithm.preset"]  # most important first
    assert importances["learner.lr"][0] > 0.9 and math.isclose(sum(v[0] for v in importances.values()), 1.0)

    flat = optuna.create_study(direction="maximize")
    flat.optimize(lambda t: (spec.suggest(t), 0.0)[1], n_trials=3)  # every trial scores the same
    assert "every complete trial has the same" in param_importances(flat, spec)[1]
    one = spec_of({"params": {"learner.lr": LR}, "n_trials": 3})
    assert param_importances(study, one) == ({}, "one parameter (learner.lr): its importance is 1 by definition")


def test_search_views_chart_the_search_run_by_trial_and_the_trials_grouped_by_trial():
    history, trials = search_views(
        "demo:search", ["trial_value", "best_value"], ["eval/accuracy"], known_metrics={"eval/accuracy", "reward/mean"}
    )
    assert history.view_id == "workbench-search-demo-search" and trials.view_id == history.view_id + "-trials"
    assert (
        history.state["searchFilter"] == "tags.`workbench.role` = 'search' and tags.`workbench.search` = 'demo:search'"
    )
    assert [c["metricKey"] for c in history.state["compareRunCharts"]] == ["trial_value", "best_value"]
    assert "groupBy" not in history.state  # the search run is one top-level run
    assert trials.state["searchFilter"].startswith("tags.`workbench.role` = 'trial'")
    assert trials.state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "workbench.trial"}]
    shown = [(c["metricKey"], c["deleted"]) for c in trials.state["compareRunCharts"]]
    assert shown == [("eval/accuracy", False), ("reward/mean", True)]  # others listed, hidden


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_tune_prints_importances_and_best_trials_writes_the_report_and_logs_the_history(workdir):
    search = {
        "metric": "reward/mean",
        "pruner": "none",
        "n_trials": 3,
        "seeds": [0],
        "params": {"learner.lr": {"low": 1.0e-4, "high": 1.0e-1, "log": True}, "algorithm.preset": ["grpo", "dr_grpo"]},
        "enqueue": [
            {"learner.lr": 1.0e-4, "algorithm.preset": "grpo"},
            {"learner.lr": 2.0e-2, "algorithm.preset": "dr_grpo"},
            {"learner.lr": 1.0e-2, "algorithm.preset": "grpo"},
        ],
    }
    path = write_search_study(workdir / "study.yaml", "surface", search, steps=2)
    env = {"COLUMNS": "200"}
    from workbench.cli.main import app

    out = CliRunner().invoke(app, ["tune", str(path), "--quiet"], env=env)
    assert out.exit_code == 0, out.output
    assert "surface:search: best trials" in out.output
    assert "surface:search: parameter importances" in out.output  # 3 complete trials, 2 parameters
    assert "report: search-surface.html" in out.output and (workdir / "search-surface.html").exists()

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("surface")
    (run,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'search'")
    values = {m.step: m.value for m in client.get_metric_history(run.info.run_id, TRIAL_VALUE)}
    best = {m.step: m.value for m in client.get_metric_history(run.info.run_id, BEST_VALUE)}
    trials = {
        t.number: t.value
        for t in optuna.load_study(study_name="surface:search", storage=f"sqlite:///{workdir / 'optuna.db'}").trials
    }
    assert values == pytest.approx(trials) and set(best) == {0, 1, 2}
    assert [best[n] for n in range(3)] == pytest.approx([max(trials[k] for k in range(n + 1)) for n in range(3)])
    links = [key for key in exp.tags if key.startswith("mlflow.sharedViewState.workbench-search-surface-search")]
    assert len(links) == 2
    name, _, state = decode_envelope(exp.tags["mlflow.sharedViewState.workbench-search-surface-search"])
    assert "optimisation history" in name and "'surface:search'" in state["searchFilter"]
    assert "viewStateShareKey=workbench-search-surface-search" in run.data.tags["mlflow.note.content"]
    # rewritten at the end: the trials view charts the objective alone, every metric logged is hidden
    _, _, state = decode_envelope(exp.tags["mlflow.sharedViewState.workbench-search-surface-search-trials"])
    cards = {c["metricKey"]: c["deleted"] for c in state["compareRunCharts"]}
    assert [m for m, deleted in cards.items() if not deleted] == ["reward/mean"]
    assert cards["reward/overlong_soft"] and cards[BEST_VALUE]  # a shaping term; the parent's history
    assert "MLflow view search surface:search: trials" in out.output

    (workdir / "search-surface.html").unlink()
    out = CliRunner().invoke(app, ["tune", str(path), "--quiet", "--no-report", "--set", "search.n_trials=4"], env=env)
    assert out.exit_code == 0, out.output
    assert not (workdir / "search-surface.html").exists() and "report:" not in out.output
    assert {m.step for m in client.get_metric_history(run.info.run_id, BEST_VALUE)} == {0, 1, 2, 3}

    out = CliRunner().invoke(app, ["tune", str(path), "--report", "--no-report"], env=env)
    assert out.exit_code == 2 and "contradict" in out.output


def test_one_parameter_search_says_why_it_prints_no_importances(tmp_path):
    """The CLI's fallback line (no training: a hand-made study in the storage tune reads)."""
    from workbench.cli.output import console
    from workbench.cli.search import print_importances

    spec = load_spec(write_search_study(tmp_path / "s.yaml", "one", {"params": {"learner.lr": LR}, "n_trials": 2}))
    study = _study("maximize", [("COMPLETE", 0.1), ("COMPLETE", 0.2)])
    with console.capture() as captured:
        print_importances(study, spec)
    assert captured.get().strip() == (
        "parameter importances: not computed: one parameter (learner.lr): its importance is 1 by definition"
    )
