"""Paper presets: named bundles of unit settings, as data, one citation per value.

A preset only chooses names and numbers of registered units; it adds no code path.
Fields the user sets explicitly in ``algorithm:`` win over the preset; in ``loss_params`` and
``estimator_params``, key by key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.algorithms.params import hoist_loss_param_fields
from workbench.errors import suggest_and_list


@dataclass(frozen=True)
class Paper:
    """A source a preset value comes from."""

    short: str  # how tables cite it: "DAPO"
    title: str
    authors: str  # "Yu et al. 2025"
    url: str


@dataclass(frozen=True)
class Setting:
    """One preset value and where it comes from: ``paper`` and ``section`` (as the paper numbers it)."""

    value: Any
    paper: Paper
    section: str

    @property
    def citation(self) -> str:
        return f"{self.paper.short} {self.section}".strip()


@dataclass(frozen=True)
class Preset:
    """A named bundle of unit settings, each with its citation."""

    name: str
    summary: str
    paper: Paper
    settings: dict[str, Setting]
    inert_by_default: str = ""  # a knob the preset sets that cannot act on the default study shape, and why

    def values(self) -> dict[str, Any]:
        return {key: setting.value for key, setting in self.settings.items()}


def arxiv(number: str) -> str:
    return f"https://arxiv.org/abs/{number}"


DEEPSEEKMATH = Paper(
    "DeepSeekMath",
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    "Shao et al. 2024",
    arxiv("2402.03300"),
)
DR_GRPO = Paper(
    "Dr. GRPO", "Understanding R1-Zero-Like Training: A Critical Perspective", "Liu et al. 2025", arxiv("2503.20783")
)
DAPO = Paper(
    "DAPO", "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", "Yu et al. 2025", arxiv("2503.14476")
)
GSPO = Paper("GSPO", "Group Sequence Policy Optimization", "Zheng et al. 2025", arxiv("2507.18071"))
GMPO = Paper("GMPO", "Geometric-Mean Policy Optimization", "Zhao et al. 2025", arxiv("2507.20673"))
MINIMAX_M1 = Paper(
    "MiniMax-M1",
    "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
    "MiniMax 2025",
    arxiv("2506.13585"),
)
RLOO = Paper(
    "RLOO",
    "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
    "Ahmadian et al. 2024",
    arxiv("2402.14740"),
)
REINFORCE_PP = Paper(
    "REINFORCE++",
    "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    "Hu 2025",
    arxiv("2501.03262"),
)
TRICKS_OR_TRAPS = Paper(
    "Tricks or Traps",
    "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning",
    "Liu et al. 2025",
    arxiv("2508.08221"),
)
OLMO3 = Paper("OLMo 3", "Olmo 3", "Team Olmo 2025", arxiv("2512.13961"))
SAPO = Paper("SAPO", "Soft Adaptive Policy Optimization", "Gao et al. 2025", arxiv("2511.20347"))
TRL = Paper(
    "TRL", "TRL: Transformer Reinforcement Learning", "von Werra et al. 2020", "https://github.com/huggingface/trl"
)
TIS = Paper(
    "TIS",
    "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training",
    "Yao et al. 2025",
    "https://fengyao.notion.site/off-policy-rl",
)
PASSK_TRAINING = Paper(
    "Inference-time objectives",
    "Optimizing Language Models for Inference Time Objectives using Reinforcement Learning",
    "Tang et al. 2025",
    arxiv("2503.19595"),
)
PAPERS = [
    DEEPSEEKMATH,
    DR_GRPO,
    DAPO,
    GSPO,
    GMPO,
    MINIMAX_M1,
    RLOO,
    REINFORCE_PP,
    TRICKS_OR_TRAPS,
    OLMO3,
    SAPO,
    TRL,
    TIS,
    PASSK_TRAINING,
]


def _settings(paper: Paper, section: str, **values: Any) -> dict[str, Setting]:
    """Several settings from one paper section."""
    return {key: Setting(value, paper, section) for key, value in values.items()}


# A clip range acts only once the policy moves within a batch: with one optimizer step per batch the ratio
# is exactly 1 (workbench/analysis/lint.py clip_with_one_step). DAPO's released recipe (verl recipe/dapo:
# train_prompt_bsz 512, train_prompt_mini_bsz 32) takes 16 updates per batch, the setting its clip-higher
# was tuned in; the presets that take DAPO's clip_high take its update count with it.
DAPO_UPDATES = "recipe (512 prompts per step, 32 per update)"
# A clip acts only from an update's second optimizer step on (the ratio is exactly 1 at the first), so each
# clipping preset takes its paper's update count: GSPO splits each rollout batch into four minibatches (§5.1);
# GMPO's released script samples 128 prompts x 8 per rollout and updates on 128 at a time (8 updates).
GMPO_UPDATES = "code: callsys/GMPO qwen2.5-math-7b-gmpo.sh (rollout 128x8, train_batch_size 128)"

PRESET_LIST: list[Preset] = [
    Preset(
        "grpo",
        "group-normalised advantages, PPO clip, per-sequence 1/|o| averaging",
        DEEPSEEKMATH,
        _settings(
            DEEPSEEKMATH,
            "§4.1",
            estimator="grpo",
            loss="ppo_clip",
            agg_mode="seq-mean-token-mean",
            clip_low=0.2,
            clip_high=0.2,
        ),
    ),
    # Dr. GRPO drops the std division and the 1/|o| length normaliser (sum over tokens divided by a
    # constant, here the generation budget); it keeps GRPO's clip.
    Preset(
        "dr_grpo",
        "no std division, no 1/|o| length normaliser",
        DR_GRPO,
        _settings(DR_GRPO, "§3.1", estimator="dr_grpo", loss="ppo_clip", agg_mode="seq-mean-token-sum-norm")
        | _settings(DEEPSEEKMATH, "§4.1", clip_low=0.2, clip_high=0.2),
    ),
    # The soft overlong punishment (DAPO §3.4) is reward shaping: `reward.shaping`.
    Preset(
        "dapo",
        "clip-higher, dynamic sampling, token-level loss, overlong filtering",
        DAPO,
        _settings(DEEPSEEKMATH, "§4.1", estimator="grpo", loss="ppo_clip")
        | _settings(DAPO, "§3.3", agg_mode="token-mean")
        | _settings(DAPO, "§3.1", clip_low=0.2, clip_high=0.28)
        | _settings(DAPO, "§3.2", batch_filter="zero_std")
        | _settings(DAPO, "§3.4", token_filters=["overlong"])
        | _settings(DAPO, DAPO_UPDATES, minibatches=16),
    ),
    Preset(
        "gspo",
        "sequence-level importance ratio and clipping",
        GSPO,
        _settings(DEEPSEEKMATH, "§4.1", estimator="grpo")
        | _settings(GSPO, "§4", loss="gspo", agg_mode="seq-mean-token-mean")
        | _settings(GSPO, "§5.1", clip_low=3e-4, clip_high=4e-4, minibatches=4),
    ),
    # Clip in log space to (−0.4, 0.4).
    Preset(
        "gmpo",
        "geometric-mean ratio, clipped in log space",
        GMPO,
        _settings(DEEPSEEKMATH, "§4.1", estimator="grpo")
        | _settings(GMPO, "§3", loss="gmpo", agg_mode="seq-mean-token-mean", clip_low=0.4, clip_high=0.4)
        | _settings(GMPO, GMPO_UPDATES, minibatches=8),
    ),
    # Clip the IS weight, not the update: no lower bound in practice (ε_low large); ε_high tuned,
    # DAPO's 0.28 as a starting point.
    Preset(
        "cispo",
        "clipped IS-weight policy optimisation",
        MINIMAX_M1,
        _settings(DEEPSEEKMATH, "§4.1", estimator="grpo")
        | _settings(MINIMAX_M1, "§3.1", loss="cispo", agg_mode="token-mean", clip_low=1.0)
        | _settings(DAPO, "§3.1", clip_high=0.28)
        | _settings(DAPO, DAPO_UPDATES, minibatches=16),
    ),
    Preset(
        "rloo",
        "leave-one-out baseline",
        RLOO,
        _settings(RLOO, "§3", estimator="rloo")
        | _settings(DEEPSEEKMATH, "§4.1", loss="ppo_clip", clip_low=0.2, clip_high=0.2)
        | _settings(DAPO, "§3.3", agg_mode="token-mean"),
    ),
    Preset(
        "reinforce_pp",
        "group-mean baseline, then batch whitening",
        REINFORCE_PP,
        _settings(REINFORCE_PP, "§3", estimator="reinforce_plus_plus_baseline")
        | _settings(DEEPSEEKMATH, "§4.1", loss="ppo_clip", clip_low=0.2, clip_high=0.2)
        | _settings(DAPO, "§3.3", agg_mode="token-mean"),
    ),
    Preset(
        "lite_ppo",
        "group-mean advantage, batch-level std, token-level loss",
        TRICKS_OR_TRAPS,
        _settings(TRICKS_OR_TRAPS, "§4", estimator="lite_ppo", agg_mode="token-mean")
        | _settings(DEEPSEEKMATH, "§4.1", loss="ppo_clip", clip_low=0.2, clip_high=0.2),
    ),
    # OLMo 3 Think's RL recipe, as the GRPO++ overview (Wolfe 2025, "Putting It All Together") lists it:
    # zero-gradient filtering + active sampling (DAPO's dynamic sampling), token-level loss, no KL,
    # clip-higher, truncated importance sampling, no std in the advantage (Dr. GRPO). The clip and TIS
    # numbers are the cited papers' (DAPO's ε_high, the TIS cap stays `correction_cap`'s default).
    Preset(
        "olmo3",
        "OLMo 3 Think: DAPO-style filtering, no KL, no std, TIS",
        OLMO3,
        _settings(DR_GRPO, "§3.1", estimator="dr_grpo")
        | _settings(DEEPSEEKMATH, "§4.1", loss="ppo_clip")
        | _settings(DAPO, "§3.3", agg_mode="token-mean")
        | _settings(DAPO, "§3.1", clip_low=0.2, clip_high=0.28)
        | _settings(DAPO, "§3.2", batch_filter="zero_std")
        | _settings(OLMO3, "RL recipe, per the GRPO++ overview", kl_coef=0.0)
        | _settings(TIS, "", correction="tis")
        | _settings(DAPO, DAPO_UPDATES, minibatches=16),
        inert_by_default="correction tis: it reweights by the sampler/learner ratio, which is 1 to the float floor "
        "when the sampler shares the learner's engine and dtype (the default: hf, float32); it "
        "acts with sampler.dtype bfloat16/float16 or sampler.backend vllm",
    ),
    # A soft gate instead of a clip: no clip range. Its temperatures are the loss's own parameters
    # (defaults 1.0 / 1.05, the paper's; `algorithm.loss_params`). Group-normalised advantages and
    # GRPO's per-sequence 1/|o| mean, as TRL's loss_type="sapo" aggregates it.
    Preset(
        "sapo",
        "soft temperature-controlled gate instead of a hard clip",
        SAPO,
        _settings(DEEPSEEKMATH, "§4.1", estimator="grpo")
        | _settings(SAPO, "objective (soft gate)", loss="sapo")
        | _settings(TRL, "GRPOTrainer loss_type=sapo", agg_mode="seq-mean-token-mean"),
    ),
    # The pass@k objective changes the advantage only (verl ships it as adv_estimator=grpo_passk beside GRPO's
    # loss; its docstring cites arXiv:2503.19595); the loss, clip and 1/|o| averaging stay GRPO's.
    Preset(
        "grpo_passk",
        "pass@k objective: only each group's best completion moves, by r_max − r_second",
        PASSK_TRAINING,
        _settings(PASSK_TRAINING, "pass@k (max-reward) leave-one-out gradient", estimator="grpo_passk")
        | _settings(DEEPSEEKMATH, "§4.1", loss="ppo_clip", agg_mode="seq-mean-token-mean", clip_low=0.2, clip_high=0.2),
    ),
]

PRESET_INFO: dict[str, Preset] = {preset.name: preset for preset in PRESET_LIST}

# The values alone: what ``resolve_preset`` fills in.
PRESETS: dict[str, dict[str, Any]] = {preset.name: preset.values() for preset in PRESET_LIST}


def resolve_preset(algorithm: dict[str, Any]) -> dict[str, Any]:
    """Return ``algorithm`` with its missing fields filled from its preset.

    A field present with ``None`` stays ``None``: that is how a variant switches a preset's knob
    off (``batch_filter: null`` under ``preset: dapo``). A mapping the preset sets (``loss_params``,
    ``estimator_params``) is merged key by key: the user's keys win, the preset's others stay.
    ``loss_params.clip_high`` is read as the field ``clip_high``, in the user's mapping and the
    preset's (``params.hoist_loss_param_fields``). A resolved config dumped and read back resolves to
    itself.
    """
    name = algorithm.get("preset", "grpo")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}{suggest_and_list(name, sorted(PRESETS))}")
    out = hoist_loss_param_fields(algorithm)
    for key, value in hoist_loss_param_fields(PRESETS[name]).items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = value | out[key]
    return out
