"""Paper presets: named bundles of unit settings, as data, one citation per value.

A preset only chooses names and numbers of registered units; it adds no code path.
Fields the user sets explicitly in ``algorithm:`` win over the preset.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # DeepSeekMath (Shao et al. 2024) §4.1: group-normalised advantages, PPO clip 0.2,
    # per-sequence 1/|o| averaging then mean over the group.
    "grpo": {
        "estimator": "grpo",
        "loss": "ppo_clip",
        "agg_mode": "seq-mean-token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # Dr. GRPO (Liu et al. 2025) §3.1: drop the std division and the 1/|o| length normaliser
    # (sum over tokens divided by a constant, here the generation budget).
    "dr_grpo": {
        "estimator": "dr_grpo",
        "loss": "ppo_clip",
        "agg_mode": "seq-mean-token-sum-norm",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # DAPO (Yu et al. 2025) §3.1 clip-higher ε_high=0.28, §3.2 dynamic sampling, §3.3 token-level loss,
    # §3.4 overlong filtering. (The soft overlong punishment is reward shaping: `reward.shaping`.)
    "dapo": {"estimator": "grpo", "loss": "ppo_clip", "agg_mode": "token-mean", "clip_low": 0.2, "clip_high": 0.28,
             "batch_filter": "zero_std", "token_filters": ["overlong"]},
    # GSPO (Zheng et al. 2025) §5.1: sequence-level ratio, clip range (3e-4, 4e-4).
    "gspo": {
        "estimator": "grpo",
        "loss": "gspo",
        "agg_mode": "seq-mean-token-mean",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
    },
    # GMPO (Zhao et al. 2025) §3: geometric-mean ratio, clip in log space to (−0.4, 0.4).
    "gmpo": {"estimator": "grpo", "loss": "gmpo", "agg_mode": "seq-mean-token-mean", "clip_low": 0.4, "clip_high": 0.4},
    # CISPO (MiniMax-M1 2025) §3.1: clip the IS weight, not the update; no lower bound in
    # practice (ε_low large), ε_high tuned — DAPO's 0.28 as a starting point.
    "cispo": {"estimator": "grpo", "loss": "cispo", "agg_mode": "token-mean", "clip_low": 1.0, "clip_high": 0.28},
    # RLOO (Ahmadian et al. 2024) §3: leave-one-out baseline.
    "rloo": {"estimator": "rloo", "loss": "ppo_clip", "agg_mode": "token-mean", "clip_low": 0.2, "clip_high": 0.2},
    # REINFORCE++ (Hu 2025) §3: group-mean baseline then batch whitening.
    "reinforce_pp": {
        "estimator": "reinforce_plus_plus_baseline",
        "loss": "ppo_clip",
        "agg_mode": "token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
    # Lite PPO (Liu et al. 2025, "Part I: Tricks or Traps") §4: group mean, batch std, token-level loss.
    "lite_ppo": {
        "estimator": "lite_ppo",
        "loss": "ppo_clip",
        "agg_mode": "token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
    },
}


def resolve_preset(algorithm: dict[str, Any]) -> dict[str, Any]:
    """Return ``algorithm`` with unset (missing or None) fields filled from its preset."""
    name = algorithm.get("preset", "grpo")
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(str(name), list(PRESETS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown preset {name!r}{hint} (valid: {', '.join(sorted(PRESETS))})")
    out = dict(algorithm)
    for key, value in PRESETS[name].items():
        if out.get(key) is None:
            out[key] = value
    return out
