"""The search: schema: shorthands, defaults, and every invalid space rejected before any trial starts,
with the file, line and YAML path named (fast: no training)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.search.helpers import search_run_config, write_search_study
from workbench.search.schema import CategoricalParam, FloatParam, IntParam
from workbench.search.spec import parse_search
from workbench.study import StudyError, load_study, validate_study


def spec_of(search: dict, **study):
    data = {"name": "s", "base": search_run_config(), "search": search} | study
    return parse_search(validate_study(data))


def errors_of(search: dict, tmp_path: Path | None = None, **study) -> list[str]:
    with pytest.raises(StudyError) as info:
        if tmp_path is None:
            spec_of(search, **study)
        else:
            parse_search(load_study(write_search_study(tmp_path / "study.yaml", "s", search, **study)))
    return info.value.lines


LR = {"low": 1.0e-5, "high": 1.0e-2, "log": True}


def test_a_full_search_section_parses_with_types_from_the_config_fields():
    spec = spec_of(
        {
            "objectives": [{"metric": "eval/accuracy"}, {"metric": "summary/tokens_per_correct"}],
            "params": {
                "learner.lr": LR,
                "algorithm.clip_high": {"low": 0.2, "high": 0.4, "step": 0.05},
                "rollout.group_size": {"low": 2, "high": 8, "step": 2},
                "algorithm.preset": ["grpo", "dr_grpo", "dapo"],
            },
            "sampler": {"name": "tpe", "seed": 3, "n_startup_trials": 4},
            "n_trials": 20,
            "timeout": "1h30m",
            "seeds": 2,
            "enqueue": [{"learner.lr": 1.0e-4, "algorithm.preset": "grpo"}],
            "constraints": [{"metric": "length/mean", "max": 100}],
        }
    )
    assert spec.directions == ["maximize", "minimize"]  # from the catalogue / the summary metric
    assert spec.multi_objective and not spec.pruning  # Optuna cannot prune several objectives
    p = spec.params
    assert isinstance(p["learner.lr"], FloatParam) and p["learner.lr"].log
    assert isinstance(p["rollout.group_size"], IntParam)  # an int field: an int parameter
    assert isinstance(p["algorithm.preset"], CategoricalParam)
    assert spec.timeout == 5400 and spec.seeds == [0, 1] and spec.n_trials == 20
    sampler = spec.make_sampler(worker_index=1)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    dist = spec.distributions()
    assert dist["rollout.group_size"] == optuna.distributions.IntDistribution(2, 8, step=2)
    cfg = spec.trial_config(
        {"learner.lr": 3e-4, "algorithm.clip_high": 0.3, "rollout.group_size": 4, "algorithm.preset": "dr_grpo"}, seed=1
    )
    assert (cfg.learner.lr, cfg.algorithm.clip_high, cfg.rollout.group_size, cfg.seed) == (3e-4, 0.3, 4, 1)
    assert cfg.algorithm.estimator == "dr_grpo"  # the preset resolved in the trial's config


def test_shorthand_single_objective_defaults():
    spec = spec_of({"params": {"learner.lr": LR}, "n_trials": 3})
    assert spec.objective_names() == ["eval/accuracy"] and spec.directions == ["maximize"]
    assert spec.sampler_name == "tpe" and spec.pruner_name == "median"  # Optuna's defaults
    assert isinstance(spec.make_pruner(), optuna.pruners.MedianPruner)
    spec = spec_of(
        {
            "metric": "length/incorrect_mean",
            "summary": "mean",
            "params": {"learner.lr": LR},
            "pruner": "none",
            "n_trials": 3,
            "variant": "dr",
        },
        variants={"grpo": {}, "dr": {"algorithm": {"preset": "dr_grpo"}}},
    )
    assert spec.directions == ["minimize"] and spec.objective_names() == ["length/incorrect_mean:mean"]
    assert spec.variant == "dr" and spec.trial_config({"learner.lr": 1e-4}, 0).algorithm.preset == "dr_grpo"
    assert spec.variant_override({"learner.lr": 1e-4}) == {"algorithm": {"preset": "dr_grpo"}, "learner": {"lr": 1e-4}}


def test_grid_sampler_enumerates_and_caps_the_budget():
    spec = spec_of(
        {
            "params": {"algorithm.preset": ["grpo", "dr_grpo"], "rollout.group_size": {"low": 2, "high": 4, "step": 2}},
            "sampler": "grid",
            "n_trials": 100,
        }
    )
    assert spec.n_trials == 4  # one trial per grid point
    assert isinstance(spec.make_sampler(), optuna.samplers.GridSampler)


def test_invalid_spaces_are_all_reported_with_file_line_and_path(tmp_path):
    lines = errors_of(
        {
            "metric": "eval/acuracy",
            "params": {
                "learner.lrr": LR,  # unknown path
                "algorithm.clip_high": {"low": 0.4, "high": 0.2},  # low > high
                "learner.weight_decay": {"low": 0.0, "high": 0.1, "log": True},  # log with low <= 0
                "algorithm.preset": ["grpo", "dr_grpoo"],  # unknown preset
                "rollout.steps": {"type": "float", "low": 1, "high": 5},  # a float range on an int field
                "learner.dtype": {"low": 1, "high": 2},  # a range on a string field
            },
            "pruner": {"name": "median", "n_startup": 2},
            "n_trials": 0,
        },
        tmp_path,
    )
    text = "\n".join(lines)
    expected = [
        "search.metric: unknown metric 'eval/acuracy'; did you mean 'eval/accuracy'?",
        "search.params.learner.lrr: unknown run-config path 'learner.lrr'",
        "search.params.algorithm.clip_high: low 0.4 > high 0.2",
        "search.params.learner.weight_decay.low: log: true needs low > 0, got 0.0",
        "search.params.algorithm.preset[1]: 'dr_grpoo' is not a valid algorithm.preset: unknown preset 'dr_grpoo'",
        "search.params.rollout.steps.type: 'rollout.steps' is an integer field",
        "search.params.learner.dtype: 'learner.dtype' is a str field: give its values as a list of choices",
        "search.pruner.n_startup: unknown option of pruner 'median'; did you mean 'n_startup_trials'?",
        "search.n_trials: must be >= 1, got 0",
    ]
    for part in expected:
        assert part in text, f"{part!r} not in:\n{text}"
    for line in lines:  # every line points into the file
        assert line.startswith(f"{tmp_path / 'study.yaml'}:"), line


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"params": {"learner.lr": LR}}, "search.n_trials: give a budget: n_trials and/or timeout"),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "sampler": "grid"}, "the grid sampler needs a finite set"),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "sampler": "bayes"}, "unknown sampler 'bayes'"),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "timeout": "soon"}, "search.timeout: expected seconds"),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "pruner": "percentile"}, "percentile"),
        (
            {
                "objectives": [{"metric": "eval/accuracy"}, {"metric": "length/mean", "direction": "minimize"}],
                "params": {"learner.lr": LR},
                "n_trials": 2,
                "pruner": "median",
            },
            "Optuna cannot prune a multi-objective",
        ),
        (
            {
                "objectives": [{"metric": "eval/accuracy"}, {"metric": "length/mean"}],
                "params": {"learner.lr": LR},
                "n_trials": 2,
            },
            "search.objectives[1].direction: give direction: maximize or minimize",
        ),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "enqueue": [{"learner.lr": 1.0}]}, "outside [1e-05, 0.01]"),
        (
            {"params": {"learner.lr": LR}, "n_trials": 2, "enqueue": [{"lr": 1e-4}]},
            "search.enqueue[0].lr: not a parameter of this search",
        ),
        (
            {"params": {"learner.lr": {"low": 1e-4, "high": 1e-3, "step": 4e-4}}, "n_trials": 2},
            "not a multiple of step",
        ),
        (
            {"params": {"learner.lr": {"low": 1e-4, "high": 1e-3, "lo": 1}}, "n_trials": 2},
            "search.params.learner.lr.lo: unknown field; did you mean 'low'?",
        ),
        ({"params": {"learner.lr": LR}, "n_trials": 2, "variant": "nope"}, "search.variant: unknown variant 'nope'"),
        ({"params": {}, "n_trials": 2}, "search.params: must not be empty"),
        (
            {"params": {"learner.lr": LR}, "n_trials": 2, "metric": "summary/tokens_per_correct", "summary": "max"},
            "already one number per run",
        ),
    ],
)
def test_each_invalid_search_names_its_path(search, message):
    text = "\n".join(errors_of(search))
    assert message in text, text


NOISY = {"params": {"learner.lr": LR}, "n_trials": 2}


@pytest.mark.parametrize(
    ("search", "message"),
    [
        (NOISY | {"pruner": {"name": "threshold"}}, "search.pruner: pruner 'threshold': Either lower or upper"),
        (
            NOISY | {"pruner": {"name": "threshold", "low": 0.1}},
            "search.pruner.low: unknown option of pruner 'threshold'; did you mean 'lower'?",
        ),
        (
            NOISY | {"pruner": {"name": "patient", "wrapped": "medain", "patience": 2}},
            "search.pruner.wrapped: unknown pruner 'medain'; did you mean 'median'?",
        ),
        (
            NOISY | {"pruner": {"name": "patient", "patience": 2, "wrapped": {"name": "median", "n_startup": 1}}},
            "search.pruner.wrapped.n_startup: unknown option of pruner 'median'; did you mean 'n_startup_trials'?",
        ),
        (
            NOISY | {"pruner": {"name": "patient", "patience": 2, "wrapped_pruner": "median"}},
            "search.pruner.wrapped_pruner: unknown option of pruner 'patient'; did you mean 'wrapped'?",
        ),
        (NOISY | {"pruner": {"name": "patient", "patience": -1}}, "search.pruner: pruner 'patient':"),
        (
            NOISY | {"pruner": {"name": "patient", "patience": 1, "wrapped": 3}},
            "search.pruner.wrapped: expected a pruner",
        ),
        (NOISY | {"include_step0": "yes"}, "search.include_step0: "),
        (
            NOISY | {"seeds": [0, 1], "confirm": {"top_k": 2, "seeds": [1, 2]}},
            "search.confirm.seeds: seed(s) 1 are seeds of the search itself",
        ),
        (NOISY | {"confirm": {"seeds": [5]}}, "search.confirm.seeds: "),
        (NOISY | {"confirm": {"top_k": 0, "seeds": [5, 6]}}, "search.confirm.top_k: "),
        (
            NOISY | {"confirm": {"topk": 2, "seeds": [5, 6]}},
            "search.confirm.topk: unknown field; did you mean 'top_k'?",
        ),
        (NOISY | {"confirm": {"seeds": [5, 5]}}, "search.confirm.seeds: repeated seeds"),
        (
            {
                "objectives": [{"metric": "eval/accuracy"}, {"metric": "length/mean", "direction": "minimize"}],
                "params": {"learner.lr": LR},
                "n_trials": 2,
                "confirm": {"seeds": [5, 6]},
            },
            "search.confirm: confirmation ranks trials by one objective",
        ),
    ],
)
def test_threshold_patient_confirm_and_step0_options_are_checked(search, message):
    text = "\n".join(errors_of(search))
    assert message in text, text


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # PatientPruner
def test_threshold_and_patient_build_the_optuna_pruners():
    threshold = spec_of(NOISY | {"pruner": {"name": "threshold", "lower": 0.05}}).make_pruner()
    assert isinstance(threshold, optuna.pruners.ThresholdPruner)
    spec = spec_of(NOISY | {"pruner": {"name": "patient", "patience": 2, "wrapped": "median"}})
    patient = spec.make_pruner()
    assert isinstance(patient, optuna.pruners.PatientPruner) and patient._patience == 2
    assert isinstance(patient._wrapped_pruner, optuna.pruners.MedianPruner)
    assert spec.config.pruner["wrapped"] == {"name": "median"}  # the shorthand, expanded
    alone = spec_of(NOISY | {"pruner": {"name": "patient", "patience": 1}}).make_pruner()
    assert alone._wrapped_pruner is None  # prunes on stagnation alone
    assert spec.config.include_step0 is False and spec.config.confirm is None  # the defaults


def test_a_study_without_a_search_section(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({"name": "plain", "base": search_run_config()}))
    with pytest.raises(StudyError, match="no search: section"):
        parse_search(load_study(path))


def test_cmaes_needs_its_package_and_one_objective():
    search = {
        "objectives": [{"metric": "eval/accuracy"}, {"metric": "length/mean", "direction": "minimize"}],
        "params": {"learner.lr": LR},
        "n_trials": 2,
        "sampler": "cmaes",
    }
    assert "cmaes does not support multi-objective" in "\n".join(errors_of(search))


def test_gp_sampler_is_optunas_gpsampler_with_its_own_options(tmp_path):
    """``sampler: {name: gp, ...}`` builds Optuna's GPSampler with the options as written, and
    proposes values inside the space (a real Optuna study, a toy objective: fast)."""
    spec = spec_of(
        {
            "params": {"learner.lr": LR, "algorithm.preset": ["grpo", "dr_grpo"]},
            "n_trials": 4,
            "sampler": {"name": "gp", "seed": 0, "n_startup_trials": 2, "deterministic_objective": True},
        }
    )
    sampler = spec.make_sampler()
    assert isinstance(sampler, optuna.samplers.GPSampler) and spec.sampler_name == "gp"
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: -abs(math.log10(spec.suggest(t)["learner.lr"]) + 3), n_trials=4)  # past startup
    assert all(LR["low"] <= t.params["learner.lr"] <= LR["high"] for t in study.trials)
    lines = errors_of(
        {"params": {"learner.lr": LR}, "n_trials": 2, "sampler": {"name": "gp", "n_startup": 2}}, tmp_path
    )
    assert (
        len(lines) == 1
        and "search.sampler.n_startup: unknown option of sampler 'gp'; did you mean 'n_startup_trials'?" in lines[0]
    ), lines
    assert "constraints_func" not in lines[0]  # the search supplies objects; YAML cannot


@pytest.mark.parametrize("pruner", ["wilcoxon", {"name": "wilcoxon", "p_threshold": 0.05}])
def test_wilcoxon_is_accepted_on_a_fixed_eval_set(pruner):
    spec = spec_of({"params": {"learner.lr": LR}, "n_trials": 2, "pruner": pruner})
    assert spec.per_problem_pruning and type(spec.make_pruner()).__name__ == "WilcoxonPruner"


@pytest.mark.parametrize(
    ("search", "where", "words"),
    [
        (
            {"params": {"learner.lr": LR, "task.eval_size": {"low": 50, "high": 100}}},
            "search.params.task.eval_size:",
            "pairs trials by eval problem",
        ),
        (
            {"params": {"learner.lr": LR, "rollout.eval_every": [5, 10]}},
            "search.params.rollout.eval_every:",
            "same eval problems at the same steps",
        ),
        (
            {"params": {"learner.lr": LR}, "pruner": {"name": "patient", "patience": 1, "wrapped": "wilcoxon"}},
            "search.pruner.wrapped:",
            "cannot be wrapped",
        ),
    ],
)
def test_wilcoxon_is_refused_where_trials_cannot_be_paired_by_problem(search, where, words, tmp_path):
    """WilcoxonPruner pairs a trial's per-problem results with the best trial's by (eval, problem
    index): a search over the eval set or its schedule, or a wrapper feeding it a curve, breaks that."""
    search = {"n_trials": 2, "pruner": "wilcoxon"} | search
    lines = errors_of(search, tmp_path)
    assert len(lines) == 1, lines
    assert f" {where} " in lines[0] and words in lines[0], lines


@settings(max_examples=40, deadline=None)
@given(a=st.floats(1e-6, 1.0), b=st.floats(1e-6, 1.0), log=st.booleans())
def test_any_float_range_is_accepted_iff_low_le_high_and_samples_stay_inside(a, b, log):
    search = {"params": {"algorithm.clip_high": {"low": a, "high": b, "log": log}}, "n_trials": 1, "pruner": "none"}
    if a > b:
        assert any("low" in line and "> high" in line for line in errors_of(search))
        return
    spec = spec_of(search)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        value = spec.suggest(trial)["algorithm.clip_high"]
        assert a <= value <= b or math.isclose(value, b) or math.isclose(value, a)
        study.tell(trial, 0.0)


def test_tune_rejects_an_invalid_search_before_anything_is_written(workdir):
    from typer.testing import CliRunner

    from workbench.cli.main import app

    path = write_search_study(workdir / "bad.yaml", "bad", {"params": {"learner.lrr": LR}, "n_trials": 2})
    result = CliRunner().invoke(app, ["tune", str(path)])
    assert result.exit_code == 2, result.output
    assert "search.params.learner.lrr: unknown run-config path" in result.output
    assert "Traceback" not in result.output
    assert not (workdir / "optuna.db").exists() and not (workdir / "mlflow.db").exists()


def test_plan_notes_what_tune_will_reject_in_the_search_section(workdir):
    """`run` ignores search:, so a study with a tune-only problem still plans, with a note naming the line."""
    from typer.testing import CliRunner

    from workbench.cli.main import app

    path = Path(__file__).parents[1] / "study" / "data" / "grpo_vs_dr_grpo.yaml"  # no search budget
    result = CliRunner().invoke(app, ["plan", str(path)], catch_exceptions=False, env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "`workbench tune` will reject" in result.output
    assert "grpo_vs_dr_grpo.yaml:18 search.n_trials" in result.output
