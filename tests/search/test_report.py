"""Report and export on synthetic Optuna studies (no training): best trials, the Pareto front of a
multi-objective search, the HTML sections, and exported variants that load as a study."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tests.search.helpers import load_spec, write_search_study
from workbench.search.report import best_trials, export_best, write_report
from workbench.search.worker import SearchError
from workbench.study import expand, load_study

optuna.logging.set_verbosity(optuna.logging.ERROR)
DIST = {
    "learner.lr": FloatDistribution(1e-4, 1e-1, log=True),
    "algorithm.preset": CategoricalDistribution(["grpo", "dr_grpo"]),
}


def add(study, lr, preset, values, state=TrialState.COMPLETE, **attrs):
    study.add_trial(
        create_trial(
            state=state,
            params={"learner.lr": lr, "algorithm.preset": preset},
            distributions=DIST,
            values=values if state == TrialState.COMPLETE else None,
            intermediate_values={0: 0.1, 2: 0.2} if values else {},
            user_attrs={"workbench.learner_steps": 4, **attrs},
        )
    )


SPACE = {"learner.lr": {"low": 1e-4, "high": 1e-1, "log": True}, "algorithm.preset": ["grpo", "dr_grpo"]}


def test_single_objective_best_first_and_export_runs_next_to_the_study(tmp_path):
    path = write_search_study(
        tmp_path / "study.yaml",
        "rep",
        {"params": SPACE, "n_trials": 4},
        variants={"grpo": {}, "dapo": {"algorithm": {"preset": "dapo"}}},
    )
    spec = load_spec(path)
    study = optuna.create_study(direction="maximize")
    add(study, 1e-3, "grpo", [0.30])
    add(study, 3e-3, "dr_grpo", [0.45])
    add(study, 1e-1, "grpo", None, state=TrialState.PRUNED, **{"workbench.prune_reason": "health: non_finite@1"})
    assert [t.number for t in best_trials(study, spec)] == [1, 0]

    page = write_report(study, spec, tmp_path / "out" / "report.html", log_to_mlflow=False).read_text()
    for title in [
        "Best trials",
        "Optimization history",
        "Intermediate values",
        "Parallel coordinates",
        "Parameter importances",
        "All trials",
    ]:
        assert f"<h2>{title}" in page
    assert "health: non_finite@1" in page

    export = tmp_path / "exports" / "best.yaml"
    assert export_best(study, spec, export) == ["tuned"]
    data = yaml.safe_load(export.read_text())
    assert data["include"] == "../study.yaml"
    assert data["variants"]["tuned"] == {"learner": {"lr": 3e-3}, "algorithm": {"preset": "dr_grpo"}}
    specs = {s.variant: s for s in expand(load_study(export))}
    assert set(specs) == {"grpo", "dapo", "tuned"}  # the study's own variants, plus the tuned one
    assert specs["tuned"].config.learner.lr == 3e-3 and specs["tuned"].config.algorithm.estimator == "dr_grpo"


def test_multi_objective_exports_the_pareto_front(tmp_path):
    search = {
        "objectives": [{"metric": "eval/accuracy"}, {"metric": "summary/tokens_per_correct"}],
        "params": SPACE,
        "n_trials": 4,
    }
    spec = load_spec(write_search_study(tmp_path / "study.yaml", "pareto", search))
    study = optuna.create_study(directions=["maximize", "minimize"])
    add(study, 1e-3, "grpo", [0.30, 100.0])  # on the front
    add(study, 3e-3, "dr_grpo", [0.45, 150.0])  # on the front
    add(study, 2e-3, "grpo", [0.25, 160.0])  # dominated
    assert [t.number for t in best_trials(study, spec)] == [0, 1]
    page = write_report(study, spec, tmp_path / "r.html", log_to_mlflow=False).read_text()
    assert "<h2>Pareto front" in page and "<h2>Pareto-optimal trials" in page
    assert export_best(study, spec, tmp_path / "best.yaml") == ["tuned_t0", "tuned_t1"]


def test_nothing_to_export_before_a_trial_completes(tmp_path):
    spec = load_spec(write_search_study(tmp_path / "study.yaml", "empty", {"params": SPACE, "n_trials": 2}))
    study = optuna.create_study(direction="maximize")
    with pytest.raises(SearchError, match="no COMPLETE trial yet"):
        export_best(study, spec, tmp_path / "best.yaml")
    page = write_report(study, spec, tmp_path / "r.html", log_to_mlflow=False).read_text()
    assert "no trial has completed yet" in page and "not available yet" in page


def test_a_search_whose_trials_all_end_below_their_start_says_it_found_nothing(tmp_path):
    """#53, a newcomer's search: every trial starts at 0.35 eval accuracy (step 0, the untrained policy) and
    ends at 0.35, 0.31, 0.23, 0.16 or 0.00. The table and report show each trial's start and gain, the
    search says it found nothing instead of naming a best, and --export-best refuses in one line."""
    from workbench.search.report import search_gain, trial_rows

    spec = load_spec(write_search_study(tmp_path / "study.yaml", "flat", {"params": SPACE, "n_trials": 5}))
    study = optuna.create_study(direction="maximize")
    for lr, end in [(1e-3, 0.35), (2e-3, 0.31), (3e-3, 0.23), (5e-3, 0.16), (1e-2, 0.0)]:
        add(study, lr, "grpo", [end], **{"workbench.start_value": 0.35})
    gain = search_gain(study, spec)
    assert gain.found is False
    assert gain.line == (
        "no trial ends beyond its starting eval/accuracy 0.35 (the best, trial 0, ends at 0.35): "
        "the search found nothing"
    )
    rows = {r["trial"]: r for r in trial_rows(study.trials, spec)}
    assert (rows[0]["start"], rows[0]["gain"]) == (0.35, 0.0)
    assert rows[4]["gain"] == pytest.approx(-0.35)  # ends at 0 from 0.35
    page = write_report(study, spec, tmp_path / "r.html", log_to_mlflow=False).read_text()
    assert "<h2>Trials (none beat the start)" in page and "the search found nothing" in page
    with pytest.raises(SearchError, match="the search found nothing; nothing to export"):
        export_best(study, spec, tmp_path / "best.yaml")
    assert not (tmp_path / "best.yaml").exists()

    add(study, 4e-3, "dr_grpo", [0.41], **{"workbench.start_value": 0.35})  # one trial gains 6 points
    gain = search_gain(study, spec)
    assert gain.found is True and gain.line.startswith("trial 5 gains +0.06 eval/accuracy over the start 0.35")
    assert "not confirmed" in gain.line
