"""Health presets as data: preset name -> {rule name -> parameter overrides}.

A preset only lists what differs from the rule's ``Params`` defaults (which live, documented, in
``rules/``, one module per family); a rule missing from a preset runs with its defaults. ``{"enabled": False}``
disables a rule. User overrides (``HealthConfig.rules``) are applied on top of the preset,
per parameter.

* ``default``: the ``Params`` defaults. Only ``non_finite`` is ``fail`` (stops the run); every
  other rule warns.
* ``strict``: the same rules, tighter limits and shorter patience (fires earlier on the same
  drift); same severities. For short CPU runs and CI, where a warning should come early.
* ``off``: every rule disabled, **including** ``non_finite``: ``health/status`` is always 0 and
  the run is never stopped by the monitor. To keep only the NaN guard use
  ``{preset: off, rules: {non_finite: {enabled: true}}}``.
"""

from __future__ import annotations

from typing import Any

from workbench.errors import suggest_and_list

from .rules import HEALTH_RULES

__all__ = ["HEALTH_PRESETS", "preset_overrides"]

HEALTH_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {},
    "strict": {
        # DAPO [1]: entropy should not fall; react to a halving-and-more instead of a 5x drop.
        "entropy_collapse": {"min_fraction": 0.35, "patience": 3},
        "entropy_blowup": {"max_multiple": 2.0, "patience": 3},
        # DAPO [1] overlong filtering: more than 1 in 10 truncated already biases rewards.
        "length_blowup": {"max_truncated_frac": 0.1, "patience": 3},
        # Dr. GRPO [3]: the gap starts small; flag a 25% excess early.
        "incorrect_length_gap": {"max_ratio": 1.25, "patience": 2},
        # the default patience (4), a smaller margin: with patience 3, 5.8% of healthy 200-step runs
        # at lag-1 autocorrelation 0.8 false-alarmed, with 4, 4.0% (tests/health/test_false_alarms_autocorrelated.py).
        "reward_collapse": {"margin": 0.1, "patience": 4},
        # DAPO [1] dynamic sampling is worth it well before 90% of groups are degenerate.
        "no_learning_signal": {"max_zero_std_frac": 0.75, "patience": 5},
        # Yao et al. [4]: healthy bf16 max prob diff is ~0.4, int8 ~1.0.
        "mismatch_spike": {"max_prob_abs_diff": 0.5, "max_kl": 0.01},
        "clip_fraction_anomaly": {"max_clip_frac": 0.2, "patience": 3},
        "kl_explosion": {"max_kl": 0.3},
    },
    "off": {name: {"enabled": False} for name in HEALTH_RULES.names()},
}


def preset_overrides(preset: str) -> dict[str, dict[str, Any]]:
    """The overrides of a named preset (a copy); ``ValueError`` with the valid names if unknown."""
    try:
        data = HEALTH_PRESETS[preset]
    except KeyError:
        hint = suggest_and_list(preset, sorted(HEALTH_PRESETS))
        raise ValueError(f"unknown health preset {preset!r}{hint}") from None
    return {rule: dict(params) for rule, params in data.items()}
