"""Health rules — Entropy: the policy's next-token entropy collapsing or blowing up."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field

from workbench.metrics.names import ENTROPY_MEAN

from ..columns import Block
from .base import (
    BlockReadings,
    HealthRule,
    Reading,
    StreakParams,
    _fmt,
    _observations,
    _register,
    _warm_up,
    finite_value,
)

# --------------------------------------------------------------------------------------------
# Entropy
# --------------------------------------------------------------------------------------------


class EntropyBaselineParams(StreakParams):
    baseline_steps: int = Field(default=3, ge=1)
    """Initial entropy = mean of the first ``baseline_steps`` observations (not checked)."""


class _EntropyRelative(HealthRule):
    """Shared baseline logic: initial entropy from the first observations, then a relative check."""

    watches = (ENTROPY_MEAN,)

    def _reset_state(self) -> None:
        self._baseline: list[float] = []
        self._initial: float | None = None

    @property
    def min_observations(self) -> int:
        return self.params.baseline_steps + 1

    @property
    def initial(self) -> float | None:
        """The baseline entropy, once ``baseline_steps`` observations have been seen."""
        return self._initial

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, ENTROPY_MEAN)
        if x is None:
            return None
        if self._initial is None:
            self._baseline.append(x)
            if len(self._baseline) == self.params.baseline_steps:
                self._initial = math.fsum(self._baseline) / len(self._baseline)
            return None
        if self._initial <= 0.0:
            return None  # a degenerate baseline: relative thresholds are meaningless
        return self._compare(x, self._initial)

    def _compare(self, x: float, initial: float) -> Reading:  # pragma: no cover - abstract
        raise NotImplementedError

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _block_readings(self, block: Block) -> BlockReadings:
        at, x = _observations(block, ENTROPY_MEAN)
        k = _warm_up(self, ENTROPY_MEAN, x, lambda: self._initial is None)
        at, x = at[k:], x[k:]
        initial = self._initial
        if initial is None or initial <= 0.0:
            return BlockReadings.none()
        return BlockReadings(at, self._violated(x, initial), lambda i: self._compare(float(x[i]), initial))


class EntropyCollapseParams(EntropyBaselineParams):
    min_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Fires when entropy < ``min_fraction`` × initial entropy."""


@_register
class EntropyCollapse(_EntropyRelative):
    """Entropy collapse: ``entropy/mean`` falls below a fraction of its initial value.

    Symptom: the next-token distribution concentrates on one token, samples in a group become
    near-identical, the group-relative advantage loses its signal and exploration stops. DAPO [1]
    identifies it in vanilla GRPO and traces it to the symmetric PPO clip (hence clip-higher);
    [4] sees it with quantised (int8) rollouts, i.e. a large sampler/learner mismatch.
    """

    name = "entropy_collapse"
    summary = "entropy falls below a fraction of its starting value"
    Params = EntropyCollapseParams
    consequence = (
        "Entropy collapse: outputs turn deterministic and exploration stops "
        "(DAPO [1]; try clip_high > clip_low, or an IS correction if the mismatch is large [4])."
    )

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:
        return x < self.params.min_fraction * initial

    def _compare(self, x: float, initial: float) -> Reading:
        f = self.params.min_fraction
        thr = f * initial
        return Reading(
            violated=x < thr,
            metric=ENTROPY_MEAN,
            value=x,
            threshold=thr,
            detail=f"entropy/mean = {_fmt(x)} < {f:g} × initial {_fmt(initial)} = {_fmt(thr)}",
        )


class EntropyBlowupParams(EntropyBaselineParams):
    max_multiple: float = Field(default=3.0, gt=1.0)
    """Fires when entropy > ``max_multiple`` × initial entropy."""


@_register
class EntropyBlowup(_EntropyRelative):
    """Entropy blow-up: ``entropy/mean`` rises above a multiple of its initial value.

    Symptom: the policy spreads probability over many tokens, i.e. it is drifting towards
    gibberish. The seed overview's health checklist asks for entropy "not too low and not too
    high"; a *slow* rise is healthy (DAPO [1]), a multiple of the start is not.
    """

    name = "entropy_blowup"
    summary = "entropy rises above a multiple of its starting value"
    Params = EntropyBlowupParams
    consequence = (
        "Entropy blow-up: the policy is drifting towards random text "
        "(check the learning rate, clip_high and the reward)."
    )

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:
        return x > self.params.max_multiple * initial

    def _compare(self, x: float, initial: float) -> Reading:
        m = self.params.max_multiple
        thr = m * initial
        return Reading(
            violated=x > thr,
            metric=ENTROPY_MEAN,
            value=x,
            threshold=thr,
            detail=f"entropy/mean = {_fmt(x)} > {m:g} × initial {_fmt(initial)} = {_fmt(thr)}",
        )
