"""The trial objective on scripted learning curves (no training): what is reported to Optuna, when a
trial is pruned and why, the mean over seeds, multi-objective values, constraints and the budget."""

from __future__ import annotations

import math
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

import workbench.execution.run
from tests.search.helpers import search_run_config
from workbench.execution.run import RunOutcome, StopRun
from workbench.search.objective import (
    INTERMEDIATE_SEEDS,
    OUTCOME,
    OVER_BUDGET,
    PRUNE_REASON,
    PRUNED_BY,
    STEPS,
    OverBudget,
    RunSummary,
    SearchContext,
    TrialFailed,
    TrialObjective,
)
from workbench.search.spec import parse_search
from workbench.study import validate_study
from workbench.train.evaluate import ProblemResults

optuna.logging.set_verbosity(optuna.logging.ERROR)
LR = {"low": 1e-4, "high": 1.0, "log": True}


class FakeClient:
    def __init__(self) -> None:
        self.tags: dict[str, dict[str, str]] = {}
        self.metrics: dict[str, dict[str, float]] = {}

    def get_run(self, run_id):
        return SimpleNamespace(data=SimpleNamespace(tags=self.tags.get(run_id, {})))

    def set_tag(self, run_id, key, value):
        self.tags.setdefault(run_id, {})[key] = value

    def log_metric(self, run_id, key, value):
        self.metrics.setdefault(run_id, {})[key] = value


def fake_runs(monkeypatch, client: FakeClient, curve, *, health_stop_at=None, fail=False, evals=None, problems=None):
    """Replace execute_run: ``curve(cfg, step) -> metrics`` per step, eval at every step
    (``eval/accuracy`` is ``evals(cfg, step)``, 0.0 without it, at step 0 before any update as in the
    real loop and at the final eval-only step too; with ``problems(cfg, step) -> [0/1 per problem]``
    each eval's per-problem results go to ``on_eval`` first, and the accuracy is their mean); a
    StopRun from on_step ends the run as execute_run does; ``health_stop_at`` ends it like a failing rule."""
    calls = []

    def execute_run(
        cfg,
        *,
        study,
        variant,
        label,
        parent_run_id=None,
        progress=None,
        on_step=None,
        role="run",
        extra_tags=None,
        on_eval=None,
    ):
        run_id = f"run{len(calls)}"
        calls.append((label, role, extra_tags, cfg))
        client.tags[run_id] = dict(extra_tags or {})
        if fail:
            return RunOutcome(label, variant, cfg.seed, cfg.run_key(), "FAILED", run_id, error="boom")
        steps = 0
        for step in range(cfg.rollout.steps + 1):
            metrics = {"eval/accuracy": 0.0 if evals is None else evals(cfg, step)}
            if problems is not None:
                solved = problems(cfg, step)
                metrics["eval/accuracy"] = sum(solved) / len(solved)
                if on_eval is not None:
                    on_eval(
                        step,
                        ProblemResults(
                            step=[step] * len(solved),
                            problem_id=[f"p{i}" for i in range(len(solved))],
                            correct=list(solved),
                            length=[1] * len(solved),
                            truncated=[0] * len(solved),
                        ),
                    )
            if step < cfg.rollout.steps:  # the last step is an eval only, as in the real loop
                metrics |= dict(curve(cfg, step)) | {"perf/step_s": 0.1}
                steps = step + 1
            try:
                on_step(step, metrics)
            except StopRun as stop:
                client.tags[run_id] |= {"workbench.stopped_early": "true", "workbench.stop_reason": stop.reason}
                break
            if health_stop_at is not None and step == health_stop_at:
                client.tags[run_id] |= {
                    "workbench.stopped_early": "true",
                    "workbench.stop_reason": "health: entropy_collapse@1",
                }
                break
        return RunOutcome(label, variant, cfg.seed, cfg.run_key(), "FINISHED", run_id, steps=steps)

    monkeypatch.setattr(workbench.execution.run, "execute_run", execute_run)
    return calls


def make(search: dict, steps: int = 4):
    base = search_run_config(steps=steps)
    spec = parse_search(validate_study({"name": "fake", "base": base, "search": search}))
    client = FakeClient()
    objective = TrialObjective(spec, SearchContext("sqlite://", "0", "parent", client), "test:1", log=lambda _: None)
    study = optuna.create_study(
        directions=spec.directions, pruner=spec.make_pruner(), sampler=optuna.samplers.RandomSampler(seed=0)
    )
    return spec, objective, study, client


def by_lr(cfg, step):
    """reward/mean rises with the learning rate: lr 0.1 climbs fastest."""
    return {"reward/mean": -1.0 + step * cfg.learner.lr}


def test_curves_are_reported_per_learner_step_and_a_worse_curve_is_pruned(monkeypatch):
    spec, objective, study, client = make(
        {
            "metric": "reward/mean",
            "params": {"learner.lr": LR},
            "n_trials": 5,
            "pruner": {"name": "median", "n_startup_trials": 1},
        }
    )
    calls = fake_runs(monkeypatch, client, by_lr)
    study.enqueue_trial({"learner.lr": 0.1})
    study.enqueue_trial({"learner.lr": 0.001})
    study.optimize(objective, n_trials=2)
    good, bad = study.trials
    assert good.state == TrialState.COMPLETE and good.value == pytest.approx(-1.0 + 3 * 0.1)  # last logged reward
    # step 0 (the untrained policy) is not reported: the curve starts after the first update
    assert good.intermediate_values == pytest.approx({s: -1.0 + s * 0.1 for s in range(1, 4)} | {4: -0.7})
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs[PRUNE_REASON] == "pruned by optuna at step 1" and bad.user_attrs[PRUNED_BY] == "optuna"
    assert bad.user_attrs[STEPS] == 2 < good.user_attrs[STEPS] == 4  # step 1 is logged after its update
    label, role, tags, cfg = calls[1]
    assert role == "trial" and tags["workbench.trial"] == "1" and cfg.learner.lr == 0.001
    assert client.tags["run1"]["workbench.trial_state"] == "PRUNED"
    assert client.tags["run1"][PRUNE_REASON] == "pruned by optuna at step 1"


def test_a_health_stop_prunes_the_trial_with_its_reason(monkeypatch):
    spec, objective, study, client = make(
        {"metric": "reward/mean", "params": {"learner.lr": LR}, "n_trials": 5, "pruner": "none"}
    )
    fake_runs(monkeypatch, client, by_lr, health_stop_at=1)
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs[PRUNE_REASON] == "health: entropy_collapse@1" and trial.user_attrs[PRUNED_BY] == "health"
    assert client.tags["run0"][PRUNE_REASON] == "health: entropy_collapse@1"


def test_seeds_are_averaged_and_reported_on_one_learner_step_axis(monkeypatch):
    spec, objective, study, client = make(
        {"metric": "reward/mean", "params": {"learner.lr": LR}, "n_trials": 5, "seeds": [0, 1], "pruner": "none"},
        steps=2,
    )
    fake_runs(monkeypatch, client, lambda cfg, step: {"reward/mean": step + 10.0 * cfg.seed})
    study.enqueue_trial({"learner.lr": 0.01})
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.value == pytest.approx(((0 + 1) + (10 + 1)) / 2)  # last reward of each seed, averaged
    # seed 0 at steps 1..2; seed 1 continues at 2 + s, reporting the mean of both seeds at its step s
    # (1.0 and 11.0); no step 0 of either (the untrained policy)
    assert trial.intermediate_values == {1: 1.0, 2: 1.0, 3: 6.0, 4: 6.0}
    assert trial.user_attrs[INTERMEDIATE_SEEDS] == {"1": 1, "2": 1, "3": 2, "4": 2}
    assert trial.user_attrs[STEPS] == 4 and trial.user_attrs["workbench.values_by_seed"] == {"0": [1.0], "1": [11.0]}
    # where the trial started: the objective's metric at step 0, averaged over the seeds (0 and 10)
    assert trial.user_attrs["workbench.start_value"] == pytest.approx(5.0)


def test_multi_objective_values_summary_metrics_and_constraints(monkeypatch):
    spec, objective, study, client = make(
        {
            "objectives": [{"metric": "reward/mean"}, {"metric": "summary/tokens_per_correct"}],
            "params": {"learner.lr": LR},
            "n_trials": 5,
            "constraints": [{"metric": "length/mean", "max": 5}],
        },
        steps=2,
    )

    def curve(cfg, step):  # 16 completions per step (4 prompts x 4), a quarter correct, 64 tokens
        return {"reward/mean": 0.5, "accuracy/train": 0.25, "perf/sample_tokens": 64.0, "length/mean": 7.0}

    fake_runs(monkeypatch, client, curve)
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE
    # 2 RL steps x 64 tokens over 2 x 4 correct completions
    assert trial.values == pytest.approx([0.5, 16.0])
    assert trial.intermediate_values == {}  # Optuna has no pruning (and no report) for several objectives
    assert client.metrics["run0"]["summary/tokens_per_correct"] == pytest.approx(16.0)
    assert trial.constraints == pytest.approx({"length/mean<=5": 2.0})  # length 7 > 5: infeasible by 2


def test_a_failed_run_fails_the_trial(monkeypatch):
    spec, objective, study, client = make({"metric": "reward/mean", "params": {"learner.lr": LR}, "n_trials": 2})
    fake_runs(monkeypatch, client, by_lr, fail=True)
    study.optimize(objective, n_trials=1, catch=(TrialFailed,))
    (trial,) = study.trials
    assert trial.state == TrialState.FAIL and "boom" in trial.user_attrs["workbench.error"]
    assert objective.last_outcome == "FAILED"


def test_a_trial_started_after_the_budget_is_taken_runs_nothing(monkeypatch):
    spec, objective, study, client = make({"metric": "reward/mean", "params": {"learner.lr": LR}, "n_trials": 1})
    calls = fake_runs(monkeypatch, client, by_lr)
    other_worker = study.ask()  # RUNNING elsewhere: it holds the single slot
    study.optimize(objective, n_trials=1, catch=(OverBudget,))
    mine = study.trials[1]
    assert mine.state == TrialState.FAIL and mine.user_attrs[OUTCOME] == OVER_BUDGET and not calls
    assert other_worker.number == 0


def test_run_summary_reductions():
    cfg = validate_study({"name": "x", "base": search_run_config()}).base
    from workbench.config import RunConfig

    summary = RunSummary(RunConfig.model_validate(cfg))
    with_start = RunSummary(RunConfig.model_validate(cfg), include_step0=True)
    for step, value in enumerate([5.0, 3.0, 1.0, float("nan"), 2.0]):
        summary.observe(step, {"reward/mean": value, **({"eval/accuracy": 0.4} if step == 0 else {})})
        with_start.observe(step, {"reward/mean": value})
    assert summary.value("reward/mean", "last") == 2.0  # NaN points are skipped
    # step 0 (5.0, before any update) counts in no summary ...
    assert (summary.value("reward/mean", "max"), summary.value("reward/mean", "min")) == (3.0, 1.0)
    assert summary.value("reward/mean", "mean") == pytest.approx(2.0)
    assert summary.value("eval/accuracy", "max") == 0.4  # ... unless it is all there is
    # ... unless asked for (search.include_step0: true)
    assert with_start.value("reward/mean", "max") == 5.0
    assert with_start.value("reward/mean", "mean") == pytest.approx(11.0 / 4)
    assert math.isnan(summary.value("length/mean"))  # never logged
    assert math.isnan(summary.value("summary/tokens_per_correct"))  # nothing sampled
    summary.observe(5, {"perf/sample_tokens": 10.0, "accuracy/train": 0.0})
    assert summary.value("summary/tokens_per_correct") == math.inf  # tokens spent, none correct


N_PROBLEMS = 30


def solved_by_lr(cfg, step):
    """Per-problem results: lr 0.1 solves problems 0..23 (80%) at every eval, lr 0.001 problems
    0..5 (20%): on the 18 problems where they differ the weak trial is always the one that fails."""
    k = 24 if cfg.learner.lr == 0.1 else 6
    return [int(i < k) for i in range(N_PROBLEMS)]


def test_wilcoxon_prunes_a_trial_worse_on_the_same_problems_at_its_first_eval(monkeypatch):
    spec, objective, study, client = make(
        {
            "metric": "eval/accuracy",
            "params": {"learner.lr": LR},
            "n_trials": 5,
            "pruner": {"name": "wilcoxon", "p_threshold": 0.05},
        }
    )
    fake_runs(monkeypatch, client, by_lr, problems=solved_by_lr)
    study.enqueue_trial({"learner.lr": 0.1})
    study.enqueue_trial({"learner.lr": 0.001})
    study.optimize(objective, n_trials=2)
    good, bad = study.trials
    assert good.state == TrialState.COMPLETE and good.value == pytest.approx(0.8)
    # evals at steps 1..4 (step 0, the untrained policy, is not reported): one value per problem at
    # step e * 30 + i for the e-th eval and problem i
    assert sorted(good.intermediate_values) == list(range(4 * N_PROBLEMS))
    assert [good.intermediate_values[N_PROBLEMS + i] for i in range(N_PROBLEMS)] == solved_by_lr(
        spec.trial_config({"learner.lr": 0.1}, 0), 1
    )
    # the weak trial is worse on 18 of the 30 shared problems, better on none: the signed-rank test
    # rejects at its first eval (after 1 learner step) and the trial stops there
    assert bad.state == TrialState.PRUNED and bad.user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"
    assert sorted(bad.intermediate_values) == list(range(N_PROBLEMS))


def test_wilcoxon_does_not_prune_a_trial_that_only_differs_by_chance(monkeypatch):
    """Two equally good configurations that solve different problems (A solves the even ones, B
    the odd ones plus one): per-problem differences are balanced, so no trial is pruned."""
    spec, objective, study, client = make(
        {
            "metric": "eval/accuracy",
            "params": {"learner.lr": LR},
            "n_trials": 5,
            "pruner": {"name": "wilcoxon", "p_threshold": 0.05},
        }
    )

    def solved(cfg, step):
        return (
            [int(i % 2 == 0) for i in range(N_PROBLEMS)]
            if cfg.learner.lr == 0.1
            else [int(i % 2 == 1 or i == 0) for i in range(N_PROBLEMS)]
        )

    fake_runs(monkeypatch, client, by_lr, problems=solved)
    study.enqueue_trial({"learner.lr": 0.1})
    study.enqueue_trial({"learner.lr": 0.001})
    study.optimize(objective, n_trials=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_real_runs_feed_the_wilcoxon_pruner_one_value_per_eval_problem(workdir):
    """The real loop hands each eval's per-problem results to the trial (``on_eval``): a 2-step
    micro run with evals at steps 1 and 2 reports 2 x n_problems values, each 0 or 1, matching the
    per-problem table the run logs and its eval/accuracy."""
    from tests.search.helpers import load_spec, write_search_study
    from workbench.results.reader import StudyReader
    from workbench.search.worker import TuneOptions, run_search

    path = write_search_study(
        workdir / "study.yaml",
        "wilcoxon_real",
        {
            "metric": "eval/accuracy",
            "params": {"learner.lr": {"low": 1e-3, "high": 1e-2, "log": True}},
            "n_trials": 1,
            "seeds": [0],
            "pruner": "wilcoxon",
        },
        steps=2,
    )
    spec = load_spec(path)
    run_search(spec, options=TuneOptions(log=lambda _: None))
    (trial,) = optuna.load_study(study_name=spec.optuna_name, storage=f"sqlite:///{workdir / 'optuna.db'}").trials
    from mlflow import MlflowClient

    from tests.search.helpers import trial_runs

    (run,) = trial_runs(MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}"), "wilcoxon_real")
    reader = StudyReader(f"sqlite:///{workdir / 'mlflow.db'}")
    table = reader.problem_results(pd.DataFrame({"run_id": [run.info.run_id], "artifact_uri": [run.info.artifact_uri]}))
    n = int((table["step"] == 0).sum())
    assert n > 0 and sorted(trial.intermediate_values) == list(range(2 * n))
    for e, step in enumerate((1, 2)):
        at = table[table["step"] == step]["correct"].tolist()
        assert [trial.intermediate_values[e * n + i] for i in range(n)] == [float(c) for c in at]
