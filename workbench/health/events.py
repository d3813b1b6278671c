"""Health verdict data: severities, status codes, events and per-step verdicts.

Status codes are the values of the ``health/status`` metric (docs/metrics.md): 0 ok, 1 warn, 2 fail.
Events are plain frozen dataclasses with a ``to_dict`` that is strict JSON (non-finite floats are
written as the strings ``"nan"``, ``"inf"``, ``"-inf"``), so ``health.json`` always parses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.metrics.names import HEALTH_STATUS

Severity = Literal["warn", "fail"]

OK, WARN, FAIL = 0, 1, 2
STATUS_NAMES: tuple[str, str, str] = ("ok", "warn", "fail")
SEVERITY_CODE: dict[str, int] = {"warn": WARN, "fail": FAIL}

TAG_STATUS = "workbench.health"
TAG_REASONS = "workbench.health_reasons"
TAG_LABEL = "workbench.health_label"  # the status as shown: "ok (k of n rules evaluated)" when not all were
REPORT_ARTIFACT = "health.json"


def json_float(x: float | None) -> float | str | None:
    """A float as strict JSON: finite floats unchanged, NaN/inf as strings, None kept."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """One rule starting to fire: the step it crossed its patience and the reading at that step.

    ``value`` is the watched quantity (e.g. the entropy, the length ratio, the offending NaN),
    ``threshold`` the limit it was compared with at that step (``nan`` for ``non_finite``).
    """

    rule: str
    step: int
    metric: str
    value: float
    threshold: float
    severity: Severity
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "step": self.step,
            "metric": self.metric,
            "value": json_float(self.value),
            "threshold": json_float(self.threshold),
            "severity": self.severity,
            "message": self.message,
        }

    def short(self) -> str:
        """``rule@step``: the form used in the ``workbench.health_reasons`` tag."""
        return f"{self.rule}@{self.step}"


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """What one ``HealthMonitor.observe`` call concluded.

    ``status``: worst severity among rules *active* after this step (0 ok, 1 warn, 2 fail); log it
    as ``health/status``. ``events``: rules that started firing at this step (a rule fires once
    when it becomes active, not again on every step it stays active). ``active``: names of the
    rules whose condition currently holds (sorted).
    """

    step: int
    status: int
    events: tuple[HealthEvent, ...] = ()
    active: tuple[str, ...] = field(default=())

    @property
    def status_name(self) -> str:
        return STATUS_NAMES[self.status]

    def as_metrics(self) -> dict[str, float]:
        """``{"health/status": status}``: merge into the step's metric dict before logging."""
        return {HEALTH_STATUS: float(self.status)}
