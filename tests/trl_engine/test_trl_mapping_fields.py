"""The TRL engine's mapping against TRL's own GRPOConfig (runs in .venv-trl): a field TRL renames or drops fails here."""

from __future__ import annotations

import dataclasses

import pytest

from tests.trl_support import require_trl
from workbench.config import RunConfig
from workbench.engine.trl_mapping import LEFT_AT_DEFAULT, TRL_VERSION, grpo_config_kwargs, mapped_fields

require_trl("docs/trl-engine.md")

import trl  # noqa: E402 - after require_trl, which skips this module where TRL is not installed


def test_every_field_the_mapping_names_is_a_grpoconfig_field():
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    missing = sorted(mapped_fields() - fields)
    assert not missing, f"GRPOConfig {trl.__version__} has no field {missing} (the mapping was read from {TRL_VERSION})"


def test_every_grpoconfig_field_is_mapped_or_left_at_its_default_on_purpose():
    """A field a new TRL adds (or renames) fails here until the mapping says what it is."""
    from transformers import TrainingArguments

    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = {f.name for f in dataclasses.fields(trl.GRPOConfig)} - inherited
    assert sorted(own - mapped_fields() - set(LEFT_AT_DEFAULT)) == []
    assert sorted(set(LEFT_AT_DEFAULT) - own) == []  # nothing listed that TRL does not have
    assert not set(LEFT_AT_DEFAULT) & mapped_fields()


def test_the_installed_trl_is_the_one_the_mapping_was_read_from():
    assert trl.__version__ == TRL_VERSION


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "lite_ppo"])
def test_each_expressible_preset_builds_a_grpoconfig(tmp_path, preset):
    """GRPOConfig's own __post_init__ accepts what the mapping builds (batch shapes, loss type, clip range)."""
    cfg = RunConfig.model_validate(
        {
            "engine": "trl",
            "learner": {"device": "cpu"},
            "algorithm": {"preset": preset} | ({"batch_filter": None} if preset == "dapo" else {}),
        }
    )
    kwargs = grpo_config_kwargs(cfg)
    config = trl.GRPOConfig(output_dir=str(tmp_path), **kwargs)
    for name, value in kwargs.items():
        if name != "report_to":  # TRL turns "none" into []
            assert getattr(config, name) == value, name
    assert config.generation_batch_size == cfg.rollout.prompts_per_step * cfg.rollout.group_size
