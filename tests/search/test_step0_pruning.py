"""Judging a trial on what learning did, not where it started (issue #30, point 1).

Step 0's eval is the untrained policy, the same for every trial. Reported to the pruner it becomes
a collapsed trial's best intermediate value, and the median pruner (which compares a trial's
*best* value so far with the median of the others) never prunes it; counted in a ``max`` summary
it scores the collapsed trial its untrained value. These tests drive the real trial objective
(:class:`~workbench.search.objective.TrialObjective`: its ``trial.report``/``should_prune`` calls,
the real Optuna pruners on a real sqlite storage) with recorded eval curves in place of training
(``fake_runs``); the last one runs the micro model for real.
"""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from tests.search.helpers import (
    load_spec,
    optuna_trials,
    search_run_config,
    write_search_study,
)
from tests.search.test_objective import FakeClient, fake_runs
from workbench.search.objective import (
    INTERMEDIATE_SEEDS,
    PRUNE_REASON,
    STEPS,
    SearchContext,
    TrialObjective,
)
from workbench.search.spec import parse_search
from workbench.study import validate_study

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # PatientPruner

# Held-out accuracy at eval steps 0..4 (eval before each of 4 updates, then a final eval), keyed by
# learner.lr. All start at the untrained 0.42; the healthy trials dip, then learn (within noise of
# the start, as in the search); lr 0.5 collapses to 0.0 by its second eval (step 1).
CURVES = {
    0.01: [0.42, 0.40, 0.43, 0.45, 0.47],
    0.02: [0.42, 0.38, 0.41, 0.43, 0.44],
    0.5: [0.42, 0.0, 0.0, 0.0, 0.0],
    0.2: [0.42, 0.30, 0.20, 0.10, 0.05],  # declines slowly (the patient pruner's case)
}
HEALTHY, COLLAPSED, DECLINING = (0.01, 0.02), 0.5, 0.2


def recorded(cfg, step):
    return CURVES[cfg.learner.lr][step]


def stored_search(tmp_path, monkeypatch, search: dict, *, seeds=(0,), db: str = "optuna.db", lrs=(*HEALTHY, COLLAPSED)):
    """A search over the recorded curves on a real sqlite Optuna storage; runs the trials of
    ``lrs`` in order (healthy ones first) and returns them by learner.lr."""
    search = {
        "params": {"learner.lr": {"low": 1e-3, "high": 1.0, "log": True}},
        "n_trials": len(lrs),
        "seeds": list(seeds),
    } | search
    spec = parse_search(validate_study({"name": "step0", "base": search_run_config(steps=4), "search": search}))
    client = FakeClient()
    fake_runs(monkeypatch, client, lambda cfg, step: {}, evals=recorded)
    objective = TrialObjective(spec, SearchContext("sqlite://", "0", "parent", client), "test:1", log=lambda _: None)
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / db}", study_name="step0", directions=spec.directions, pruner=spec.make_pruner()
    )
    for lr in lrs:
        study.enqueue_trial({"learner.lr": lr})
    study.optimize(objective, n_trials=len(lrs))
    reloaded = optuna.load_study(study_name="step0", storage=f"sqlite:///{tmp_path / db}")
    return {t.params["learner.lr"]: t for t in reloaded.trials}


def test_median_pruner_prunes_a_collapse_at_the_eval_it_happens(tmp_path, monkeypatch):
    trials = stored_search(tmp_path, monkeypatch, {"pruner": {"name": "median", "n_startup_trials": 2}})
    collapsed = trials[COLLAPSED]
    assert collapsed.state == TrialState.PRUNED
    assert collapsed.user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"  # its second eval
    assert collapsed.intermediate_values == {1: 0.0} and collapsed.user_attrs[STEPS] == 2
    for lr in HEALTHY:  # the curve Optuna stores starts after the first update
        assert trials[lr].state == TrialState.COMPLETE
        assert trials[lr].intermediate_values == pytest.approx({s: CURVES[lr][s] for s in range(1, 5)})


def test_with_step0_reported_the_collapse_hides_behind_its_untrained_value(tmp_path, monkeypatch):
    """The behaviour the default fixes, kept behind ``include_step0: true``: the collapsed trial's
    best value so far is its step-0 0.42, above the others' median (0.39) at step 1."""
    trials = stored_search(
        tmp_path, monkeypatch, {"pruner": {"name": "median", "n_startup_trials": 2}, "include_step0": True}
    )
    collapsed = trials[COLLAPSED]
    assert collapsed.intermediate_values[0] == 0.42 and collapsed.intermediate_values[1] == 0.0
    assert collapsed.user_attrs.get(PRUNE_REASON) != "pruned by optuna at step 1"


def test_summary_max_scores_a_collapse_below_the_healthy_runs(tmp_path, monkeypatch):
    trials = stored_search(tmp_path, monkeypatch, {"metric": "eval/accuracy", "summary": "max", "pruner": "none"})
    assert all(t.state == TrialState.COMPLETE for t in trials.values())
    assert trials[COLLAPSED].value == 0.0 < min(trials[lr].value for lr in HEALTHY)
    assert [trials[lr].value for lr in HEALTHY] == [0.47, 0.44]  # the best eval after training began
    # counting step 0, the collapse would have scored its untrained 0.42
    with_start = stored_search(
        tmp_path,
        monkeypatch,
        {"metric": "eval/accuracy", "summary": "max", "pruner": "none", "include_step0": True},
        db="b.db",
    )
    assert with_start[COLLAPSED].value == 0.42


def test_threshold_prunes_a_collapse_at_its_first_eval_after_step_0(tmp_path, monkeypatch):
    trials = stored_search(tmp_path, monkeypatch, {"pruner": {"name": "threshold", "lower": 0.05}})
    assert trials[COLLAPSED].state == TrialState.PRUNED
    assert trials[COLLAPSED].user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"
    assert all(trials[lr].state == TrialState.COMPLETE for lr in HEALTHY)


def test_patient_waits_for_its_wrapped_pruner_to_agree_for_patience_evals(tmp_path, monkeypatch):
    """``patient`` prunes only when the wrapped pruner (here: median, which alone would prune the
    declining trial at step 1) says prune *and* the curve's best over its last ``patience`` + 1
    evals is below its best before them (by more than ``min_delta``): at step 3 (steps 2, 3 vs 1)."""
    median = {"name": "median", "n_startup_trials": 2}
    alone = stored_search(tmp_path, monkeypatch, {"pruner": median}, lrs=(*HEALTHY, DECLINING), db="median.db")
    assert alone[DECLINING].user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"
    trials = stored_search(
        tmp_path,
        monkeypatch,
        {"pruner": {"name": "patient", "patience": 1, "wrapped": median}},
        lrs=(*HEALTHY, DECLINING),
    )
    assert trials[DECLINING].state == TrialState.PRUNED
    assert trials[DECLINING].user_attrs[PRUNE_REASON] == "pruned by optuna at step 3"
    assert all(trials[lr].state == TrialState.COMPLETE for lr in HEALTHY)


def test_with_several_seeds_pruning_acts_on_the_running_mean(tmp_path, monkeypatch):
    """Seed 1 reports, at learner step 4 + s, the mean of both seeds at eval step s, and says so."""
    trials = stored_search(tmp_path, monkeypatch, {"pruner": "none"}, seeds=(0, 1))
    healthy = trials[0.01]
    assert healthy.intermediate_values == pytest.approx(
        {s: CURVES[0.01][s] for s in range(1, 5)} | {4 + s: CURVES[0.01][s] for s in range(1, 5)}
    )
    assert healthy.user_attrs[INTERMEDIATE_SEEDS] == {"1": 1, "2": 1, "3": 1, "4": 1, "5": 2, "6": 2, "7": 2, "8": 2}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_threshold_prunes_a_real_run_after_its_first_update(workdir):
    """The micro model never answers a held-out problem (eval/accuracy 0.0 from step 0 on): a real
    search with ``threshold: {lower: 0.05}`` prunes its trial at step 1, not at the untrained step 0."""
    from workbench.search.worker import TuneOptions, default_storage, run_search

    path = write_search_study(
        workdir / "study.yaml",
        "threshold",
        {
            "metric": "eval/accuracy",
            "params": {"learner.lr": {"low": 1e-3, "high": 1e-2, "log": True}},
            "pruner": {"name": "threshold", "lower": 0.05},
            "n_trials": 1,
            "seeds": [0],
        },
        steps=3,
    )
    spec = load_spec(path)
    run_search(spec, options=TuneOptions(log=lambda _: None))
    (trial,) = optuna_trials(spec, default_storage())
    assert trial.state == TrialState.PRUNED and trial.user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"
    assert trial.intermediate_values == {1: 0.0} and trial.user_attrs[STEPS] == 2
