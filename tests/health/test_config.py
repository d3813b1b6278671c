"""HealthConfig validation and presets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workbench.health import (
    HEALTH_PRESETS,
    HEALTH_RULES,
    HealthConfig,
    preset_overrides,
    resolve_rule_params,
)


def test_defaults():
    cfg = HealthConfig()
    assert (cfg.preset, cfg.rules, cfg.on_fail) == ("default", {}, "stop")
    resolved = cfg.resolved()
    assert sorted(resolved) == HEALTH_RULES.names()
    # the default preset is exactly the Params defaults
    for name, params in resolved.items():
        assert params == HEALTH_RULES.get(name).Params()
    assert {n for n, p in resolved.items() if p.severity == "fail"} == {"non_finite"}


def test_unknown_rule_lists_valid_names_and_suggests():
    with pytest.raises(ValidationError) as err:
        HealthConfig(rules={"entropy_colapse": {}})
    msg = str(err.value)
    assert "did you mean 'entropy_collapse'" in msg
    for name in HEALTH_RULES.names():
        assert name in msg


def test_unknown_param_names_the_field():
    with pytest.raises(ValidationError) as err:
        HealthConfig(rules={"entropy_collapse": {"patiense": 3}})
    msg = str(err.value)
    assert "'patiense'" in msg and "'entropy_collapse'" in msg and "did you mean 'patience'" in msg
    assert "min_fraction" in msg  # lists the valid fields


def test_invalid_param_value_names_the_field():
    with pytest.raises(ValidationError) as err:
        HealthConfig(rules={"length_blowup": {"max_truncated_frac": 2.0}})
    assert "max_truncated_frac" in str(err.value)
    with pytest.raises(ValidationError, match="severity"):
        HealthConfig(rules={"non_finite": {"severity": "panic"}})
    with pytest.raises(ValidationError, match="patience"):
        HealthConfig(rules={"kl_explosion": {"patience": 0}})


def test_unknown_preset_and_top_level_keys():
    with pytest.raises(ValidationError, match="did you mean 'strict'"):
        HealthConfig(preset="strikt")
    with pytest.raises(ValidationError, match="extra"):
        HealthConfig(presets="default")
    with pytest.raises(ValidationError):
        HealthConfig(on_fail="explode")
    with pytest.raises(ValidationError):
        HealthConfig(rules={"entropy_collapse": 3})


def test_assignment_is_validated():
    cfg = HealthConfig()
    with pytest.raises(ValidationError):
        cfg.on_fail = "later"


def test_overrides_apply_on_top_of_preset():
    cfg = HealthConfig(preset="strict", rules={"entropy_collapse": {"patience": 7}})
    p = cfg.resolved()["entropy_collapse"]
    assert (p.patience, p.min_fraction) == (7, 0.35)  # patience from user, fraction from strict
    off = HealthConfig(preset="off", rules={"non_finite": {"enabled": True}}).resolved()
    assert [n for n, p in off.items() if p.enabled] == ["non_finite"]


def test_config_round_trips_through_dict():
    cfg = HealthConfig(preset="strict", rules={"kl_explosion": {"max_kl": 0.5}}, on_fail="continue")
    assert HealthConfig.model_validate(cfg.model_dump()) == cfg


@pytest.mark.parametrize("preset", sorted(HEALTH_PRESETS))
def test_presets_are_valid_data(preset):
    for rule, overrides in preset_overrides(preset).items():
        assert rule in HEALTH_RULES
        resolve_rule_params(rule, preset, None)  # validates
        assert isinstance(overrides, dict)


def test_off_disables_every_rule_and_strict_is_tighter():
    assert all(not p.enabled for p in HealthConfig(preset="off").resolved().values())
    default = HealthConfig().resolved()
    strict = HealthConfig(preset="strict").resolved()
    for name in HEALTH_RULES.names():
        d, s = default[name], strict[name]
        assert s.severity == d.severity
        assert getattr(s, "patience", 1) <= getattr(d, "patience", 1)
        for field in (
            "max_truncated_frac",
            "max_ratio",
            "max_zero_std_frac",
            "max_clip_frac",
            "max_kl",
            "max_prob_abs_diff",
            "margin",
            "max_multiple",
        ):
            if hasattr(d, field):
                assert getattr(s, field) <= getattr(d, field), (name, field)
        if hasattr(d, "min_fraction"):
            assert s.min_fraction >= d.min_fraction


def test_preset_overrides_is_a_copy():
    preset_overrides("strict")["kl_explosion"]["max_kl"] = 99.0
    assert HEALTH_PRESETS["strict"]["kl_explosion"]["max_kl"] != 99.0
    with pytest.raises(ValueError, match="valid: default, off, strict"):
        preset_overrides("nope")
