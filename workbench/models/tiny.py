"""The CPU default model: a small Llama/Qwen2 built from a seed, warmed up by cold-start SFT.

R1-style recipes start RL from a model that already knows the answer format. Here a short
supervised stage on worked examples of the task gives non-zero but imperfect accuracy, so
GRPO has something to sharpen. The result is cached on disk keyed by everything that
determines it, and saved with ``save_pretrained`` like any HF model.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

from workbench.config import MAX_SEED, ModelConfig, PrimeConfig, TaskConfig, TinyModelConfig
from workbench.models.build_cache import cache_root, cached_build
from workbench.models.sft import supervised_warmup
from workbench.models.tiny_context import TINY_MAX_POSITIONS
from workbench.models.tokenizer import build_char_tokenizer
from workbench.tasks import Task, build_task
from workbench.tasks.priming import primed_solutions

BUILD_VERSION = 1  # bump when the build procedure changes, to invalidate caches
BUILD_RECORD = "workbench_build.json"  # the build's settings and its cold start's SFT result, beside the weights


def cold_start_seed(seed: int, index: int) -> int:
    """The seed of cold start ``index`` (``model.cold_start``): ``seed`` itself for 0 (the one cold start every
    study had before replication), else a hash of both, so no two indices or seeds share an init or SFT order."""
    if index == 0:
        return seed
    digest = hashlib.sha256(f"cold-start/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & MAX_SEED


def tiny_cache_key(model_cfg: ModelConfig, task_cfg: TaskConfig, prime: PrimeConfig | None = None) -> str:
    payload = {
        "v": BUILD_VERSION,
        "tiny": model_cfg.tiny.model_dump(mode="json"),
        "template": model_cfg.template_text,
        "task": task_cfg.model_dump(mode="json"),
    }
    if prime is not None:  # only when set: the keys (and cached models) of unprimed builds stay as they were
        payload["prime"] = prime.model_dump(mode="json")
    if model_cfg.cold_start:  # likewise: cold start 0 is the model every earlier run used
        payload["cold_start"] = model_cfg.cold_start
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def tiny_model_dir(
    model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True, prime: PrimeConfig | None = None
) -> Path:
    """Directory of the cached tiny model for this config (and priming data), building it first if needed."""
    target = cache_root() / "models" / f"tiny-{tiny_cache_key(model_cfg, task_cfg, prime)}"

    def build(tmp: Path) -> None:
        model, tokenizer, sft = build_tiny_model(model_cfg, build_task(task_cfg), progress=progress, prime=prime)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {
            "model": model_cfg.model_dump(mode="json"),
            "task": task_cfg.model_dump(mode="json"),
            "prime": None if prime is None else prime.model_dump(mode="json"),
            "sft": asdict(sft),
        }
        (tmp / BUILD_RECORD).write_text(json.dumps(record, indent=2))

    return cached_build(target, build)


def init_tiny_model(cfg: TinyModelConfig, vocab_size: int, pad_id: int, eos_id: int) -> PreTrainedModel:
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if cfg.arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=TINY_MAX_POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
    )
    torch.manual_seed(cfg.seed)
    return model_cls(config)


def build_tiny_model(model_cfg: ModelConfig, task: Task, progress: bool = True, prime: PrimeConfig | None = None):
    """Initialise from the seed and run the cold-start SFT on worked examples (in ``prime.mix``'s forms); cold
    start ``model.cold_start`` seeds both from :func:`cold_start_seed`."""

    seed = cold_start_seed(model_cfg.tiny.seed, model_cfg.cold_start)
    cfg = model_cfg.tiny.model_copy(update={"seed": seed})
    tokenizer = build_char_tokenizer()
    model = init_tiny_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    sft = supervised_warmup(
        model,
        tokenizer,
        task,
        model_cfg.template_text,
        max_steps=cfg.sft_max_steps,
        batch_size=cfg.sft_batch_size,
        lr=cfg.sft_lr,
        target_accuracy=cfg.sft_target_accuracy,
        check_every=cfg.sft_check_every,
        rng=random.Random(f"sft-{cfg.seed}"),
        progress=progress,
        rewrite=None if prime is None or prime.mix is None else primed_solutions(task, prime.mix),
    )
    return model.eval(), tokenizer, sft
