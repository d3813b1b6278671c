"""``HealthConfig``: which health preset, per-rule overrides, and what a failure does.

Study YAML::

    health:
      preset: default            # default | strict | off
      rules:                     # per-rule parameter overrides, applied on top of the preset
        entropy_collapse: {min_fraction: 0.1, patience: 10}
        kl_explosion: {enabled: false}
        non_finite: {severity: warn}
      on_fail: stop              # stop | continue

Everything is checked at construction: an unknown preset or rule name lists the valid ones (with a
did-you-mean); an unknown parameter names the field and the rule's valid fields; a bad value names
the field and the constraint.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from workbench.errors import format_path, pydantic_issues, suggest_and_list

from .presets import preset_overrides
from .rules import HEALTH_RULES, RuleParams

__all__ = ["HealthConfig", "resolve_rule_params"]


def _param_error(rule: str, err: ValidationError) -> str:
    parts = [f"{format_path(loc) or '<params>'}: {msg}" for loc, msg in pydantic_issues(err)]
    return f"invalid parameters for health rule {rule!r}: " + "; ".join(parts)


def resolve_rule_params(rule: str, preset: str = "default", overrides: dict[str, Any] | None = None) -> RuleParams:
    """The validated ``Params`` of ``rule`` under ``preset`` with ``overrides`` applied on top.

    Raises ``ValueError`` for an unknown rule (listing valid rules), an unknown parameter (naming
    it and listing the rule's fields) or an invalid value.
    """
    cls = HEALTH_RULES.get(rule)  # ValueError with did-you-mean on unknown names
    fields = cls.Params.model_fields
    merged: dict[str, Any] = dict(preset_overrides(preset).get(rule, {}))
    for key, value in (overrides or {}).items():
        if key not in fields:
            hint = suggest_and_list(key, sorted(fields))
            raise ValueError(f"unknown parameter {key!r} for health rule {rule!r}{hint}")
        merged[key] = value
    try:
        return cls.Params(**merged)
    except ValidationError as err:
        raise ValueError(_param_error(rule, err)) from None


class HealthConfig(BaseModel):
    """Health monitoring of one run (the ``health:`` section of a run or study config)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    preset: str = "default"
    """Named bundle of rule settings: ``default``, ``strict`` or ``off`` (all rules disabled,
    including ``non_finite``)."""

    rules: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-rule parameter overrides on top of the preset, e.g.
    ``{entropy_collapse: {patience: 10}}``; ``{enabled: false}`` disables a rule,
    ``{enabled: true}`` re-enables one the preset disabled."""

    on_fail: Literal["stop", "continue"] = "stop"
    """What a ``fail``-severity event does: ``stop`` makes ``HealthMonitor.should_stop`` true (the
    loop ends the run, marked failed); ``continue`` only records it."""

    step0_gate: bool = True
    """Before the first update, re-score the first batch with the learner and stop the run if the sampler's
    logprobs differ by more than the two precisions explain (workbench/train/step0_gate.py)."""

    mismatch_record_every: int = Field(default=100, ge=0)
    """Every this many steps (and at step 0), keep the step's mismatch histogram and worst tokens for the
    run's ``mismatch.json`` artifact, from the logprobs the update computes anyway (no extra forward). 0: never."""

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        preset_overrides(v)  # raises ValueError listing the valid presets
        return v

    @field_validator("rules")
    @classmethod
    def _known_rules_and_params(cls, v: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        preset = info.data.get("preset", "default")  # absent only if the preset itself failed
        for rule, overrides in v.items():
            resolve_rule_params(rule, preset, overrides)
        return v

    def resolved(self) -> dict[str, RuleParams]:
        """Every registered rule's validated params under this config (disabled rules included)."""
        return {name: resolve_rule_params(name, self.preset, self.rules.get(name)) for name in HEALTH_RULES.names()}
