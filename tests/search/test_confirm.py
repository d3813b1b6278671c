"""Confirmation of the best trials on fresh seeds (issue #30, point 2).

The situation is constructed with recorded eval results per (learner.lr, seed) in place of
training (``fake_runs``), because it needs a trial whose search seed is lucky: a real run of the
micro model cannot be steered to that (its held-out accuracy is 0.0 everywhere). Everything else
is the real machinery: the trial objective and Optuna on a sqlite storage, the confirmation runs
through ``execute_run`` (patched) with their run keys, the ranking with ``workbench compare``'s
statistics, and ``workbench tune --export-best`` through the CLI.
"""

from __future__ import annotations

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tests.search.helpers import load_spec, write_search_study
from tests.search.test_objective import FakeClient, fake_runs
from workbench.search.confirm import (
    BASELINE,
    CONFIRMED,
    confirmed_arms,
    run_confirmation,
    search_ranked,
)
from workbench.search.objective import SearchContext, TrialObjective
from workbench.search.report import best_trials, write_report

optuna.logging.set_verbosity(optuna.logging.ERROR)

LUCKY, STEADY, WEAK = 0.05, 0.01, 0.002
SEARCH_SEED, FRESH = 0, [11, 12, 13]
# held-out accuracy after training, by learner.lr and seed: LUCKY's search seed drew 0.60, its
# fresh seeds show it is a 0.41 configuration; STEADY is a 0.55 one that drew 0.50
RESULTS = {
    LUCKY: {SEARCH_SEED: 0.60, 11: 0.40, 12: 0.42, 13: 0.41},
    STEADY: {SEARCH_SEED: 0.50, 11: 0.55, 12: 0.57, 13: 0.54},
    WEAK: {SEARCH_SEED: 0.30, 11: 0.30, 12: 0.31, 13: 0.29},
}
BASELINE_RESULTS = {SEARCH_SEED: 0.42, 11: 0.43, 12: 0.41, 13: 0.44}  # the variant's own lr: untuned


def recorded(cfg, step):
    if step == 0:
        return 0.42  # the untrained policy
    return RESULTS.get(cfg.learner.lr, BASELINE_RESULTS)[cfg.seed]


@pytest.mark.slow
def test_the_lucky_single_seed_winner_loses_on_confirmation_and_export_follows(tmp_path, monkeypatch):
    search = {
        "metric": "eval/accuracy",
        "params": {"learner.lr": {"low": 1e-3, "high": 0.1, "log": True}},
        "n_trials": 3,
        "seeds": [SEARCH_SEED],
        "pruner": "none",
        "enqueue": [{"learner.lr": lr} for lr in (LUCKY, STEADY, WEAK)],
        "confirm": {"top_k": 2, "seeds": FRESH},
    }
    path = write_search_study(tmp_path / "study.yaml", "confirm", search, steps=2)
    spec = load_spec(path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    client = FakeClient()
    calls = fake_runs(monkeypatch, client, lambda cfg, step: {}, evals=recorded)
    study = optuna.create_study(storage=storage, study_name=spec.optuna_name, directions=spec.directions)
    for fixed in spec.config.enqueue:
        study.enqueue_trial(fixed)
    ctx = SearchContext("sqlite://", "0", "parent", client)
    study.optimize(TrialObjective(spec, ctx, "test:1", log=lambda _: None), n_trials=3)
    lucky, steady, weak = study.trials
    assert [t.number for t in search_ranked(study, spec)] == [lucky.number, steady.number, weak.number]

    # the top 2 trials and the baseline, each on the 3 fresh seeds
    assert run_confirmation(study, spec, ctx, log=lambda _: None) == 9
    confirm_calls = calls[3:]
    assert sorted((tags["workbench.confirm_arm"], cfg.seed) for _, _, tags, cfg in confirm_calls) == sorted(
        (arm, seed) for arm in (f"trial {lucky.number}", f"trial {steady.number}", BASELINE) for seed in FRESH
    )
    assert all(role == "trial" and tags["workbench.confirm"] == "true" for _, role, tags, _ in confirm_calls)
    # idempotent: a second tune records nothing new and runs nothing
    assert run_confirmation(study, spec, ctx, log=lambda _: None) == 0 and len(calls) == 12
    assert len(study.user_attrs[CONFIRMED]) == 9

    arms = confirmed_arms(study, spec)
    assert [a.name for a in arms] == [f"trial {steady.number}", BASELINE, f"trial {lucky.number}"]
    best, baseline, was_lucky = arms
    assert best.estimate.value == pytest.approx((0.55 + 0.57 + 0.54) / 3) and best.estimate.method == "t"
    assert best.estimate.lo < best.estimate.value < best.estimate.hi
    assert was_lucky.vs_best == "better" and baseline.vs_best == "better"  # paired t, Holm-corrected
    # the results table and the export rank by the confirmed mean
    assert [t.number for t in best_trials(study, spec)] == [steady.number, lucky.number, weak.number]

    from workbench.cli.main import app

    out = CliRunner().invoke(
        app, ["tune", str(path), "--storage", storage, "--export-best", str(tmp_path / "best.yaml")]
    )
    assert out.exit_code == 0, out.output
    assert f"confirmed on 3 fresh seed(s): best trial {steady.number}" in " ".join(out.output.split())
    text = (tmp_path / "best.yaml").read_text()
    assert yaml.safe_load(text)["variants"]["tuned"] == {"learner": {"lr": STEADY}}
    assert yaml.safe_load(text)["seeds"] == list(FRESH)  # run on the seeds that confirmed it (#53)
    assert f"# confirmed on 3 fresh seed(s): best trial {steady.number}" in text
    report = write_report(study, spec, tmp_path / "report.html", log_to_mlflow=False).read_text()
    assert "Confirmation on fresh seeds" in report


def test_close_trials_are_said_to_be_indistinguishable(tmp_path, monkeypatch):
    """Two configurations within noise of each other and of the baseline: the ranking says so."""
    close = {
        LUCKY: {SEARCH_SEED: 0.5, 11: 0.44, 12: 0.40, 13: 0.47},
        STEADY: {SEARCH_SEED: 0.45, 11: 0.41, 12: 0.46, 13: 0.42},
    }
    search = {
        "metric": "eval/accuracy",
        "params": {"learner.lr": {"low": 1e-3, "high": 0.1, "log": True}},
        "n_trials": 2,
        "seeds": [SEARCH_SEED],
        "pruner": "none",
        "confirm": {"top_k": 2, "seeds": FRESH},
    }
    path = write_search_study(tmp_path / "study.yaml", "close", search, steps=1)
    spec = load_spec(path)
    client = FakeClient()
    fake_runs(
        monkeypatch,
        client,
        lambda cfg, step: {},
        evals=lambda cfg, step: close.get(cfg.learner.lr, BASELINE_RESULTS)[cfg.seed] if step else 0.42,
    )
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name=spec.optuna_name, directions=spec.directions
    )
    for lr in (LUCKY, STEADY):
        study.enqueue_trial({"learner.lr": lr})
    ctx = SearchContext("sqlite://", "0", "parent", client)
    study.optimize(TrialObjective(spec, ctx, "test:1", log=lambda _: None), n_trials=2)
    run_confirmation(study, spec, ctx, log=lambda _: None)
    from workbench.search.confirm import confirmation_lines

    lines = confirmation_lines(confirmed_arms(study, spec), spec)
    assert any(line.startswith("the top trials are not distinguishable from each other") for line in lines), lines
    assert any("not distinguishable from the baseline" in line for line in lines), lines


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_tune_confirms_after_the_budget_with_real_runs_once(workdir):
    """Real micro-model runs: after the budget, the best trial and the baseline run on the fresh
    seeds as MLflow children of the search run; tuning again starts no confirmation run."""
    from mlflow import MlflowClient

    from tests.search.helpers import trial_runs
    from workbench.search.worker import TuneOptions, run_search

    path = write_search_study(
        workdir / "study.yaml",
        "confirm_real",
        {
            "metric": "reward/mean",
            "params": {"learner.lr": {"low": 1e-3, "high": 1e-2, "log": True}},
            "n_trials": 1,
            "seeds": [0],
            "pruner": "none",
            "confirm": {"top_k": 1, "seeds": [5, 6]},
        },
        steps=1,
    )
    spec = load_spec(path)
    first = run_search(spec, options=TuneOptions(log=lambda _: None))
    assert first.stopped == "budget" and first.confirm_runs == 4  # (best trial + baseline) x 2 seeds
    again = run_search(spec, options=TuneOptions(log=lambda _: None))
    assert again.confirm_runs == 0
    runs = trial_runs(MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}"), "confirm_real")
    confirm = [r for r in runs if r.data.tags.get("workbench.confirm") == "true"]
    assert len(runs) == 5 and len(confirm) == 4 and all(r.info.status == "FINISHED" for r in confirm)
    assert {r.data.tags["workbench.confirm_arm"] for r in confirm} == {"trial 0", BASELINE}


@pytest.mark.parametrize(
    ("budget", "stopped", "done", "confirmed"),
    [
        ({"n_trials": 3}, "budget", 3, True),
        ({"n_trials": 3, "timeout": "1h"}, "timeout", 2, False),  # stopped short of n_trials: `tune` again continues
        ({"timeout": "1h"}, "timeout", 2, True),  # the timeout is the whole budget: it has been used
        ({"n_trials": 3}, "failures", 3, False),
        ({"n_trials": 3}, "tracking", 3, False),  # MLflow lost: nothing more is recorded
    ],
)
def test_confirmation_follows_the_budget_whichever_kind_it_is(tmp_path, budget, stopped, done, confirmed):
    from workbench.search.worker import SearchResult, confirms

    search = {
        "metric": "eval/accuracy",
        "params": {"learner.lr": {"low": 1e-3, "high": 1e-2}},
        "seeds": [SEARCH_SEED],
        "confirm": {"top_k": 1, "seeds": FRESH},
    } | budget
    spec = load_spec(write_search_study(tmp_path / "study.yaml", "budget", search))
    result = SearchResult(spec.optuna_name, spec.n_trials, {"done": done}, stopped=stopped)
    assert confirms(spec, result) is confirmed
