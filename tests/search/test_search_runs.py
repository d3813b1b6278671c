"""Real searches on the micro model: pruning on learning curves and on health, the MLflow layout,
resuming, the report and the exported best configuration. In process (one worker)."""

from __future__ import annotations

import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState
from typer.testing import CliRunner

from tests.search.helpers import STRICT_HEALTH, load_spec, optuna_trials, trial_runs, write_search_study
from workbench.search.objective import PRUNE_REASON, PRUNED_BY, STEPS
from workbench.search.worker import TuneOptions, default_storage, run_search

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")]

# lr 1e-2 and 2e-2 learn to stop early (the overlong shaping rewards short answers); lr 1.0 collapses the
# policy's entropy at once (a failing health rule); lr 1e-4 barely moves and falls below the median at
# step 1. Enqueued, so the four trials run in this order whatever the sampler would pick.
PRUNING_SEARCH = {
    "metric": "reward/mean",
    "params": {"learner.lr": {"low": 1.0e-4, "high": 1.0, "log": True}},
    "pruner": {"name": "median", "n_startup_trials": 2},
    "n_trials": 4,
    "seeds": [0],
    "enqueue": [{"learner.lr": 0.01}, {"learner.lr": 0.02}, {"learner.lr": 1.0}, {"learner.lr": 1.0e-4}],
}


def invoke(*args):
    from workbench.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_pruning_is_real_and_every_trial_is_an_mlflow_child_of_the_search_run(workdir):
    path = write_search_study(workdir / "study.yaml", "prune", PRUNING_SEARCH, health=STRICT_HEALTH)
    spec = load_spec(path)
    result = run_search(spec, options=TuneOptions(log=lambda _: None))
    assert result.stopped == "budget" and result.counts["COMPLETE"] == 2 and result.counts["PRUNED"] == 2

    trials = {t.params["learner.lr"]: t for t in optuna_trials(spec, default_storage())}
    complete = [trials[0.01], trials[0.02]]
    health, pruned = trials[1.0], trials[1.0e-4]
    assert all(t.state == TrialState.COMPLETE for t in complete)
    assert health.state == pruned.state == TrialState.PRUNED
    # pruned trials used fewer learner steps than any complete one
    assert max(health.user_attrs[STEPS], pruned.user_attrs[STEPS]) < min(t.user_attrs[STEPS] for t in complete) == 4
    assert pruned.user_attrs[PRUNE_REASON] == "pruned by optuna at step 1" and pruned.user_attrs[PRUNED_BY] == "optuna"
    assert health.user_attrs[PRUNE_REASON].startswith("health: entropy_collapse")
    assert health.user_attrs[PRUNED_BY] == "health"
    # the learning curve Optuna saw: the objective at each eval step
    assert sorted(complete[0].intermediate_values) == [1, 2, 3, 4]  # not step 0: the untrained policy
    assert complete[0].value == pytest.approx(complete[0].intermediate_values[4])

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("prune")
    (search_run,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'search'")
    assert search_run.info.status == "FINISHED"
    runs = {r.data.tags["workbench.trial"]: r for r in trial_runs(client, "prune")}
    assert set(runs) == {"0", "1", "2", "3"}
    for number, run in runs.items():
        assert run.data.tags["mlflow.parentRunId"] == search_run.info.run_id
        trial = next(t for t in trials.values() if str(t.number) == number)
        assert float(run.data.params["learner.lr"]) == trial.params["learner.lr"]  # sampled values are params
        assert run.data.tags["workbench.trial_state"] == trial.state.name
    health_run = runs[str(health.number)]
    assert health_run.data.tags["workbench.health"] == "fail"
    assert health_run.data.tags[PRUNE_REASON] == health.user_attrs[PRUNE_REASON]
    pruned_run = runs[str(pruned.number)]
    assert pruned_run.data.tags["workbench.stop_reason"] == "pruned by optuna at step 1"
    assert {m.step for m in client.get_metric_history(pruned_run.info.run_id, "reward/mean")} == {0, 1}

    # --report and --export-best run no trials; the report is logged to the search run
    out = invoke("tune", path, "--report", "--export-best", workdir / "best.yaml")
    assert out.exit_code == 0, out.output
    html = (workdir / "search-prune.html").read_text()
    for title in ["Optimization history", "Intermediate values", "Parallel coordinates", "Parameter importances"]:
        assert f"<h2>{title}" in html
    artifacts = {a.path for a in client.list_artifacts(search_run.info.run_id)}
    assert {"search-prune.html", "trials.csv", "study.yaml", "search.json"} <= artifacts
    assert len(optuna_trials(spec, default_storage())) == 4
    exported = yaml.safe_load((workdir / "best.yaml").read_text())
    assert exported == {"include": "study.yaml", "variants": {"base": {}, "tuned": {"learner": {"lr": 0.02}}}}
    from workbench.study import expand, load_study

    tuned = [s for s in expand(load_study(workdir / "best.yaml")) if s.variant == "tuned"]
    assert tuned and tuned[0].config.learner.lr == 0.02


def test_resume_continues_the_same_search_within_its_budget(workdir):
    search = {
        "metric": "reward/mean",
        "params": {"learner.lr": {"low": 1.0e-3, "high": 3.0e-2, "log": True}},
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "n_trials": 2,
        "seeds": [0, 1],
    }
    path = write_search_study(workdir / "study.yaml", "resume", search, steps=2)
    journal = workdir / "journal.log"

    first = invoke("tune", path, "--storage", journal)
    assert first.exit_code == 0, first.output
    assert "2/2 trials done" in first.output
    more = invoke("tune", path, "--storage", journal, "--set", "search.n_trials=3")
    assert more.exit_code == 0, more.output
    assert "trial 2 started:" in more.output and "trial 3" not in more.output and "changed" not in more.output
    again = invoke("tune", path, "--storage", journal, "--set", "search.n_trials=3")
    assert again.exit_code == 0 and "3/3 trials done" in again.output and "started:" not in again.output

    spec = load_spec(path)
    trials = optuna_trials(spec, str(journal))
    assert [t.number for t in trials] == [0, 1, 2] and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.params["learner.lr"] for t in trials}) == 3  # the sampler went on, it did not restart
    for t in trials:  # each trial ran both seeds: value = mean, one learner-step axis for the curve
        by_seed = t.user_attrs["workbench.values_by_seed"]
        assert set(by_seed) == {"0", "1"}
        assert t.value == pytest.approx((by_seed["0"][0] + by_seed["1"][0]) / 2)
        assert sorted(t.intermediate_values) == [1, 2, 3, 4] and t.user_attrs[STEPS] == 4
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resume")
    assert len(client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'search'")) == 1
    runs = trial_runs(client, "resume")
    assert sorted((r.data.tags["workbench.trial"], r.data.tags["workbench.seed"]) for r in runs) == [
        (str(n), str(s)) for n in range(3) for s in (0, 1)
    ]
