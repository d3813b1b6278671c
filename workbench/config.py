"""Typed run configuration: one documented field per knob, invariants checked at construction.

A study expands into ``RunConfig`` objects; ``RunConfig`` is also what gets flattened into
MLflow params and hashed into ``run_key``. Unknown keys are rejected everywhere.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workbench.health import HealthConfig
from workbench.metrics.passk import MAX_EVAL_SAMPLES
from workbench.reward import validate_shaping
from workbench.tasks.curation import CURATORS
from workbench.tasks.eval_size import check_task_eval_size, fitting_eval_size
from workbench.tasks.templates import PROMPT_TEMPLATES, template_text

Dtype = Literal["float32", "bfloat16", "float16"]
MAX_STALENESS = 64  # policy versions a batch may lag; each is a weight snapshot held in memory
RUN_KEY_VERSION = 1  # bump when a default value changes meaning (see RunConfig.run_key)

MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy take seeds in [0, 2^64); MLflow tags and JSON keep int64
MAX_STEPS = 10_000_000  # far beyond any run here; a larger count (e.g. `steps: 1e29`) is a typo, not a plan
MAX_BATCH = 1_000_000  # prompts, completions or tokens per step: larger cannot fit any machine's memory


class Strict(BaseModel):
    # allow_inf_nan=False: `lr: .inf`, `1e400` (YAML reads inf) or `.nan` are rejected at load time
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class TinyModelConfig(Strict):
    """The CPU default: a small Llama built from a seed and warmed up by SFT on the task."""

    arch: Literal["llama", "qwen2"] = "llama"
    hidden_size: int = Field(128, ge=16, description="model width")
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(512, ge=16)
    sft_max_steps: int = Field(1500, ge=0, description="cap on cold-start SFT steps on worked examples")
    sft_target_accuracy: float = Field(
        0.3,
        gt=0,
        le=1,
        description="stop SFT once greedy accuracy on a train-split probe reaches this: RL starts imperfect",
    )
    sft_check_every: int = Field(25, ge=1, description="SFT steps between accuracy probes")
    sft_batch_size: int = Field(256, ge=1)
    sft_lr: float = Field(3e-3, gt=0)
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="init and SFT data seed (the model is deterministic given the config)"
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads}")
        return self


class ModelConfig(Strict):
    """Either ``builtin: tiny`` (built locally, cached) or ``path`` to a local HF causal-LM directory."""

    builtin: Literal["tiny"] | None = None
    path: str | None = None
    tiny: TinyModelConfig = TinyModelConfig()
    prompt_template: str = Field(
        "{prompt}",
        description="how a problem's prompt is shown to the model (with a chat template: the user turn): "
        "a text with '{prompt}', or a named template, none | qwen_math | r1 (Dr. GRPO's three, exact strings in "
        "docs/config.md; workbench.tasks.templates)",
    )
    chat_template: str = Field(
        "none",
        description="auto = the model directory's tokenizer chat template wraps the prompt (an error if it has "
        "none); none = the prompt_template text as is; or a Jinja template, inline or a file path (relative to "
        "the working directory). Generation stops at the template's end-of-turn token as well as EOS",
    )
    system_prompt: str | None = Field(
        None, exclude_if=lambda v: v is None, description="with a chat template: a system turn before the prompt"
    )
    # Set by a study's replicate.cold_start, never by hand; left out of params at 0 so runs of studies that do
    # not replicate log what they logged before (and keep their run keys: exclude_defaults).
    cold_start: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        exclude_if=lambda v: v == 0,
        description="which independent cold start (or priming SFT) the run starts from: 0 = the one model.tiny.seed "
        "(or data.prime) gives; k > 0 = another, its init and SFT order seeded from (seed, k). Set by a study's "
        "replicate.cold_start",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.builtin is None) == (self.path is None):
            raise ValueError("model needs exactly one of 'builtin: tiny' or 'path: DIR'")
        if self.prompt_template not in PROMPT_TEMPLATES and "{prompt}" not in self.prompt_template:
            raise ValueError(
                "model.prompt_template must contain '{prompt}' or name a template: "
                + ", ".join(PROMPT_TEMPLATES.names())
            )
        check_prompt_template(self.template_text)
        if self.builtin is not None and self.chat_template != "none":
            raise ValueError(
                "model.chat_template applies to model.path: the built-in tiny model's character "
                "tokenizer has no chat template (use chat_template: none)"
            )
        if self.system_prompt is not None and self.chat_template == "none":
            raise ValueError(
                "model.system_prompt needs a chat template (model.chat_template: auto or a template); "
                "without one, put the instruction in model.prompt_template"
            )
        if not self.chat_template.strip():
            raise ValueError("model.chat_template is empty: use auto, none, a Jinja template or a file path")
        return self

    @property
    def template_text(self) -> str:
        """``prompt_template``'s ``str.format`` text (a named template's text, else the setting as is)."""
        return template_text(self.prompt_template)


def check_prompt_template(template: str) -> None:
    """``template.format(prompt=...)`` must work: ``{prompt}`` is the only placeholder; ``{{``/``}}`` are braces."""
    try:
        fields = [name for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as error:  # a lone '{' or '}'
        raise ValueError(
            f"model.prompt_template is not a valid template ({error}); write literal braces as '{{{{' and '}}}}'"
        ) from None
    unknown = sorted({name for name in fields if name != "prompt"})
    if unknown:
        raise ValueError(
            f"model.prompt_template has unknown placeholder(s) {', '.join(map(repr, unknown))}: "
            "'{prompt}' is the only one; write literal braces as '{{' and '}}'"
        )


class TaskConfig(Strict):
    """Where problems come from. ``arithmetic`` is generated; ``jsonl`` reads user data."""

    name: Literal["arithmetic", "scratchpad", "jsonl"] = "arithmetic"
    seed: int = Field(0, ge=0, le=MAX_SEED, description="fixes the problem set and the train/eval split")
    # le=100: a prompt then has a few hundred characters; Python refuses int<->str beyond 4300 digits anyway
    digits: int = Field(2, ge=1, le=100, description="arithmetic: operands have up to this many digits")
    ops: str = Field("+-", description="arithmetic: operators drawn from '+-*/'; scratchpad: from '+-'")
    # None when unset and then left out of dumps: the tiny model's cache key hashes the task's dump,
    # so a new field that always appeared would rebuild every cached arithmetic model.
    operands: int | None = Field(
        None,
        ge=2,
        le=12,
        exclude_if=lambda v: v is None,
        description="scratchpad: each problem has 2 to this many operands (default 4)",
    )
    path: str | None = Field(None, description="jsonl: training file")
    eval_path: str | None = Field(None, description="jsonl: eval file (default: split off `path`)")
    eval_size: int = Field(
        200,
        ge=1,
        le=MAX_BATCH,
        description="number of held-out problems (unset: 200, or a quarter of a generated task's "
        "distinct prompts when that is fewer)",
    )
    answer_format: Literal["auto", "gsm8k", "boxed"] = Field(
        "auto",
        description="where a completion's final answer is read (math-verify compares it with the gold answer): "
        "auto = math-verify's own extraction (a \\boxed{} answer first, else the last number or expression); "
        "gsm8k = the word right after the last '####', e.g. '#### 1,000' (none: incorrect); boxed = the last \\boxed{} (none: incorrect). "
        "gsm8k also reads a gold answer written as a GSM8K solution ('... #### 72') as its final part",
    )

    @model_validator(mode="after")
    def _jsonl_has_path(self) -> TaskConfig:
        if self.name == "jsonl" and not self.path:
            raise ValueError("task 'jsonl' needs 'path'")
        if self.operands is not None and self.name != "scratchpad":
            raise ValueError(f"task.operands applies to task 'scratchpad' only, not {self.name!r}")
        if self.name == "scratchpad" and set(self.ops) - set("+-"):
            raise ValueError(f"task 'scratchpad' takes ops from '+-', got {self.ops!r}")
        if "eval_size" not in self.model_fields_set:  # unset: a size the task can hold (#53)
            fitting = fitting_eval_size(
                self.name, digits=self.digits, ops=self.ops, operands=self.operands, default=self.eval_size
            )
            if fitting != self.eval_size:
                self.eval_size = fitting  # validate_assignment: this validator runs again, with it set
                return self
        # before `workbench plan` promises runs that could not start
        check_task_eval_size(
            self.name, digits=self.digits, ops=self.ops, operands=self.operands, eval_size=self.eval_size
        )
        return self


class SamplerConfig(Strict):
    """Generation engine. Its dtype is independent of the learner's (precision mismatch studies)."""

    backend: Literal["hf", "vllm"] = Field(
        "hf", description="hf = transformers generate; vllm = a vLLM engine (extra `gpu`, or `make engines` on a CPU)"
    )
    dtype: Dtype = "float32"
    decode: Literal["lean", "generate"] = Field(
        "lean",
        description="hf: lean = the workbench's own KV-cached decode loop (same draws and logprobs as generate, "
        "less per-token overhead); generate = transformers' generate (the reference path)",
    )
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(32, ge=1, le=MAX_BATCH)
    sync: Literal["auto", "inplace", "rebuild"] = Field(
        "auto",
        description="vllm: how learner weights reach the engine after each update, verified by logprobs every time: "
        "inplace = load into the running engine; rebuild = save a checkpoint and restart the engine; "
        "auto = inplace, rebuilding if verification fails",
    )
    gpu_memory_utilization: float = Field(
        0.5, gt=0, le=1, description="vllm on a GPU: share of GPU memory for the engine (the learner needs the rest)"
    )
    enforce_eager: bool | None = Field(
        None,
        description="vllm: no torch.compile / CUDA graphs. Default: eager on a CPU (compiling adds ~18 s per "
        "engine start and was no faster here), compiled on a GPU",
    )
    compile: bool = Field(
        False,
        description="hf lean decode: torch.compile the model's forward (inductor; same draws to float "
        "tolerance). Measured on 2 CPU cores at bench_vs_trl.py's settings: decoding 0.24 -> 0.19 s per step "
        "after ~40 s of compiling at the run's start, so for long runs (docs/engines.md)",
    )

    @model_validator(mode="after")
    def _compile_needs_the_lean_hf_decode(self) -> SamplerConfig:
        if self.compile and (self.backend != "hf" or self.decode != "lean"):
            raise ValueError(
                "sampler.compile applies to sampler.backend=hf with sampler.decode=lean "
                f"(got backend={self.backend}, decode={self.decode}); vllm compiles by itself "
                "(sampler.enforce_eager)"
            )
        return self


class LoraConfig(Strict):
    """LoRA adapters on the policy (through ``peft``): only the adapters train, the base weights stay frozen in
    ``learner.dtype``; the KL reference is the same base with its adapters switched off (no second copy).
    Hu et al. 2021, "LoRA"; the defaults follow Thinking Machines' "LoRA Without Regret" (2025): every linear
    layer, since attention-only LoRA underperforms, and a learning rate ~10x full fine-tuning's (config lint)."""

    # LoRA's optimal learning rate over full fine-tuning's, about constant across ranks: Thinking Machines,
    # "LoRA Without Regret" (2025), and tinker-cookbook's get_lora_lr_over_full_finetune_lr (= 10). The config
    # lint warns when a study runs LoRA at its own full fine-tuning learning rate (analysis/lint.py).
    LR_OVER_FULL_FINETUNE: ClassVar[float] = 10.0

    rank: int = Field(
        8, ge=1, description="r: the adapters' inner dimension (ΔW = (alpha/r)·B·A, B: d_out×r, A: r×d_in)"
    )
    alpha: float = Field(16.0, gt=0, description="scale numerator: ΔW = (alpha / rank)·B·A")
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout on the adapters' input while training (0: the "
        "learner's logprobs stay deterministic, so the mismatch metrics measure the sampler only)",
    )
    target_modules: Literal["all-linear"] | list[str] = Field(
        "all-linear",
        description="all-linear = every linear layer but the output head (peft's 'all-linear'); "
        "or a list of module names, e.g. [q_proj, v_proj]",
    )

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and (not value or not all(isinstance(v, str) and v.strip() for v in value)):
            raise ValueError("learner.lora.target_modules must be all-linear or a non-empty list of module names")
        return value


class LearnerConfig(Strict):
    """Who trains the policy: plain torch or DeepSpeed (ZeRO 0-3); one process either way (docs/engines.md)."""

    backend: Literal["torch", "deepspeed"] = Field(
        "torch", description="torch | deepspeed (needs the `gpu` or `cpu-engines` extra; see docs/engines.md)"
    )
    device: str = Field("auto", description="auto = cuda if available, else cpu; or an explicit torch device")

    @field_validator("device")
    @classmethod
    def _a_torch_device(cls, value: str) -> str:
        if value == "auto":
            return value
        import torch

        try:
            torch.device(value)
        except (RuntimeError, ValueError):
            raise ValueError(
                f"learner.device {value!r} is not a torch device: use auto, cpu, cuda, cuda:0, ..."
            ) from None
        return value

    dtype: Dtype = Field(
        "float32", description="weights dtype; deepspeed: bfloat16/float16 train with fp32 master weights"
    )
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = Field((0.9, 0.99), description="Adam betas, each in [0, 1)")
    grad_clip: float = Field(1.0, gt=0, description="max global grad norm")
    forward: Literal["lean", "full"] = Field(
        "lean",
        description="torch: lean = each distinct prompt of a micro-batch run once and shared by its completions, "
        "all-padding columns dropped (same logprobs to float tolerance); full = one forward over every "
        "prompt+completion row (the reference path)",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="sequences per forward/backward: a larger minibatch is split and its gradients accumulated "
        "(exactly the minibatch gradient, for every agg_mode) before one optimizer step; None = no split",
    )
    zero_stage: int = Field(
        0,
        ge=0,
        le=3,
        description="deepspeed: ZeRO stage (1 partitions optimizer states, 2 also gradients, 3 also weights)",
    )
    deepspeed_config: dict[str, Any] = Field(
        default_factory=dict,
        description="deepspeed: extra DeepSpeed config keys merged over the generated ones "
        "(e.g. zero_optimization.offload_optimizer); the optimizer and batch keys stay workbench's",
    )
    lora: LoraConfig | None = Field(
        None,
        exclude_if=lambda v: v is None,  # unset: left out of dumps, so existing params and run keys stay
        description="LoRA adapters instead of full fine-tuning (rank, alpha, dropout, target_modules); unset = "
        "every weight trains. The torch learner, and DeepSpeed ZeRO 0-2 (docs/engines.md)",
    )
    checkpoint_every: int | None = Field(
        None,
        ge=1,
        description="save a resumable checkpoint every k RL steps; a FAILED/KILLED run executed again resumes "
        "from it (see docs/engines.md); None = off",
    )
    inject_nonfinite_at_step: int | None = Field(
        None, ge=0, description="fault injection: make this RL step's loss NaN (tests the health rules' stop path)"
    )

    @field_validator("betas")
    @classmethod
    def _betas_in_unit_interval(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):  # torch.optim.AdamW raises on these mid-run
            raise ValueError(f"learner.betas must each be in [0, 1), got {list(value)}")
        return value

    @model_validator(mode="after")
    def _deepspeed_only_knobs(self) -> LearnerConfig:
        if self.backend != "deepspeed" and (self.zero_stage or self.deepspeed_config):
            raise ValueError("learner.zero_stage and learner.deepspeed_config apply to learner.backend=deepspeed only")
        if self.lora is not None and self.backend == "deepspeed" and self.zero_stage == 3:
            raise ValueError(
                "learner.lora with DeepSpeed ZeRO-3 is not supported: the adapters' merged weights and "
                "the base without adapters need whole weights; use zero_stage 0-2 (LoRA's optimizer "
                "state is small anyway)"
            )
        return self


class RolloutConfig(Strict):
    prompts_per_step: int = Field(16, ge=1, le=MAX_BATCH)
    group_size: int = Field(8, ge=1, le=MAX_BATCH, description="completions per prompt (G)")
    steps: int = Field(100, ge=1, le=MAX_STEPS, description="RL steps (one batch of rollouts and one update each)")
    eval_every: int = Field(10, ge=1, description="held-out eval every k steps (and at step 0 and the end)")

    @model_validator(mode="after")
    def _batch_fits(self) -> RolloutConfig:
        if self.prompts_per_step * self.group_size > MAX_BATCH:
            raise ValueError(
                f"rollout.prompts_per_step x group_size = {self.prompts_per_step * self.group_size} "
                f"completions per step; at most {MAX_BATCH} fit in memory"
            )
        if self.eval_samples > 1 and self.eval_temperature == 0:
            raise ValueError(
                f"rollout.eval_samples = {self.eval_samples} with eval_temperature = 0 samples the same "
                "greedy answer every time: set rollout.eval_temperature > 0 (e.g. 1.0) for pass@k"
            )
        return self

    eval_temperature: float = Field(0.0, ge=0, description="0 = greedy")
    eval_samples: int = Field(
        1,
        ge=1,
        le=MAX_EVAL_SAMPLES,
        description="answers sampled per eval problem at eval_temperature (> 0 when above 1): 1 = one answer "
        "each (eval/accuracy); n > 1 also logs the unbiased eval/pass_at_k for k = 1, 2, 4, … ≤ n and eval/mean_at_n "
        "(workbench.metrics.passk), and the per-problem table gains each problem's correct count",
    )
    eval_size: int | None = Field(None, ge=1, description="cap on eval problems (default: the task's eval set)")
    reflection_words: list[str] | None = Field(
        None,
        description=(
            "keywords whose presence marks a response as self-reflecting (behaviour/reflection_rate, "
            "eval/reflection_rate; lower-cased substring match). Unset: oat-zero's 11 (workbench.metrics.reflection); "
            "[] = off. Logged with model.path only: the built-in tiny model's arithmetic completions hold no words"
        ),
    )
    log_samples: int = Field(32, ge=0, description="sample completions kept in the artifact table per eval")
    staleness: int = Field(
        0,
        ge=0,
        le=MAX_STALENESS,
        description=(
            "k: the batch trained at step t is sampled by the policy of step t - k (the first k steps by the initial "
            "policy), a sampler thread generating the next batches while the learner updates (workbench.train."
            "pipeline; docs/async.md). The schedule is fixed by k, not by timing. 0 = the synchronous loop"
        ),
    )


class AlgorithmConfig(Strict):
    """Which registered units the loop composes. A preset fills the fields left unset (and the keys of
    ``loss_params``/``estimator_params`` left unset)."""

    preset: str = "grpo"
    estimator: str | None = None
    loss: str | None = None
    agg_mode: str | None = None
    norm_constant: float | None = Field(
        None,
        gt=0,
        description="seq-mean-token-sum-norm divisor; unset = the generation budget sampler.max_new_tokens",
    )
    # The clip bounds are loss parameters (``loss_kwargs``) with fields of their own, their canonical spelling
    # (``params.LOSS_PARAM_FIELDS``): ``loss_params: {clip_high: 0.28}`` is read as ``clip_high: 0.28``.
    clip_low: float | None = Field(
        None, ge=0, description="clipped losses: ratio >= 1 - clip_low (gmpo: log-ratio >= -clip_low)"
    )
    clip_high: float | None = Field(
        None, ge=0, description="clipped losses: ratio <= 1 + clip_high (gmpo: log-ratio <= clip_high)"
    )
    dual_clip: float | None = Field(
        None, gt=1, description="ppo_clip: cap a negative-advantage token's loss at -A·dual_clip; unset = off"
    )
    loss_params: dict[str, Any] = Field(
        default_factory=dict,
        description="the policy loss's own keyword parameters (e.g. sapo: temperature_pos); unset keys keep the "
        "loss's defaults. clip_low/clip_high/dual_clip given here are stored as the fields of those names",
    )
    estimator_params: dict[str, Any] = Field(
        default_factory=dict,
        description="the advantage estimator's own keyword parameters (e.g. grpo: epsilon); "
        "unset keys keep the estimator's defaults",
    )
    epochs: int = Field(1, ge=1, description="passes over each batch")
    minibatches: int = Field(1, ge=1, description="optimizer steps per pass")
    correction: str | None = Field(
        None,
        description="sampler/learner IS correction: tis | mis | seq_tis | "
        "decoupled | sequence_mask (behaviour = the sampler, stale with rollout.staleness)",
    )
    correction_cap: float = Field(2.0, gt=0)
    batch_filter: str | None = Field(
        None, description="group filter with refill, e.g. zero_std (DAPO dynamic sampling)"
    )
    filter_on: Literal["correct", "reward"] | None = Field(
        None,
        description="what batch_filter judges: correct (accuracy, DAPO §3.2; the default once a batch_filter "
        "is set) | reward (the total shaped reward)",
    )
    max_sampling_rounds: int = Field(3, ge=1, description="sampling rounds per step when a batch filter drops groups")
    token_filters: list[str] = Field(default_factory=list, description="loss-mask edits, e.g. [overlong]")
    kl_coef: float = Field(0.0, ge=0, description="KL to the frozen initial policy; 0 = no reference model")
    kl_estimator: str = Field("k3", description="k1 | k2 | k3 | low_var_kl")
    kl_in: Literal["loss", "reward"] = Field("loss", description="add KL to the loss, or subtract it from the reward")

    @model_validator(mode="before")
    @classmethod
    def _resolve_preset(cls, data: Any) -> Any:
        from workbench.algorithms.filters import DEFAULT_FILTER_ON  # deferred: torch
        from workbench.algorithms.presets import resolve_preset  # deferred: torch

        if not isinstance(data, dict):
            return data
        data = resolve_preset(data)
        if data.get("batch_filter") is not None and data.get("filter_on") is None:
            # set, not defaulted: it enters run_key, so runs filtered on the reward before keep their keys apart
            data["filter_on"] = DEFAULT_FILTER_ON
        return data

    @model_validator(mode="after")
    def _names_exist(self) -> AlgorithmConfig:
        from workbench import algorithms as alg  # deferred: torch
        from workbench.algorithms.advantage import DERIVED_PARAMS  # deferred: torch
        from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS  # deferred: torch
        from workbench.algorithms.params import (  # deferred: torch
            LOSS_PARAM_FIELDS,
            check_unit_params,
            keyword_params,
            missing_params,
            unknown_param_message,
        )

        estimator = alg.ADVANTAGE_ESTIMATORS.get(self.estimator)
        loss = alg.POLICY_LOSSES.get(self.loss)
        # Checked (and converted) in place: assigning a field here would re-run this validator.
        for field, kind, name, fn, exclude in (
            ("estimator_params", "advantage estimator", self.estimator, estimator, DERIVED_PARAMS),
            ("loss_params", "policy loss", self.loss, loss, ()),
        ):
            params = getattr(self, field)
            try:
                params.update(check_unit_params(kind, name, fn, params, exclude=exclude, check_types=True))
            except ValueError as error:
                raise ValueError(f"{field}: {error}") from None
        # A preset's clip range is offered to whichever loss runs, which takes it only if it declares it
        # ({preset: grpo, loss: reinforce}); dual_clip is set by no preset, so a loss without it is a mistake.
        declared = keyword_params(loss)
        if self.dual_clip is not None and "dual_clip" not in declared:
            raise ValueError(f"dual_clip: {unknown_param_message('policy loss', self.loss, 'dual_clip', declared)}")
        missing = missing_params(loss, self.loss_kwargs())
        if missing:
            where = missing[0] if missing[0] in LOSS_PARAM_FIELDS else f"loss_params.{missing[0]}"
            raise ValueError(f"{where}: policy loss {self.loss!r} needs it and preset {self.preset!r} sets none")
        alg.AGG_MODES.get(self.agg_mode)
        if self.correction is not None:
            alg.IS_CORRECTIONS.get(self.correction)
        if self.batch_filter is not None:
            BATCH_FILTERS.get(self.batch_filter)
        for name in self.token_filters:
            TOKEN_FILTERS.get(name)
        alg.KL_ESTIMATORS.get(self.kl_estimator)
        return self

    def loss_kwargs(self) -> dict[str, Any]:
        """The policy loss's parameters, as ``compute_policy_loss(..., **loss_kwargs())`` takes them: those of
        the fields ``LOSS_PARAM_FIELDS`` that are set and that the loss declares, and ``loss_params``."""
        from workbench.algorithms import POLICY_LOSSES  # deferred: torch
        from workbench.algorithms.params import LOSS_PARAM_FIELDS, keyword_params  # deferred: torch

        declared = keyword_params(POLICY_LOSSES.get(self.loss))
        fields = {key: getattr(self, key) for key in LOSS_PARAM_FIELDS if key in declared}
        return {key: value for key, value in fields.items() if value is not None} | self.loss_params


class ShapingTerm(Strict):
    """One weighted reward-shaping term, by registered name (see ``workbench.reward.REWARD_SHAPERS``)."""

    name: str
    weight: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)


class RewardConfig(Strict):
    """reward = 1·correct (math-verify) + Σ weight·shaper. Verification runs in bounded worker processes."""

    timeout_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="wall-clock limit per completion; slower scores 0, counted in reward/verify_timeout_frac and "
        "eval/verify_timeout_frac",
    )
    workers: int = Field(1, ge=1, description="verifier worker processes")
    overlap: bool | None = Field(
        None,
        description=(
            "score on a background thread while the learner's forward runs, which needs no reward (the same "
            "numbers). Unset: when the learner is on a GPU, which leaves the CPU cores to the verifier; a CPU "
            "learner shares them with it, and on 2 cores overlapping measured no faster (docs/engines.md). "
            "true: always; false: never. Never with a batch filter, which picks groups by their rewards"
        ),
    )
    shaping: list[ShapingTerm] = Field(default_factory=list)
    control: str | None = Field(
        None,
        description=(
            "a spurious-reward control in place of the correctness term (workbench.reward.controls): random | "
            "format_only | incorrect_label | constant. The verifier still judges every completion: accuracy/train "
            "and eval/* stay true correctness. Unset: the verifier's reward"
        ),
    )
    control_params: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the control's own keyword parameters (random: p, the success probability, drawn from the run's "
            "seed and step; format_only: boxed; incorrect_label: offset; constant: value)"
        ),
    )

    @model_validator(mode="after")
    def _shapers_exist(self) -> RewardConfig:
        validate_shaping([(t.name, t.weight, t.params) for t in self.shaping])
        if self.control is not None:
            from workbench.reward.controls import validate_control  # deferred: torch

            validate_control(self.control, self.control_params)
        elif self.control_params:
            raise ValueError(
                "reward.control_params needs reward.control (random | format_only | incorrect_label | constant)"
            )
        return self

    def control_spec(self) -> tuple[str, dict[str, Any]] | None:
        return None if self.control is None else (self.control, dict(self.control_params))

    def specs(self) -> list[tuple[str, float, dict[str, Any]]]:
        return [(t.name, t.weight, dict(t.params)) for t in self.shaping]


class TrackingConfig(Strict):
    uri: str | None = Field(None, description="MLflow tracking URI (env MLFLOW_TRACKING_URI wins)")
    experiment: str | None = Field(None, description="default: the study name")
    outage_deadline_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "how long a run keeps retrying an unreachable MLflow before it stops FAILED, its unsent "
            "metrics kept in a local spill that is re-sent when the run is executed again"
        ),
    )
    rollouts_budget_mb: float = Field(
        64.0,
        ge=0,
        allow_inf_nan=False,
        description=(
            "size budget of the run's rollouts/ artifacts (every sampled completion, parquet); over it, train steps "
            "are kept every k-th, k doubling (docs/rollouts.md); 0 keeps none"
        ),
    )


class CurateConfig(Strict):
    """Prompt curation before RL: measure each pool prompt's pass rate on the initial policy (the run's own
    sampler and verifier), keep those a registered curator accepts (``workbench.tasks.curation.CURATORS``).
    Cached by (model, task, template, sampler, these settings): the run's seed does not enter, so every seed
    of an arm trains on the same curated prompts."""

    name: str = Field("pass_rate", description="registered curator; pass_rate keeps prompts whose rate is in keep")
    samples: int = Field(10, ge=1, le=1000, description="completions per prompt that measure its pass rate")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the measuring completions")
    keep: tuple[float, float] = Field((0.0, 0.9), description="closed pass-rate range [lo, hi] of the kept prompts")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of the measuring completions")

    @model_validator(mode="after")
    def _known_and_ordered(self) -> CurateConfig:
        CURATORS.get(self.name)
        lo, hi = self.keep
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"data.curate.keep must be [lo, hi] with 0 <= lo <= hi <= 1, got {list(self.keep)}")
        return self


class CurriculumConfig(Strict):
    """``data.order: curriculum``: the pool sorted easy to hard, split into ``stages`` chunks; the RL steps
    are split into as many equal spans and span k draws from chunk k."""

    by: Literal["pass_rate", "difficulty"] = Field(
        "pass_rate",
        description="pass_rate: the measured rate (needs data.curate), high first; difficulty: the "
        "task's own knob (scratchpad: operand count; arithmetic: operand digits), low first",
    )
    stages: int = Field(4, ge=1, le=1000, description="curriculum stages")


class PrimeConfig(Strict):
    """The cold start's supervised data. ``mix``: the built-in model's SFT solutions in forms drawn with these
    shares (worked: the task's steps; terse: the boxed answer; wrong: the task's steps ending in a wrong
    result). ``path``: for ``model.path``, an SFT stage before RL on this JSONL's ``solution`` fields."""

    mix: dict[Literal["worked", "terse", "wrong"], float] | None = Field(
        None, description="built-in model: shares of each solution form, e.g. {worked: 0.5, wrong: 0.5}"
    )
    path: str | None = Field(None, description="model.path: JSONL of prompt/answer/solution lines for an SFT stage")
    max_steps: int = Field(100, ge=1, le=MAX_STEPS, description="model.path SFT: cap on steps")
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="model.path SFT: sequences per step")
    lr: float = Field(1e-5, gt=0, description="model.path SFT: learning rate")
    target_accuracy: float = Field(1.0, gt=0, le=1, description="model.path SFT: stop once the probe reaches it")
    check_every: int = Field(25, ge=1, description="model.path SFT: steps between probes")

    @model_validator(mode="after")
    def _one_source(self) -> PrimeConfig:
        if (self.mix is None) == (self.path is None):
            raise ValueError("data.prime needs exactly one of 'mix' (built-in model) or 'path' (model.path)")
        if self.mix is not None:
            if any(share < 0 for share in self.mix.values()) or not sum(self.mix.values()) > 0:
                raise ValueError(f"data.prime.mix shares must be >= 0 with a positive sum, got {self.mix}")
            total = sum(self.mix.values())
            if abs(total - 1.0) > 1e-9:
                raise ValueError(f"data.prime.mix shares must sum to 1, got {total:g}")
        return self


class DataConfig(Strict):
    """Data as a variant: prompt curation, prompt order, and the cold start's priming data (docs/data.md)."""

    pool: int = Field(
        512,
        ge=1,
        le=MAX_BATCH,
        description="distinct training prompts drawn once from task.seed "
        "when curating or ordering (ignored by order: sampled without curate)",
    )
    curate: CurateConfig | None = None
    order: Literal["sampled", "shuffled", "curriculum"] = Field(
        "sampled",
        description="sampled: i.i.d. draws (from the curated pool when curating); shuffled: passes over "
        "the pool, each in a fresh order; curriculum: easy to hard in stages (data.curriculum)",
    )
    curriculum: CurriculumConfig | None = None
    prime: PrimeConfig | None = None

    @model_validator(mode="after")
    def _curriculum_settings(self) -> DataConfig:
        if self.curriculum is not None and self.order != "curriculum":
            raise ValueError(f"data.curriculum applies to data.order=curriculum, not {self.order}")
        schedule = self.schedule
        if schedule is not None and schedule.by == "pass_rate" and self.curate is None:
            raise ValueError(
                "data.curriculum.by=pass_rate needs data.curate (the rates it orders by); "
                "curate.keep: [0, 1] keeps every prompt"
            )
        return self

    @property
    def schedule(self) -> CurriculumConfig | None:
        """The curriculum in effect: its settings, or the defaults when ``order: curriculum`` gives none."""
        if self.order != "curriculum":
            return None
        return self.curriculum or CurriculumConfig()

    @property
    def uses_pool(self) -> bool:
        return self.curate is not None or self.order != "sampled"


# Settings that change where or how safely a run executes, never its numbers: section -> fields.
NOT_IN_RUN_KEY: dict[str, set[str]] = {"learner": {"checkpoint_every"}, "reward": {"overlap"}}


class RunConfig(Strict):
    """Everything that determines one run. Hashing it (with the seed) gives ``run_key``."""

    seed: int = Field(0, ge=0, le=MAX_SEED)
    # Default left out of dumps (like learner.lora): the params and run keys of every workbench-engine run stay
    # what they were before the setting existed.
    engine: Literal["workbench", "trl"] = Field(
        "workbench",
        exclude_if=lambda v: v == "workbench",
        description="who trains: workbench = the workbench's own RL loop; trl = TRL's GRPOTrainer on the same model, "
        "task, verifier and eval problems (the `trl` extra; settings TRL cannot express are refused at load: "
        "docs/trl-engine.md)",
    )
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(builtin="tiny"))
    task: TaskConfig = TaskConfig()
    sampler: SamplerConfig = SamplerConfig()
    learner: LearnerConfig = LearnerConfig()
    rollout: RolloutConfig = RolloutConfig()
    reward: RewardConfig = Field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    tracking: TrackingConfig = TrackingConfig()

    @model_validator(mode="after")
    def _data_fits_model_and_task(self) -> RunConfig:
        prime = self.data.prime
        if prime is not None and prime.mix is not None and self.model.builtin is None:
            raise ValueError(
                "data.prime.mix shapes the built-in model's cold start; with model.path use "
                "data.prime.path (a JSONL of worked solutions)"
            )
        if prime is not None and prime.path is not None and self.model.path is None:
            raise ValueError("data.prime.path is an SFT stage for model.path; the built-in model takes data.prime.mix")
        if self.model.cold_start and self.model.path is not None and (prime is None or prime.path is None):
            raise ValueError(
                "model.cold_start: model.path has no cold start to replicate (its weights are the "
                "checkpoint); replicate a priming stage instead (data.prime.path)"
            )
        if prime is not None and prime.mix is not None and self.task.name == "jsonl":
            raise ValueError(
                "data.prime.mix: task 'jsonl' has no solution forms; the built-in model primes "
                "from the file's 'solution' field"
            )
        curriculum = self.data.curriculum
        if curriculum is not None and curriculum.by == "difficulty" and self.task.name == "jsonl":
            raise ValueError("data.curriculum.by=difficulty: task 'jsonl' has no difficulty knob; use pass_rate")
        return self

    @model_validator(mode="after")
    def _lora_rank_fits_the_tiny_model(self) -> RunConfig:
        # The built-in model's layer sizes are known here (kv heads = heads, so every projection of attention is
        # hidden x hidden); a model.path's are checked when the adapters are built (workbench/train/lora.py).
        lora, tiny = self.learner.lora, self.model.tiny
        if lora is None or self.model.builtin is None:
            return self
        mlp = min(tiny.hidden_size, tiny.intermediate_size)
        sizes = {
            "q_proj": tiny.hidden_size,
            "k_proj": tiny.hidden_size,
            "v_proj": tiny.hidden_size,
            "o_proj": tiny.hidden_size,
            "gate_proj": mlp,
            "up_proj": mlp,
            "down_proj": mlp,
        }
        names = (
            list(sizes) if lora.target_modules == "all-linear" else [n.rsplit(".", 1)[-1] for n in lora.target_modules]
        )
        unknown = [n for n in names if n not in sizes]
        if unknown:
            raise ValueError(
                f"learner.lora.target_modules: the built-in model has no linear layer {unknown[0]!r}; "
                f"its linear layers: {', '.join(sizes)} (or all-linear)"
            )
        for name in names:
            if lora.rank > sizes[name]:
                raise ValueError(
                    f"learner.lora.rank={lora.rank} is above the smallest dimension ({sizes[name]}) of "
                    f"the adapted layer {name} of the built-in model: choose rank <= {sizes[name]}"
                )
        return self

    @model_validator(mode="after")
    def _pipeline_fits(self) -> RunConfig:
        # The pipelined sampler (workbench/train/pipeline.py) is either sampler backend on its own thread beside
        # either learner: a batch filter's refill rounds would need the rewards before the batch is known.
        k = self.rollout.staleness
        if k == 0:
            return self
        if self.algorithm.batch_filter is not None:
            raise ValueError(
                f"rollout.staleness={k} with algorithm.batch_filter={self.algorithm.batch_filter}: a "
                "filter's refill rounds need each batch's rewards before the next is sampled"
            )
        return self

    @model_validator(mode="after")
    def _constant_length_normaliser(self) -> RunConfig:
        # An aggregation that divides by a constant length gets the run's generation budget
        # unless one is set (the aggregation registry says which modes and why).
        from workbench.algorithms.aggregate import run_norm_constant  # deferred: torch

        algo = self.algorithm
        if algo.norm_constant is None:
            default = run_norm_constant(algo.agg_mode, self.sampler.max_new_tokens)
            if default is not None:
                algo.norm_constant = default
        return self

    def flat(self) -> dict[str, Any]:
        """Dotted-key params for MLflow, e.g. ``{"learner.lr": 1e-4}``."""
        return flatten(self.model_dump(mode="json"))

    def run_key(self) -> str:
        """Stable hash of what determines the results (tracking settings excluded).

        Only values that differ from their defaults are hashed, so adding a new field (with a
        default) to the schema keeps existing run keys, and resuming old studies still works.
        Changing a default's *value* must bump ``RUN_KEY_VERSION``.
        """
        # Reset (not exclude) the non-result fields: an excluded one would leave an empty section behind.
        neutral = self.model_copy(
            update={
                section: getattr(self, section).model_copy(update=dict.fromkeys(names))  # their defaults are None
                for section, names in NOT_IN_RUN_KEY.items()
            }
        )
        payload = neutral.model_dump(mode="json", exclude={"tracking"}, exclude_defaults=True)
        blob = json.dumps({"v": RUN_KEY_VERSION, "config": payload}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``override`` wins. Neither input is modified."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
