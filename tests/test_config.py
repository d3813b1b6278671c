import pytest
from pydantic import ValidationError

from workbench.algorithms.presets import PRESETS
from workbench.config import AlgorithmConfig, RunConfig


def test_unknown_keys_are_rejected_at_every_level():
    with pytest.raises(ValidationError, match="lrr"):
        RunConfig.model_validate({"learner": {"lrr": 1e-4}})
    with pytest.raises(ValidationError, match="samplr"):
        RunConfig.model_validate({"samplr": {}})


def test_preset_fills_unset_fields_and_explicit_fields_win():
    a = AlgorithmConfig(preset="dapo")
    assert (a.estimator, a.loss, a.agg_mode, a.clip_low, a.clip_high) == ("grpo", "ppo_clip", "token-mean", 0.2, 0.28)
    b = AlgorithmConfig(preset="dapo", clip_high=0.4, agg_mode="seq-mean-token-mean")
    assert b.clip_high == 0.4 and b.agg_mode == "seq-mean-token-mean" and b.clip_low == 0.2


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_names_registered_units(preset):
    AlgorithmConfig(preset=preset)  # raises if a preset names an unknown unit


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("preset", "dapoo", "did you mean 'dapo'"),
        ("estimator", "grpoo", "valid:"),
        ("loss", "ppo", "valid:"),
        ("agg_mode", "mean", "valid:"),
        ("correction", "tiss", "did you mean 'tis'"),
    ],
)
def test_unknown_unit_names_list_the_valid_ones(field, value, valid):
    with pytest.raises(ValidationError, match=valid):
        AlgorithmConfig(**{field: value})


def test_run_key_is_stable_and_ignores_tracking():
    a = RunConfig.model_validate({"learner": {"lr": 3e-4}, "seed": 1})
    assert a.run_key() == RunConfig.model_validate({"seed": 1, "learner": {"lr": 3e-4}}).run_key()
    assert (
        a.run_key()
        == RunConfig.model_validate({"seed": 1, "learner": {"lr": 3e-4}, "tracking": {"uri": "http://x"}}).run_key()
    )
    assert a.run_key() != RunConfig.model_validate({"seed": 2, "learner": {"lr": 3e-4}}).run_key()


def test_flat_params_use_dotted_keys():
    flat = RunConfig().flat()
    assert flat["learner.lr"] == 1e-4 and flat["algorithm.estimator"] == "grpo"
    assert flat["model.tiny.hidden_size"] == 128


def test_model_needs_exactly_one_source():
    with pytest.raises(ValidationError, match="exactly one"):
        RunConfig.model_validate({"model": {"builtin": "tiny", "path": "/x"}})


def test_run_key_ignores_values_equal_to_defaults():
    """Spelling out a default, or a schema that grew a defaulted field, keeps the key (resume works)."""
    assert RunConfig().run_key() == RunConfig.model_validate({"learner": {"lr": 1e-4, "grad_clip": 1.0}}).run_key()
    assert RunConfig().run_key() != RunConfig.model_validate({"learner": {"grad_clip": 0.5}}).run_key()


def test_dr_grpo_divides_by_the_generation_budget_unless_told_otherwise():
    """Dr. GRPO's normaliser is a constant. The API's fallback (verl's) is the padded length T,
    which changes with the longest completion of each batch; a run uses the budget instead."""
    import torch

    from workbench.algorithms import aggregate_loss

    cfg = RunConfig.model_validate({"algorithm": {"preset": "dr_grpo"}, "sampler": {"max_new_tokens": 24}})
    assert cfg.algorithm.norm_constant == 24.0
    explicit = RunConfig.model_validate({"algorithm": {"preset": "dr_grpo", "norm_constant": 5}})
    assert explicit.algorithm.norm_constant == 5.0
    assert RunConfig.model_validate({"algorithm": {"preset": "grpo"}}).algorithm.norm_constant is None

    # Same tokens, one batch padded further (its longest completion was longer): only the constant agrees.
    loss, mask = torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    padded_loss, padded_mask = torch.nn.functional.pad(loss, (0, 3)), torch.nn.functional.pad(mask, (0, 3))
    mode = "seq-mean-token-sum-norm"
    assert (
        float(aggregate_loss(loss, mask, mode, norm_constant=24.0))
        == float(aggregate_loss(padded_loss, padded_mask, mode, norm_constant=24.0))
        == 3.0 / 24
    )
    assert (
        float(aggregate_loss(loss, mask, mode)) == 1.0 and float(aggregate_loss(padded_loss, padded_mask, mode)) == 0.5
    )


def test_checkpointing_does_not_change_the_run_key():
    """Turning checkpoints on for a study that already ran must not re-run its finished runs."""
    plain = RunConfig.model_validate({"seed": 3})
    assert RunConfig.model_validate({"seed": 3, "learner": {"checkpoint_every": 5}}).run_key() == plain.run_key()
    assert RunConfig.model_validate({"seed": 3, "learner": {"micro_batch_size": 4}}).run_key() != plain.run_key()
