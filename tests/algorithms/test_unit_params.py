"""Unit parameters as data: ``algorithm.loss_params`` / ``estimator_params`` reach the unit, checked
against its keyword-only signature; the unit keeps its defaults for keys not given."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from workbench.algorithms import POLICY_LOSSES, compute_advantages, compute_policy_loss
from workbench.algorithms.losses import PolicyTerms
from workbench.algorithms.params import check_unit_params, keyword_params
from workbench.config import AlgorithmConfig, RunConfig


@pytest.fixture
def scaled_loss():
    """A loss with a parameter of its own, registered for one test only (contract suites never see it)."""

    def scaled_reinforce(logp, old_logp, advantages, mask, *, scale: float = 1.0) -> PolicyTerms:
        nothing = torch.zeros_like(logp, dtype=torch.bool)
        return PolicyTerms(-scale * advantages[:, None] * logp, torch.ones_like(logp), nothing, nothing)

    POLICY_LOSSES.register("scaled_reinforce_test_only")(scaled_reinforce)
    yield "scaled_reinforce_test_only"
    POLICY_LOSSES._items.pop("scaled_reinforce_test_only")


LOGP = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)  # [B=1, T=2]
MASK = torch.ones(1, 2)


def test_loss_params_reach_the_loss_and_its_default_holds_otherwise(scaled_loss):
    adv = torch.tensor([1.0], dtype=torch.float64)
    # token-mean of -A·logp = (1 + 2) / 2 = 1.5; scale 3 gives 4.5 (exact in float64: small integers and halves)
    default, _ = compute_policy_loss(scaled_loss, LOGP, LOGP, adv, MASK, agg_mode="token-mean")
    scaled, _ = compute_policy_loss(scaled_loss, LOGP, LOGP, adv, MASK, agg_mode="token-mean", scale=3.0)
    assert float(default) == 1.5 and float(scaled) == 4.5


def test_unknown_loss_param_names_the_key_the_unit_and_the_valid_keys(scaled_loss):
    adv = torch.tensor([1.0], dtype=torch.float64)
    with pytest.raises(ValueError) as err:
        compute_policy_loss(scaled_loss, LOGP, LOGP, adv, MASK, scal=3.0)
    assert str(err.value) == (
        f"policy loss {scaled_loss!r} has no parameter 'scal'; did you mean 'scale'? (valid: scale)"
    )
    with pytest.raises(ValueError, match="policy loss 'reinforce' has no parameter 'scale'.*no parameters"):
        compute_policy_loss("reinforce", LOGP, LOGP, adv, MASK, scale=3.0)


def test_estimator_params_reach_the_estimator():
    rewards, groups = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    # group mean 0.5, Bessel std sqrt(0.5); A = ±0.5 / (sqrt(0.5) + eps). float32: about 4 roundings
    # (std, add, divide, subtract) of a value < 1, so 4 ulps relative.
    tol = 4 * torch.finfo(torch.float32).eps
    for eps, params in ((1e-6, {}), (0.25, {"epsilon": 0.25})):
        expected = 0.5 / (math.sqrt(0.5) + eps)
        got = compute_advantages("grpo", rewards, groups, **params)
        assert got.tolist() == pytest.approx([expected, -expected], rel=tol)
    with pytest.raises(ValueError, match="advantage estimator 'rloo' has no parameter 'temperature'"):
        compute_advantages("rloo", rewards, groups, temperature=1.0)


def test_keyword_params_are_the_signature_less_what_the_caller_derives():
    from workbench.algorithms import ADVANTAGE_ESTIMATORS

    assert keyword_params(POLICY_LOSSES.get("ppo_clip")) == ["clip_low", "clip_high", "dual_clip"]
    fn = ADVANTAGE_ESTIMATORS.get("reinforce_plus_plus_baseline")
    assert keyword_params(fn, exclude=("token_counts",)) == []


def test_config_checks_and_converts_unit_params():
    algo = AlgorithmConfig(preset="grpo", estimator_params={"epsilon": 1})
    assert algo.estimator_params == {"epsilon": 1.0} and isinstance(algo.estimator_params["epsilon"], float)
    cases = {
        "unknown key": (
            {"estimator_params": {"epsilonn": 0.1}},
            "estimator_params: advantage estimator 'grpo' has no parameter 'epsilonn'; "
            "did you mean 'epsilon'? (valid: epsilon)",
        ),
        "wrong type": (
            {"estimator_params": {"epsilon": "fast"}},
            "estimator_params: advantage estimator 'grpo' parameter 'epsilon': ",
        ),
        "not finite": ({"estimator_params": {"epsilon": float("inf")}}, "parameter 'epsilon': "),
        "derived": (
            {"preset": "reinforce_pp", "estimator_params": {"token_counts": 3}},
            "has no parameter 'token_counts'",
        ),
        "clip field twice": (
            {"clip_low": 0.1, "loss_params": {"clip_low": 0.2}},
            "clip_low and loss_params.clip_low are one parameter, given as 0.1 and 0.2: set it once",
        ),
        "clip field, bad value": ({"loss_params": {"clip_low": -0.1}}, "clip_low\n  Input should be greater than"),
        "dual clip of a loss without one": (
            {"preset": "gspo", "dual_clip": 3.0},
            "dual_clip: policy loss 'gspo' has no parameter 'dual_clip'",
        ),
        "unknown loss key": (
            {"loss_params": {"temperature": 1.0}},
            "loss_params: policy loss 'ppo_clip' has no parameter 'temperature'",
        ),
    }
    for name, (fields, message) in cases.items():
        with pytest.raises(ValidationError) as err:
            AlgorithmConfig(**{"preset": "grpo", **fields})
        assert message in str(err.value), name


def test_empty_unit_params_keep_the_run_key():
    """An empty mapping is the default: run keys of configs that never mention the params do not move."""
    assert RunConfig(algorithm={"loss_params": {}, "estimator_params": {}}).run_key() == RunConfig().run_key()
    assert RunConfig(algorithm={"estimator_params": {"epsilon": 0.1}}).run_key() != RunConfig().run_key()


def test_loss_kwargs_are_the_set_clip_fields_the_loss_declares_and_the_loss_params(scaled_loss):
    assert AlgorithmConfig(preset="dapo").loss_kwargs() == {"clip_low": 0.2, "clip_high": 0.28}
    assert AlgorithmConfig(preset="grpo", dual_clip=3).loss_kwargs() == {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dual_clip": 3.0,
    }
    # grpo's clip range is offered to the loss that runs; one without a clip range does not take it
    algo = AlgorithmConfig(preset="grpo", loss=scaled_loss, loss_params={"scale": 2})
    assert algo.clip_low == 0.2 and algo.loss_kwargs() == {"scale": 2.0}


@pytest.mark.parametrize("key", ["clip_low", "clip_high", "dual_clip"])
def test_a_clip_bound_in_loss_params_is_the_field_of_that_name(key):
    """``loss_params: {clip_high: x}`` and ``clip_high: x`` are one config: the same dump, the same run key."""
    value = 3.0 if key == "dual_clip" else 0.28
    as_field = RunConfig(algorithm={"preset": "grpo", key: value})
    as_param = RunConfig(algorithm={"preset": "grpo", "loss_params": {key: value}})
    both = RunConfig(algorithm={"preset": "grpo", key: value, "loss_params": {key: value}})
    assert as_param.model_dump(mode="json") == as_field.model_dump(mode="json") == both.model_dump(mode="json")
    assert getattr(as_param.algorithm, key) == value and as_param.algorithm.loss_params == {}
    assert as_param.run_key() == as_field.run_key() != RunConfig(algorithm={"preset": "grpo"}).run_key()
    # over a preset that sets the bound, the user's spelling wins either way
    dapo = RunConfig(algorithm={"preset": "dapo", "loss_params": {"clip_high": 0.3}}).algorithm
    assert dapo.clip_high == 0.3 and dapo.clip_low == 0.2


def test_a_preset_s_unit_params_merge_with_the_user_s_key_by_key(monkeypatch):
    from workbench.algorithms import presets

    monkeypatch.setitem(
        presets.PRESETS,
        "tempered_sapo_test_only",
        {
            "estimator": "grpo",
            "loss": "sapo",
            "agg_mode": "token-mean",
            "loss_params": {"temperature_pos": 2.0, "temperature_neg": 3.0},
            "estimator_params": {"epsilon": 0.5},
        },
    )
    algo = AlgorithmConfig(preset="tempered_sapo_test_only", loss_params={"temperature_neg": 1.5})
    assert algo.loss_params == {"temperature_pos": 2.0, "temperature_neg": 1.5}
    assert algo.estimator_params == {"epsilon": 0.5}
    algo = AlgorithmConfig(preset="tempered_sapo_test_only", estimator_params={"epsilon": 0.25})
    assert algo.loss_params == {"temperature_pos": 2.0, "temperature_neg": 3.0}
    assert algo.estimator_params == {"epsilon": 0.25}
    assert presets.PRESETS["tempered_sapo_test_only"]["loss_params"] == {
        "temperature_pos": 2.0,
        "temperature_neg": 3.0,
    }  # untouched
    assert AlgorithmConfig.model_validate(algo.model_dump(mode="json")) == algo  # resolves to itself


def test_a_loss_that_needs_a_clip_range_gets_one(monkeypatch):
    from workbench.algorithms import presets

    # A preset that sets no clip range (as a soft-gated loss's does), combined with a clipped loss.
    monkeypatch.setitem(
        presets.PRESETS, "no_clip_range_test_only", {"estimator": "grpo", "loss": "reinforce", "agg_mode": "token-mean"}
    )
    with pytest.raises(ValidationError, match="clip_low: policy loss 'ppo_clip' needs it"):
        AlgorithmConfig(preset="no_clip_range_test_only", loss="ppo_clip")
    algo = AlgorithmConfig(
        preset="no_clip_range_test_only", loss="ppo_clip", clip_low=0.1, loss_params={"clip_high": 0.3}
    )
    assert algo.loss_kwargs() == {"clip_low": 0.1, "clip_high": 0.3}


def test_a_loss_parameter_without_a_default_must_be_set(monkeypatch):
    def needs_beta(logp, old_logp, advantages, mask, *, beta: float) -> PolicyTerms:
        raise AssertionError("not called")

    monkeypatch.setitem(POLICY_LOSSES._items, "needs_beta_test_only", needs_beta)
    with pytest.raises(ValidationError, match="loss_params.beta: policy loss 'needs_beta_test_only' needs it"):
        AlgorithmConfig(preset="grpo", loss="needs_beta_test_only")
    assert AlgorithmConfig(preset="grpo", loss="needs_beta_test_only", loss_params={"beta": 1}).loss_kwargs() == {
        "beta": 1.0
    }


def test_check_unit_params_returns_a_copy():
    params = {"epsilon": 1}
    out = check_unit_params("advantage estimator", "grpo", lambda r, g, *, epsilon: r, params)
    assert out == {"epsilon": 1} and out is not params


def test_the_run_level_length_normaliser_comes_from_the_aggregation_registry():
    """Modes that take ``norm_constant`` get the generation budget in a run; the others none."""
    from workbench.algorithms import AGG_MODES
    from workbench.algorithms.aggregate import run_norm_constant

    takes_constant = {mode for mode in AGG_MODES.names() if "norm_constant" in keyword_params(AGG_MODES.get(mode))}
    assert takes_constant == {"seq-mean-token-sum-norm"}
    for mode in AGG_MODES.names():
        assert run_norm_constant(mode, 32) == (32.0 if mode in takes_constant else None)
    assert RunConfig(algorithm={"preset": "dr_grpo"}, sampler={"max_new_tokens": 24}).algorithm.norm_constant == 24.0
    assert RunConfig(algorithm={"preset": "grpo"}).algorithm.norm_constant is None


def test_a_bad_unit_param_in_a_study_is_one_line_exit_2_and_nothing_written(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from workbench.cli.main import app

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text(
        "name: t\nbase:\n  model: {builtin: tiny}\n  algorithm: {preset: grpo, estimator_params: {epsilonn: 0.1}}\n"
    )
    result = CliRunner().invoke(app, ["run", "x.yaml", "--quiet"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [
        "error: x.yaml:4 base.algorithm: estimator_params: advantage estimator 'grpo' has no "
        "parameter 'epsilonn'; did you mean 'epsilon'? (valid: epsilon)"
    ], result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]
