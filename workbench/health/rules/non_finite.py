"""Health rules — Non-finite values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.metrics.names import GRAD_NORM, LOSS_POLICY

from ..columns import Block
from ..events import Severity
from .base import (
    BlockReadings,
    HealthRule,
    Reading,
    RuleParams,
    _register,
    _stateless,
    reading_of,
    to_float,
)

# --------------------------------------------------------------------------------------------
# Non-finite values
# --------------------------------------------------------------------------------------------


class NonFiniteParams(RuleParams):
    severity: Severity = "fail"
    """``fail`` by default: a NaN/inf in the loss or gradient poisons the weights."""

    keys: list[str] | None = None
    """Metrics to check; ``None`` checks every numeric value in the step's dict."""


@_register
class NonFinite(HealthRule):
    """Non-finite metrics: a NaN or ±inf in ``loss/policy``, ``grad/norm`` or any other metric.

    Symptom: numerical divergence: overflowing importance ratios (hence the ±20 log-ratio clamp
    of workbench/algorithms/_masked.py, as in verl), a zero-variance group divided by a zero std in the GRPO advantage
    [13] without its ε, low-precision (bf16/fp8) overflow [4]. Once a NaN reaches the optimizer
    the weights are lost, so this rule is immediate (no patience) and ``fail`` by default.
    Non-numeric values are ignored.
    """

    name = "non_finite"
    summary = "a NaN or inf appears; this is fatal and stops the run"
    Params = NonFiniteParams
    watches = (LOSS_POLICY, GRAD_NORM, "*")
    consequence = "Non-finite values: training has diverged numerically; further steps are wasted."

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        keys = self.params.keys if self.params.keys is not None else list(metrics)
        bad: list[tuple[str, float]] = []
        seen = False
        for key in keys:
            x = to_float(metrics.get(key))
            if x is None:
                continue
            seen = True
            if not math.isfinite(x):
                bad.append((key, x))
        if not seen:
            return None
        if not bad:
            return Reading(False, "", 0.0, math.nan, "all metrics finite")
        bad.sort()
        key, x = bad[0]
        listed = ", ".join(f"{k} = {v}" for k, v in bad)
        return Reading(True, key, x, math.nan, f"non-finite metric(s): {listed}")

    def columns(self) -> tuple[str, ...]:
        return tuple(self.params.keys or ())  # every metric (keys None): the block's own non-finite list

    def _block_readings(self, block: Block) -> BlockReadings:
        keys = self.params.keys
        if keys is None:
            at = np.flatnonzero(block.numeric)
            bad = np.zeros(len(block), dtype=bool)
            bad[list(block.non_finite)] = True
            return BlockReadings(
                at, bad[at], lambda k: reading_of(lambda: self.update(dict(block.non_finite[int(at[k])])))
            )
        checked = np.zeros(len(block), dtype=bool)
        violated = np.zeros(len(block), dtype=bool)
        for key in keys:
            present = block.has(key)
            checked |= present
            if key in block.values:
                violated |= present & ~np.isfinite(block.values[key])
        return _stateless(self, block, checked, violated)
