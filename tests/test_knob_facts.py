"""Which config keys select or tune a unit is declared where the unit's kind registers (``Registry.selected_by``,
``Registry.settings``); compare's activity gate and plan's unused-unit lint derive from it, with no list of
their own."""

from __future__ import annotations

import pytest

from workbench.algorithms import IS_CORRECTIONS
from workbench.analysis.lint import LINT_RULES
from workbench.compare.activity import changed_knobs, gated_keys, unit_registries
from workbench.config import RunConfig
from workbench.registry import Registry


def unused_unit_knobs(**algorithm) -> list[str]:
    cfg = RunConfig.model_validate({"algorithm": algorithm})
    return [f.knob for f in LINT_RULES.get("knob_of_an_unused_unit")(cfg)]


def test_the_gated_keys_are_the_registered_facts():
    # the ten keys compare gated when it listed them by hand (before the registries declared them)
    assert gated_keys() == {
        "algorithm.clip_low",
        "algorithm.clip_high",
        "algorithm.dual_clip",
        "algorithm.correction",
        "algorithm.correction_cap",
        "algorithm.batch_filter",
        "algorithm.filter_on",
        "algorithm.max_sampling_rounds",
        "algorithm.token_filters",
        "reward.shaping",
    }


def test_every_declared_key_is_a_config_field():
    """A typo in a registry's declared facts would silently gate nothing: each key must name a field."""
    for kind, registry in unit_registries().items():
        for key in (registry.selected_by, *registry.settings):
            section, name = key.split(".", 1)
            assert name in type(getattr(RunConfig(), section)).model_fields, f"{kind}: {key}"


def test_a_kinds_settings_drive_both_the_gate_and_the_lint(monkeypatch):
    assert "algorithm.correction_cap" in gated_keys()
    assert unused_unit_knobs(correction_cap=5.0) == ["algorithm.correction_cap=5"]
    knob = changed_knobs(
        {"algorithm.correction": "tis", "algorithm.correction_cap": 5.0},
        {"algorithm.correction": "tis", "algorithm.correction_cap": 2.0},
    )
    assert [(k.label, k.activity.metric) for k in knob] == [("correction_cap (tis)", "mismatch/is_clipped_frac")]

    monkeypatch.setattr(IS_CORRECTIONS, "settings", ())  # the kind declares no setting any more
    assert "algorithm.correction_cap" not in gated_keys()
    assert unused_unit_knobs(correction_cap=5.0) == []
    knob = changed_knobs(
        {"algorithm.correction": "tis", "algorithm.correction_cap": 5.0},
        {"algorithm.correction": "tis", "algorithm.correction_cap": 2.0},
    )
    assert [(k.label, k.activity) for k in knob] == [("algorithm.correction_cap", None)]  # ungated: always tested


def test_settings_without_a_selecting_key_are_refused():
    with pytest.raises(ValueError, match="needs selected_by"):
        Registry("widget", settings=("algorithm.widget_size",))
