"""``engine: trl``: each workbench setting -> the ``trl.GRPOConfig`` field(s) it becomes, or why it cannot.

Data and pure functions over a :class:`~workbench.config.RunConfig`, importable without TRL: ``workbench plan``
refuses a variant whose settings TRL cannot express (:func:`inexpressible`) on a machine with no TRL, and the
TRL engine (:mod:`workbench.execution.trl_engine`) builds its ``GRPOConfig`` from :func:`grpo_config_kwargs`.
``docs/trl-engine.md``'s table is :func:`markdown_table` (``make docs``); the TRL-venv test
``tests/trl_engine/test_trl_mapping_fields.py`` checks every field named here against ``dataclasses.fields(GRPOConfig)``.

Semantics read from ``trl/trainer/grpo_trainer.py`` and ``grpo_config.py`` of TRL 1.16.0: ``loss_type`` fixes the
aggregation (grpo: per-sequence token mean; dapo: token mean over the batch's tokens; dr_grpo: token sum over
``batch x max_completion_length``), ``scale_rewards`` the advantage's std (group / batch / none, Bessel-corrected,
plus a fixed 1e-4), ``epsilon``/``epsilon_high`` the ratio clip (cispo: ``epsilon_high`` is the weight's cap
itself), ``delta`` a cap on the unclipped ratio, ``beta`` a k3 KL to the reference added to the per-token loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from workbench.config import RunConfig

__all__ = [
    "FIXED_FIELDS",
    "LEFT_AT_DEFAULT",
    "ROWS",
    "TRL_VERSION",
    "Row",
    "grpo_config_kwargs",
    "inexpressible",
    "markdown_table",
    "mapped_fields",
]

TRL_VERSION = "1.16.0"  # the TRL whose GRPOConfig/GRPOTrainer this table was read from

Kind = Literal["field", "around", "refused"]


@dataclass(frozen=True)
class Row:
    """One workbench setting (a dotted name; a section name covers its fields) and what it becomes in TRL.

    ``kind``: ``field`` -> the GRPOConfig ``fields``; ``around`` -> done by the workbench around the trainer
    (the model directory, the prompts, the reward function, the eval, the health callback), no GRPOConfig field;
    ``refused`` -> not expressible in TRL: a value other than the default is refused at load.
    ``fields`` of a ``refused`` row name TRL's nearest fields when it has some (why they do not fit is in ``how``).
    """

    setting: str
    kind: Kind
    how: str
    fields: tuple[str, ...] = ()


ROWS: tuple[Row, ...] = (
    Row("seed", "field", "as is", ("seed",)),
    Row("engine", "around", "trl selects this table"),
    Row(
        "model",
        "around",
        "the same model directory (the built-in tiny model is built and saved first); each prompt "
        "rendered by the workbench's prompt/chat template before TRL sees it",
    ),
    Row(
        "task",
        "around",
        "the task's training problems are the train dataset (prompt, answer); its eval problems are "
        "evaluated by the workbench's eval",
    ),
    Row("data.prime", "around", "the model's cold start, before TRL"),
    Row("data.pool", "around", "used only by data.curate / data.order, which are refused"),
    Row("data.order", "refused", "TRL's sampler shuffles the dataset; only `sampled` (i.i.d. draws) matches"),
    Row("data.curate", "refused", "no prompt curation in TRL"),
    Row("data.curriculum", "refused", "no curriculum in TRL"),
    Row("sampler.temperature", "field", "as is", ("temperature",)),
    Row("sampler.top_p", "field", "as is", ("top_p",)),
    Row("sampler.max_new_tokens", "field", "as is", ("max_completion_length",)),
    Row(
        "sampler.backend",
        "refused",
        "hf only: TRL samples with transformers' generate on the training model "
        "(use_vllm=False); vllm is not wired in this engine",
        ("use_vllm",),
    ),
    Row("sampler.dtype", "refused", "float32 only: TRL samples with the training model itself, in its dtype"),
    Row("sampler.decode", "around", "no effect: TRL generates with transformers' generate"),
    Row("sampler.compile", "around", "no effect: TRL generates with transformers' generate"),
    Row("sampler.sync", "around", "no effect: TRL samples with the training model (no weight sync)"),
    Row("sampler.gpu_memory_utilization", "around", "no effect without vLLM"),
    Row("sampler.enforce_eager", "around", "no effect without vLLM"),
    Row("learner.backend", "refused", "torch only (DeepSpeed through accelerate is not wired in this engine)"),
    Row("learner.zero_stage", "refused", "DeepSpeed only"),
    Row("learner.deepspeed_config", "refused", "DeepSpeed only"),
    Row("learner.device", "field", "cpu (or auto without CUDA) -> use_cpu=True", ("use_cpu",)),
    Row(
        "learner.dtype",
        "field",
        "float32 only -> bf16=False, fp16=False (TRL's bf16 is mixed precision, not bfloat16 weights)",
        ("bf16", "fp16"),
    ),
    Row(
        "learner.lr",
        "field",
        "as is, constant (lr_scheduler_type=constant, warmup_steps=0, as the workbench's AdamW)",
        ("learning_rate",),
    ),
    Row("learner.weight_decay", "field", "as is", ("weight_decay",)),
    Row("learner.betas", "field", "(adam_beta1, adam_beta2)", ("adam_beta1", "adam_beta2")),
    Row("learner.grad_clip", "field", "as is", ("max_grad_norm",)),
    Row("learner.forward", "around", "no effect on the numbers (same logprobs to float tolerance)"),
    Row(
        "learner.micro_batch_size",
        "field",
        "per_device_train_batch_size = micro; gradient_accumulation_steps = minibatch / micro (must divide)",
        ("per_device_train_batch_size", "gradient_accumulation_steps"),
    ),
    Row(
        "learner.lora",
        "refused",
        "GRPOTrainer takes LoRA as its peft_config argument, not a GRPOConfig field; not wired in this engine",
    ),
    Row(
        "learner.checkpoint_every",
        "field",
        "save_strategy=steps, save_steps = k x optimizer steps per RL step (docs/trl-engine.md: resume)",
        ("save_strategy", "save_steps"),
    ),
    Row("learner.inject_nonfinite_at_step", "refused", "fault injection of the workbench's learner"),
    Row("rollout.group_size", "field", "as is", ("num_generations",)),
    Row(
        "rollout.prompts_per_step",
        "field",
        "generation_batch_size = prompts_per_step x group_size (TRL derives it: "
        "per_device_train_batch_size = that / algorithm.minibatches, steps_per_generation = minibatches; one process)",
        ("generation_batch_size", "per_device_train_batch_size"),
    ),
    Row(
        "rollout.steps",
        "field",
        "max_steps = steps x minibatches x epochs (TRL counts optimizer steps)",
        ("max_steps",),
    ),
    Row(
        "rollout.staleness",
        "refused",
        "0 only: GRPOTrainer samples with the current policy (TRL's asynchronous "
        "trainer, with its own max_staleness, is another trainer)",
    ),
    Row("rollout.eval_every", "around", "the workbench's eval, run by the callback at these steps"),
    Row("rollout.eval_temperature", "around", "the workbench's eval"),
    Row("rollout.eval_samples", "around", "the workbench's eval"),
    Row("rollout.eval_size", "around", "the workbench's eval"),
    Row("rollout.reflection_words", "around", "the workbench's eval"),
    Row("rollout.log_samples", "around", "the workbench's eval"),
    Row("reward.timeout_s", "around", "the workbench's verifier is the reward function"),
    Row("reward.workers", "around", "the workbench's verifier is the reward function"),
    Row("reward.overlap", "around", "no effect: TRL scores before its update"),
    Row(
        "reward.shaping", "refused", "only the verifier's correctness is the reward function here", ("reward_weights",)
    ),
    Row("reward.control", "refused", "spurious-reward controls are the workbench's"),
    Row("reward.control_params", "refused", "spurious-reward controls are the workbench's"),
    Row("algorithm.preset", "around", "resolved into the algorithm settings below"),
    Row(
        "algorithm.estimator",
        "field",
        "grpo -> group; dr_grpo -> none; lite_ppo -> batch; any other estimator refused",
        ("scale_rewards",),
    ),
    Row(
        "algorithm.estimator_params",
        "refused",
        "TRL fixes the std's epsilon at 1e-4 (the workbench's default "
        "1e-6 applies only to a zero-std group, whose advantages are 0 either way)",
    ),
    Row(
        "algorithm.loss",
        "field",
        "ppo_clip -> grpo / dapo / dr_grpo by agg_mode; gspo -> grpo with "
        "importance_sampling_level=sequence; cispo -> cispo; sapo -> sapo; others refused",
        ("loss_type", "importance_sampling_level"),
    ),
    Row(
        "algorithm.agg_mode",
        "field",
        "seq-mean-token-mean -> grpo (or gspo/sapo); token-mean -> dapo (or cispo); "
        "seq-mean-token-sum-norm -> dr_grpo; others refused",
        ("loss_type",),
    ),
    Row(
        "algorithm.norm_constant",
        "field",
        "dr_grpo divides by max_completion_length: only norm_constant = sampler.max_new_tokens",
        ("max_completion_length",),
    ),
    Row("algorithm.clip_low", "field", "epsilon (cispo: no lower bound in TRL, so clip_low >= 1 only)", ("epsilon",)),
    Row(
        "algorithm.clip_high",
        "field",
        "epsilon_high (cispo: epsilon_high = 1 + clip_high, the weight's cap)",
        ("epsilon_high",),
    ),
    Row(
        "algorithm.dual_clip",
        "field",
        "delta (caps the unclipped ratio; equal to dual-clip when delta > 1 + clip_high)",
        ("delta",),
    ),
    Row(
        "algorithm.loss_params",
        "field",
        "sapo: temperature_pos/neg -> sapo_temperature_pos/neg; others refused",
        ("sapo_temperature_pos", "sapo_temperature_neg"),
    ),
    Row("algorithm.epochs", "field", "as is", ("num_iterations",)),
    Row("algorithm.minibatches", "field", "optimizer steps per generation batch", ("steps_per_generation",)),
    Row(
        "algorithm.correction",
        "refused",
        "TRL corrects only vLLM's sampling (vllm_importance_sampling_*), which this engine does not run",
        ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode"),
    ),
    Row("algorithm.correction_cap", "refused", "see algorithm.correction", ("vllm_importance_sampling_cap",)),
    Row("algorithm.batch_filter", "refused", "no dynamic sampling (group filter with refill) in TRL"),
    Row("algorithm.filter_on", "around", "only with a batch filter"),
    Row("algorithm.max_sampling_rounds", "around", "only with a batch filter"),
    Row(
        "algorithm.token_filters",
        "field",
        "[overlong] -> mask_truncated_completions=True; others refused",
        ("mask_truncated_completions",),
    ),
    Row("algorithm.kl_coef", "field", "as is (the KL is added to the loss)", ("beta",)),
    Row("algorithm.kl_estimator", "refused", "k3 only (TRL's per_token_kl)"),
    Row("algorithm.kl_in", "refused", "loss only (TRL adds beta x KL to the per-token loss)"),
    Row("health", "around", "WorkbenchCallback runs the rules every step and stops the trainer"),
    Row(
        "tracking",
        "around",
        "WorkbenchCallback logs to the study's MLflow layout; every completion goes to rollouts/ as a native "
        "run's (within tracking.rollouts_budget_mb)",
    ),
)

#: GRPOConfig fields the engine sets to one value whatever the settings, and why.
FIXED_FIELDS: dict[str, tuple[Any, str]] = {
    "logging_steps": (1, "canonical metrics and health at every step"),
    "report_to": ("none", "the callback logs to MLflow"),
    "lr_scheduler_type": ("constant", "the workbench's AdamW has no schedule"),
    "warmup_steps": (0, "no warmup in the workbench"),
    "optim": ("adamw_torch", "torch.optim.AdamW, as the workbench's learner"),
    "adam_epsilon": (1e-8, "torch.optim.AdamW's default, as the workbench's learner"),
    "gradient_checkpointing": (False, "the workbench's learner does not checkpoint activations"),
    "top_k": (0, "the full distribution, as the workbench's sampler"),
    "repetition_penalty": (1.0, "none, as the workbench's sampler"),
    "use_vllm": (False, "TRL samples with the training model"),
    "remove_unused_columns": (False, "the reward function reads the dataset's answer column"),
    "dataloader_num_workers": (0, "one process"),
    "disable_tqdm": (True, "the workbench's progress display"),
}

#: GRPOConfig's own fields (beyond transformers' TrainingArguments) that no workbench setting maps to: left at TRL's
#: default, which is the workbench's behaviour, or off. The TRL-venv test checks that these and the mapped fields
#: together are every GRPOConfig field of TRL_VERSION, so a field a new TRL adds is classified before it is trusted.
LEFT_AT_DEFAULT: dict[str, str] = (
    dict.fromkeys(
        (
            "entropy_coef",
            "entropy_coef_delta",
            "entropy_coef_max",
            "entropy_coef_min",
            "entropy_target",
            "use_adaptive_entropy",
            "top_entropy_quantile",
        ),
        "entropy bonus / high-entropy token masking: off (none in the workbench)",
    )
    | dict.fromkeys(
        ("vespo_k_neg", "vespo_k_pos", "vespo_lambda_neg", "vespo_lambda_pos"),
        "loss_type vespo only (no workbench counterpart)",
    )
    | dict.fromkeys(
        ("sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps"),
        "the KL reference stays the initial policy, as the workbench's",
    )
    | dict.fromkeys(
        (
            "vllm_mode",
            "vllm_model_impl",
            "vllm_enable_sleep_mode",
            "vllm_structured_outputs_regex",
            "vllm_server_base_url",
            "vllm_server_host",
            "vllm_server_port",
            "vllm_server_timeout",
            "vllm_group_port",
            "vllm_gpu_memory_utilization",
            "vllm_max_model_length",
            "vllm_tensor_parallel_size",
            "vllm_importance_sampling_clip_max",
            "vllm_importance_sampling_clip_min",
        ),
        "vLLM only (use_vllm=False)",
    )
    | dict.fromkeys(
        (
            "log_completions",
            "log_completions_hub_repo",
            "log_multimodal",
            "log_unique_prompts",
            "num_completions_to_print",
        ),
        "TRL's own completion logging: off (the workbench logs)",
    )
    | dict.fromkeys(
        (
            "use_transformers_continuous_batching",
            "transformers_continuous_batching_config",
            "use_transformers_paged",
            "cache_implementation",
            "generation_kwargs",
            "ds3_gather_for_generation",
        ),
        "how TRL generates: its defaults (transformers' generate)",
    )
    | {
        "min_p": "None: no min-p filtering, as the workbench's sampler",
        "off_policy_mask_threshold": "None: no off-policy sequence masking (none in the workbench)",
        "use_bias_correction_kl": "False: the KL is not reweighted by the ratio (as the workbench's)",
        "multi_objective_aggregation": "one reward function: both aggregations give the same reward",
        "num_generations_eval": "TRL's own eval is not used (the workbench evaluates)",
        "shuffle_dataset": "True: the dataset is already i.i.d. draws from the task",
        "disable_dropout": "False: dropout as in the model's config, as the workbench's learner (model.train())",
        "cast_lm_head_to_fp32": "False: float32 weights throughout",
        "pad_to_multiple_of": "None: no padding beyond the batch's longest",
        "chat_template_kwargs": "prompts arrive rendered by the workbench's prompt format",
        "max_tool_calling_iterations": "no tools",
        "model_init_kwargs": "the engine loads the model itself (float32)",
        "trust_remote_code": "False: the workbench never runs a model directory's code",
        "router_aux_loss_coef": "MoE router loss: the workbench's models are dense",
    }
)

_ESTIMATOR_SCALE = {"grpo": "group", "dr_grpo": "none", "lite_ppo": "batch"}


def _value_and_default(cfg: RunConfig, default: RunConfig, dotted: str) -> tuple[Any, Any]:
    value: Any = cfg
    for part in dotted.split("."):
        value, default = getattr(value, part), getattr(default, part)
    return value, default


def _loss_type(cfg: RunConfig) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    algo = cfg.algorithm
    loss, agg = algo.loss, algo.agg_mode
    table = {
        ("ppo_clip", "seq-mean-token-mean"): {"loss_type": "grpo"},
        ("ppo_clip", "token-mean"): {"loss_type": "dapo"},
        ("ppo_clip", "seq-mean-token-sum-norm"): {"loss_type": "dr_grpo"},
        ("gspo", "seq-mean-token-mean"): {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        ("cispo", "token-mean"): {"loss_type": "cispo"},
        ("sapo", "seq-mean-token-mean"): {"loss_type": "sapo"},
    }
    if (loss, agg) not in table:
        where = "algorithm.loss" if loss not in {k[0] for k in table} else "algorithm.agg_mode"
        return {}, [(where, f"loss {loss} with agg_mode {agg} has no TRL loss_type")]
    return dict(table[(loss, agg)]), []


def translate(cfg: RunConfig) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(GRPOConfig keyword arguments, [(setting, why TRL cannot express it)]) for ``cfg``; no TRL import."""
    from workbench.config import RunConfig as Config  # deferred: pydantic, torch

    problems: list[tuple[str, str]] = []
    algo, roll, learner = cfg.algorithm, cfg.rollout, cfg.learner
    defaults = Config()
    for row in ROWS:  # the refused settings: any value but the default
        if row.kind == "refused":
            value, default = _value_and_default(cfg, defaults, row.setting)
            if value != default:
                problems.append((row.setting, row.how))
    if learner.dtype != "float32":
        problems.append(("learner.dtype", "float32 only: TRL's bf16/fp16 are mixed precision, not the weights' dtype"))
    kw: dict[str, Any] = {name: value for name, (value, _) in FIXED_FIELDS.items()}
    kw |= {
        "seed": cfg.seed,
        "temperature": cfg.sampler.temperature,
        "top_p": cfg.sampler.top_p,
        "max_completion_length": cfg.sampler.max_new_tokens,
        "learning_rate": learner.lr,
        "weight_decay": learner.weight_decay,
        "adam_beta1": learner.betas[0],
        "adam_beta2": learner.betas[1],
        "max_grad_norm": learner.grad_clip,
        "bf16": False,
        "fp16": False,
        "num_generations": roll.group_size,
        "num_iterations": algo.epochs,
        "beta": algo.kl_coef,
    }
    kw["use_cpu"] = learner.device == "cpu" or (learner.device == "auto" and not _cuda())
    if algo.estimator in _ESTIMATOR_SCALE:
        kw["scale_rewards"] = _ESTIMATOR_SCALE[algo.estimator]
    else:
        problems.append(("algorithm.estimator", f"estimator {algo.estimator} has no TRL scale_rewards"))
    loss_kw, loss_problems = _loss_type(cfg)
    kw |= loss_kw
    problems += loss_problems
    if algo.clip_low is not None:
        if algo.loss == "cispo":
            if algo.clip_low < 1.0:
                problems.append(("algorithm.clip_low", "cispo in TRL has no lower bound: clip_low >= 1 only"))
        else:
            kw["epsilon"] = algo.clip_low
    if algo.clip_high is not None:
        kw["epsilon_high"] = 1.0 + algo.clip_high if algo.loss == "cispo" else algo.clip_high
    if algo.dual_clip is not None:
        if algo.dual_clip <= 1.0 + (algo.clip_high or 0.0):
            problems.append(("algorithm.dual_clip", "TRL's delta equals dual-clip only above 1 + clip_high"))
        kw["delta"] = algo.dual_clip
    params = dict(algo.loss_params)
    if algo.loss == "sapo":
        for name in ("temperature_pos", "temperature_neg"):
            if name in params:
                kw[f"sapo_{name}"] = params.pop(name)
    if params:
        problems.append(("algorithm.loss_params", f"{', '.join(sorted(params))} has no GRPOConfig field"))
    if algo.agg_mode == "seq-mean-token-sum-norm" and algo.norm_constant not in (
        None,
        float(cfg.sampler.max_new_tokens),
    ):
        problems.append(
            (
                "algorithm.norm_constant",
                "TRL's dr_grpo divides by max_completion_length: only norm_constant = sampler.max_new_tokens",
            )
        )
    unknown = [f for f in algo.token_filters if f != "overlong"]
    if unknown:
        problems.append(("algorithm.token_filters", f"{', '.join(unknown)} has no GRPOConfig field"))
    kw["mask_truncated_completions"] = "overlong" in algo.token_filters
    # batch shapes: one process, the generation batch split into `minibatches` optimizer steps
    completions = roll.prompts_per_step * roll.group_size
    if completions % algo.minibatches:
        problems.append(
            (
                "algorithm.minibatches",
                f"{completions} completions per step do not split into {algo.minibatches} equal minibatches",
            )
        )
    minibatch = max(1, completions // algo.minibatches)
    micro = learner.micro_batch_size or minibatch
    if minibatch % micro:
        problems.append(
            ("learner.micro_batch_size", f"a minibatch of {minibatch} does not split into micro-batches of {micro}")
        )
    accumulation = max(1, minibatch // micro)
    # generation_batch_size follows (TRL refuses both set): micro x steps_per_generation = completions
    kw |= {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": algo.minibatches * accumulation,
        "max_steps": roll.steps * optimizer_steps_per_rl_step(cfg),
    }
    if learner.checkpoint_every is not None:
        kw |= {"save_strategy": "steps", "save_steps": learner.checkpoint_every * optimizer_steps_per_rl_step(cfg)}
    else:
        kw["save_strategy"] = "no"
    return kw, problems


def _cuda() -> bool:
    import torch  # deferred: only to resolve learner.device=auto

    return bool(torch.cuda.is_available())


def optimizer_steps_per_rl_step(cfg: RunConfig) -> int:
    """TRL's global step counts optimizer steps: minibatches x epochs of them per RL step."""
    return cfg.algorithm.minibatches * cfg.algorithm.epochs


def inexpressible(cfg: RunConfig) -> list[tuple[str, str]]:
    """``[(setting, why)]``: what of ``cfg`` TRL cannot express; empty for a workbench-engine run."""
    if cfg.engine != "trl":
        return []
    return translate(cfg)[1]


def grpo_config_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """GRPOConfig keyword arguments for ``cfg`` (output_dir and run_name are the caller's); ``ValueError`` naming the
    first setting TRL cannot express."""
    kw, problems = translate(cfg)
    if problems:
        setting, why = problems[0]
        raise ValueError(f"{setting}: not expressible in TRL ({why})")
    return kw


def mapped_fields() -> set[str]:
    """Every GRPOConfig field this module names (the TRL-venv test checks each exists)."""
    return {f for row in ROWS for f in row.fields} | set(FIXED_FIELDS) | {"seed", "importance_sampling_level"}


def markdown_table() -> str:
    """docs/trl-engine.md's mapping table (``make docs``)."""
    kinds = {"field": "GRPOConfig", "around": "done around the trainer", "refused": "not expressible in TRL"}
    lines = ["| workbench setting | becomes | GRPOConfig field(s) | how |", "|---|---|---|---|"]
    for row in ROWS:
        fields = ", ".join(f"`{f}`" for f in row.fields) or "-"
        lines.append(f"| `{row.setting}` | {kinds[row.kind]} | {fields} | {row.how} |")
    lines += ["", "| GRPOConfig field fixed by the engine | value | why |", "|---|---|---|"]
    lines += [f"| `{name}` | `{value}` | {why} |" for name, (value, why) in FIXED_FIELDS.items()]
    lines += ["", "| GRPOConfig field no workbench setting maps to | left at TRL's default because |", "|---|---|"]
    lines += [f"| `{name}` | {why} |" for name, why in sorted(LEFT_AT_DEFAULT.items())]
    return "\n".join(lines) + "\n"
