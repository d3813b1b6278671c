"""Config lint: knobs that cannot have an effect in the config they are set in.

A study can ask for something its runs will never do: clip-higher with one optimizer step per
batch (the ratio is exactly 1), an IS correction between a sampler and a learner that share the
same weights, a KL estimator with ``kl_coef: 0``. Such a run trains fine and measures nothing about
the knob, so ``workbench plan`` and ``workbench run`` print one ``warning:`` line per (knob, reason),
naming the arms it affects (:func:`lint_specs`).

Each check is a small registered unit in :data:`LINT_RULES`: ``check(cfg) -> Iterable[Finding]``,
pure, one concern each. A check that needs the whole study (a setting judged against the study's other
arms) is registered in :data:`STUDY_LINT_RULES`: ``check(configs) -> Iterable[(index, Finding)]``. A knob left at a value no one chose (the schema default, or the ``grpo``
preset's clip range shared by every one-step GRPO run) is not flagged: only settings that look
like they matter and do not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.algorithms import POLICY_LOSSES
from workbench.algorithms.params import keyword_params
from workbench.algorithms.presets import PRESETS
from workbench.compare.activity import unit_registries
from workbench.config import AlgorithmConfig, LoraConfig, RunConfig
from workbench.registry import Registry
from workbench.study.expand import arm_of_label
from workbench.tasks.templates import PROMPT_TEMPLATES


@dataclass(frozen=True)
class Finding:
    """One inert knob: ``knob`` as ``path=value`` and why it cannot act (``claim``: what the line says of the
    arms it names; a study rule's finding may say something else than "has no effect in")."""

    knob: str
    reason: str
    claim: str = "has no effect in"


LintCheck = Callable[[RunConfig], Iterable[Finding]]
LINT_RULES: Registry[LintCheck] = Registry("lint rule")
# (the study's run configs) -> (index of a run the finding is about, the finding)
StudyLintCheck = Callable[[Sequence[RunConfig]], Iterable[tuple[int, Finding]]]
STUDY_LINT_RULES: Registry[StudyLintCheck] = Registry("study lint rule")

_ALGO_DEFAULTS = {name: f.default for name, f in AlgorithmConfig.model_fields.items()}
_BASELINE_CLIP = {k: PRESETS["grpo"][k] for k in ("clip_low", "clip_high")}  # the plain PPO/GRPO range


def _show(value: Any) -> str:  # as a study's YAML spells it
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if value is None:
        return "null"
    return str(value)


def _setting(cfg: RunConfig, key: str) -> Any:
    """The value of a dotted config key (``algorithm.correction``)."""
    return functools.reduce(getattr, key.split("."), cfg)


def knob(path: str, value: Any) -> str:
    return f"{path}={_show(value)}"


# ---------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------


@LINT_RULES.register("clip_with_one_step")
def clip_with_one_step(cfg: RunConfig) -> Iterable[Finding]:
    """Clipping acts on the policy ratio π/π_old. With ``epochs × minibatches == 1`` the only
    update's forward is also π_old's (``train/update.py``), so the ratio is exactly 1. A loss whose
    registered function takes no clip range (``reinforce``) never clips."""
    algo = cfg.algorithm
    if "clip_low" not in keyword_params(POLICY_LOSSES.get(algo.loss)):
        why = f"algorithm.loss {algo.loss} has no clip range"
    elif algo.epochs * algo.minibatches == 1:
        why = (
            "one optimizer step per batch (algorithm.epochs × minibatches = 1), so the policy ratio is exactly 1 "
            "and nothing is ever clipped; set algorithm.minibatches or epochs > 1"
        )
    else:
        return
    for name in ("clip_low", "clip_high"):
        value = getattr(algo, name)
        if value is not None and value != _BASELINE_CLIP[name]:  # unset (a preset without a clip range): no knob
            yield Finding(knob(f"algorithm.{name}", value), why)
    if algo.dual_clip is not None:
        yield Finding(knob("algorithm.dual_clip", algo.dual_clip), why)


@LINT_RULES.register("correction_without_mismatch")
def correction_without_mismatch(cfg: RunConfig) -> Iterable[Finding]:
    """The HF sampler samples with the learner's own module when dtypes agree (``rollout/hf.py``),
    and with top-p off its logprobs are the learner's: IS weights are 1 to the float floor. Not so with
    ``rollout.staleness`` >= 1: the sampler is versions behind, and the correction reweights that."""
    algo, sampler = cfg.algorithm, cfg.sampler
    if algo.correction is None or sampler.backend != "hf" or sampler.dtype != cfg.learner.dtype:
        return
    if cfg.rollout.staleness > 0:
        return
    if sampler.top_p < 1:  # the sampler's distribution is truncated, the learner's is not: they differ
        return
    yield Finding(
        knob("algorithm.correction", algo.correction),
        f"sampler and learner share engine and dtype (hf, {sampler.dtype}) and rollout.staleness is 0, "
        "so sampler and learner logprobs agree to the float floor and every IS weight is 1",
    )


@LINT_RULES.register("knob_of_an_unused_unit")
def knob_of_an_unused_unit(cfg: RunConfig) -> Iterable[Finding]:
    """Settings of a unit that is switched off: the KL term at ``kl_coef: 0``, the IS correction's
    cap without a correction, batch-filter settings without a batch filter, Dr. GRPO's normaliser
    under another aggregation."""
    algo = cfg.algorithm
    changed = {name for name, default in _ALGO_DEFAULTS.items() if getattr(algo, name) != default}
    if algo.kl_coef == 0:
        for name in sorted({"kl_estimator", "kl_in"} & changed):
            yield Finding(
                knob(f"algorithm.{name}", getattr(algo, name)),
                "algorithm.kl_coef is 0, so no KL term is computed (no reference model is built)",
            )
    for registry in unit_registries().values():  # a unit kind's settings (Registry.settings) with none selected
        if not registry.settings or _setting(cfg, registry.selected_by) is not None:
            continue
        for key in sorted(registry.settings):
            section, name = key.split(".", 1)
            if section == "algorithm" and name in changed:
                yield Finding(knob(key, _setting(cfg, key)), f"{registry.selected_by} is not set")
    if algo.norm_constant is not None and algo.agg_mode != "seq-mean-token-sum-norm":
        yield Finding(
            knob("algorithm.norm_constant", algo.norm_constant),
            f"only agg_mode seq-mean-token-sum-norm divides by it (this run: {algo.agg_mode})",
        )


@LINT_RULES.register("path_of_another_engine")
def path_of_another_engine(cfg: RunConfig) -> Iterable[Finding]:
    """``sampler.decode`` picks the HF sampler's decode loop and ``learner.forward`` the torch
    learner's forward (``rollout/hf.py``, ``train/logprobs.py``): a vLLM engine decodes its own way
    and the DeepSpeed learner always runs the full forward, so a value chosen there changes nothing."""
    sampler_default = type(cfg.sampler).model_fields["decode"].default
    if cfg.sampler.backend != "hf" and cfg.sampler.decode != sampler_default:
        yield Finding(
            knob("sampler.decode", cfg.sampler.decode),
            f"sampler.backend is {cfg.sampler.backend}; only the hf sampler has this decode choice",
        )
    learner_default = type(cfg.learner).model_fields["forward"].default
    if cfg.learner.backend != "torch" and cfg.learner.forward != learner_default:
        yield Finding(
            knob("learner.forward", cfg.learner.forward),
            f"learner.backend is {cfg.learner.backend}, which always runs the full forward; "
            "only the torch learner has this choice",
        )


# Explicit mantissa bits of the 16-bit weight formats: a weight w in [2^e, 2^(e+1)) moves only by an update
# larger than half its spacing, 2^(e - bits - 1) > |w| * 2^-(bits + 2).
MANTISSA_BITS = {"bfloat16": 7, "float16": 10}
TYPICAL_WEIGHT = 0.02  # HF configs' initializer_range default: the scale of most of a transformer's weights


@LINT_RULES.register("lr_below_weight_precision")
def lr_below_weight_precision(cfg: RunConfig) -> Iterable[Finding]:
    """The torch learner keeps the weights and AdamW states themselves in ``learner.dtype`` (DeepSpeed keeps
    fp32 master weights). An AdamW step moves a weight by about ``lr``; in 16 bits, that is below half the
    spacing of every weight with ``|w| >= lr * 2^(bits + 2)``, which rounds back to itself. Flagged when a
    weight of 0.02 cannot move: with lr 1e-6 in bfloat16 every weight above 5e-4 is frozen. Not with
    ``learner.lora``: the trained weights are then the adapters, which peft keeps in float32."""
    bits = MANTISSA_BITS.get(cfg.learner.dtype)
    if cfg.learner.backend != "torch" or bits is None or cfg.learner.lora is not None:  # LoRA: float32 adapters
        return
    frozen_above = cfg.learner.lr * 2 ** (bits + 2)
    if frozen_above < TYPICAL_WEIGHT:
        yield Finding(
            knob("learner.lr", cfg.learner.lr),
            f"learner.backend=torch keeps the weights and AdamW in {cfg.learner.dtype}, where a step of "
            f"about lr rounds away for every weight with |w| >= lr * 2^{bits + 2} = {frozen_above:.2g} "
            f"(most weights are ~{TYPICAL_WEIGHT}); use learner.backend=deepspeed (fp32 master weights) "
            "or learner.dtype=float32",
        )


@LINT_RULES.register("filter_without_refill")
def filter_without_refill(cfg: RunConfig) -> Iterable[Finding]:
    """Dynamic sampling drops groups and refills the batch from new rounds; one round refills nothing,
    and with one completion per prompt every group has a single value, so every group is dropped."""
    algo = cfg.algorithm
    if algo.batch_filter is None:
        return
    if cfg.rollout.group_size == 1:
        yield Finding(
            knob("algorithm.batch_filter", algo.batch_filter),
            "rollout.group_size is 1: a group of one never varies, so every group is dropped",
        )
    elif algo.max_sampling_rounds == 1:
        yield Finding(
            knob("algorithm.batch_filter", algo.batch_filter),
            "algorithm.max_sampling_rounds is 1, so dropped groups are never refilled: "
            "the batch only shrinks (set max_sampling_rounds > 1)",
        )


@LINT_RULES.register("overlap_with_a_batch_filter")
def overlap_with_a_batch_filter(cfg: RunConfig) -> Iterable[Finding]:
    """A batch filter picks whole groups by their rewards before the batch exists
    (``train/step.py::collect_batch``), so nothing is left to overlap the scoring with."""
    if cfg.reward.overlap and cfg.algorithm.batch_filter is not None:
        yield Finding(
            knob("reward.overlap", True),
            f"algorithm.batch_filter={cfg.algorithm.batch_filter} picks groups by their rewards, so "
            "scoring always runs before the update",
        )


@LINT_RULES.register("group_of_one")
def group_of_one(cfg: RunConfig) -> Iterable[Finding]:
    """Every registered estimator baselines a completion against the other completions of its
    prompt (``algorithms/advantage.py``); a group of one has none, so the advantages are the raw
    rewards (grpo, dr_grpo, rloo, lite_ppo) or only batch-whitened ones (reinforce_plus_plus_baseline)."""
    if cfg.rollout.group_size == 1:
        yield Finding(
            knob("algorithm.estimator", cfg.algorithm.estimator),
            "rollout.group_size is 1: the per-prompt group baseline has nothing to compare with, so "
            "advantages are raw (at most batch-whitened) rewards; use group_size > 1",
        )


@LINT_RULES.register("template_on_the_chat_path")
def template_on_the_chat_path(cfg: RunConfig) -> Iterable[Finding]:
    """A named prompt template written for the plain path (``workbench.tasks.templates``: qwen_math is a
    Qwen chat turn, r1 a base-model completion prompt) inside a chat template is wrapped a second time."""
    name = cfg.model.prompt_template
    if cfg.model.chat_template != "none" and name in PROMPT_TEMPLATES and PROMPT_TEMPLATES.get(name).chat_path:
        yield Finding(
            knob("model.prompt_template", name),
            f"model.chat_template is {cfg.model.chat_template!r}, and {PROMPT_TEMPLATES.get(name).chat_path}; "
            "set model.chat_template: none to give the template as the model's whole input",
        )


# shaper name -> (its params, the run config) -> why it can never be non-zero, or None
ShapingCheck = Callable[[dict[str, Any], RunConfig], "str | None"]


def _overlong_window_out_of_reach(params: dict[str, Any], cfg: RunConfig) -> str | None:
    start = params["max_length"] - params["cache_length"]  # the penalty is 0 up to this length
    budget = cfg.sampler.max_new_tokens
    if budget <= start:
        return (
            f"responses stop at sampler.max_new_tokens={budget} tokens, but the penalty starts only after "
            f"max_length - cache_length = {start}"
        )
    return None


def _no_group_spread(params: dict[str, Any], cfg: RunConfig) -> str | None:
    if cfg.rollout.group_size == 1:
        return "rollout.group_size is 1: within-group length differences, and so the term, are always 0"
    return None


SHAPING_CHECKS: dict[str, ShapingCheck] = {
    "overlong_soft": _overlong_window_out_of_reach,
    "kimi_length": _no_group_spread,
}


@LINT_RULES.register("shaping_that_cannot_trigger")
def shaping_that_cannot_trigger(cfg: RunConfig) -> Iterable[Finding]:
    """A reward-shaping term with weight 0, or whose parameters make it 0 on every possible response."""
    for i, term in enumerate(cfg.reward.shaping):
        label = f"reward.shaping[{i}] ({term.name})"
        if term.weight == 0:
            yield Finding(f"{label} weight=0", "a zero weight adds nothing to the reward")
            continue
        check = SHAPING_CHECKS.get(term.name)
        why = None if check is None else check(dict(term.params), cfg)
        if why is not None:
            shown = ", ".join(f"{k}={_show(v)}" for k, v in sorted(term.params.items()))
            yield Finding(f"{label} {shown}".rstrip(), why)


@STUDY_LINT_RULES.register("lora_at_the_full_finetune_lr")
def lora_at_the_full_finetune_lr(configs: Sequence[RunConfig]) -> Iterable[tuple[int, Finding]]:
    """LoRA's best learning rate is about ``LoraConfig.LR_OVER_FULL_FINETUNE`` (10) times full fine-tuning's,
    whatever the rank (Thinking Machines, "LoRA Without Regret", 2025; tinker-cookbook
    ``get_lora_lr_over_full_finetune_lr``). A LoRA run at the learning rate this same study gives full
    fine-tuning is then compared at a rate likely ~10x too low for it: flagged, once per such rate, unless the
    study also runs the same adapters at half that ratio or more (a rank study that tries both rates)."""
    full = {cfg.learner.lr for cfg in configs if cfg.learner.lora is None}
    ratio = LoraConfig.LR_OVER_FULL_FINETUNE
    lora_rates: dict[str, list[float]] = {}
    for cfg in configs:
        if cfg.learner.lora is not None:
            lora_rates.setdefault(cfg.learner.lora.model_dump_json(), []).append(cfg.learner.lr)
    for index, cfg in enumerate(configs):
        lora = cfg.learner.lora
        if lora is None or cfg.learner.lr not in full:
            continue
        if not any(lr >= cfg.learner.lr * ratio / 2 for lr in lora_rates[lora.model_dump_json()]):
            yield (
                index,
                Finding(
                    knob("learner.lr", cfg.learner.lr),
                    f'LoRA learns best at ~{ratio:g}x the full fine-tuning learning rate (Thinking Machines, "LoRA '
                    f'Without Regret"; tinker-cookbook get_lora_lr_over_full_finetune_lr = {ratio:g}), so the LoRA '
                    f"arm is compared at a rate likely too low for it; add one at ~{ratio * cfg.learner.lr:g}",
                    claim="is the full fine-tuning learning rate of this study, used with learner.lora in",
                ),
            )


# ---------------------------------------------------------------------------------------------
# running the rules
# ---------------------------------------------------------------------------------------------


def lint_config(cfg: RunConfig) -> list[Finding]:
    """Every finding of every registered rule on one run config, rules in name order."""
    return [finding for name in LINT_RULES for finding in LINT_RULES.get(name)(cfg)]


def arm_name(spec) -> str:
    """A run's arm: its label without the seed and cold start (``dapo/lr=3e-05``); they share findings."""
    return arm_of_label(spec.label)


def lint_specs(specs: Sequence) -> list[str]:
    """One ``warning:`` line per (knob, reason) over a study's runs, naming the affected arms.

    An arm list that covers every arm of a variant is shortened to the variant's name.
    """
    arms_of_variant: dict[str, list[str]] = {}
    found: dict[Finding, list[Any]] = {}

    def hit(spec, finding: Finding) -> None:
        hits = found.setdefault(finding, [])
        if (spec.variant, arm_name(spec)) not in hits:
            hits.append((spec.variant, arm_name(spec)))

    for spec in specs:
        arm = arm_name(spec)
        arms = arms_of_variant.setdefault(spec.variant, [])
        if arm not in arms:
            arms.append(arm)
        for finding in lint_config(spec.config):
            hit(spec, finding)
    configs = [spec.config for spec in specs]
    for name in STUDY_LINT_RULES:
        for index, finding in STUDY_LINT_RULES.get(name)(configs):
            hit(specs[index], finding)
    lines = []
    for finding, hits in found.items():
        names: list[str] = []
        for variant, arm in hits:
            whole = {a for v, a in hits if v == variant} >= set(arms_of_variant[variant])
            name = variant if whole else arm
            if name not in names:
                names.append(name)
        lines.append(f"warning: {finding.knob} {finding.claim} {', '.join(names)}: {finding.reason}")
    return lines
