"""Health rules — Clipping and KL to the reference."""

from __future__ import annotations

from pydantic import Field

from workbench.metrics.names import CLIP_FRAC, KL_REF

from .base import (
    StreakParams,
    _Above,
    _register,
)


class ClipFractionParams(StreakParams):
    max_clip_frac: float = Field(default=0.3, ge=0.0, le=1.0)
    """Fires when clip/frac > this fraction of response tokens clipped."""


@_register
class ClipFractionAnomaly(_Above):
    """Clip-fraction anomaly: a large share of tokens hit the PPO/GRPO clip.

    Symptom: the policy moves far from the sampling policy within one step (lr too high, too many
    updates per batch, or a large mismatch); clipped tokens get no gradient, so learning stalls
    and, on the high side, exploration tokens are cut off (PPO [11]; DAPO [1] clip-higher;
    MiniMax-M1/CISPO [8] on clipped "fork" tokens).
    """

    name = "clip_fraction_anomaly"
    summary = "the clip fraction stays too high"
    Params = ClipFractionParams
    limit = "max_clip_frac"
    watches = (CLIP_FRAC,)
    consequence = (
        "Clip fraction anomaly: updates are too far off the sampling policy "
        "(lower lr or updates per batch; check the mismatch)."
    )


class KLExplosionParams(StreakParams):
    patience: int = Field(default=1, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_kl: float = Field(default=1.0, gt=0.0)
    """Fires when kl/ref (KL to the reference policy) > this."""


@_register
class KLExplosion(_Above):
    """KL explosion: the policy runs away from the reference policy.

    Symptom: ``kl/ref`` (only logged when a reference/KL penalty is used, as in the original GRPO
    [13]) exceeds a limit: the KL anchor is no longer holding the policy, typically before reward
    hacking or a collapse. The seed overview notes most reasoning recipes drop the KL term; then
    the metric is absent and this rule does not evaluate.
    """

    name = "kl_explosion"
    summary = "KL to the reference policy explodes"
    Params = KLExplosionParams
    limit = "max_kl"
    watches = (KL_REF,)
    consequence = (
        "KL explosion: the policy is running away from the reference (raise the KL coefficient or lower the lr)."
    )
