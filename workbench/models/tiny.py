"""The CPU default model: a small Llama/Qwen2 built from a seed, warmed up by cold-start SFT.

R1-style recipes start RL from a model that already knows the answer format. Here a short
supervised stage on worked examples of the task gives non-zero but imperfect accuracy, so
GRPO has something to sharpen. The result is cached on disk keyed by everything that
determines it, and saved with ``save_pretrained`` like any HF model.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

from workbench.config import ModelConfig, TaskConfig, TinyModelConfig
from workbench.models.sft import supervised_warmup
from workbench.models.tiny_context import TINY_MAX_POSITIONS
from workbench.models.tokenizer import build_char_tokenizer
from workbench.tasks import Task, build_task

BUILD_VERSION = 1  # bump when the build procedure changes, to invalidate caches


def cache_root() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "rl-workbench"))


def tiny_cache_key(model_cfg: ModelConfig, task_cfg: TaskConfig) -> str:
    payload = {
        "v": BUILD_VERSION,
        "tiny": model_cfg.tiny.model_dump(mode="json"),
        "template": model_cfg.prompt_template,
        "task": task_cfg.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def tiny_model_dir(model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True) -> Path:
    """Directory of the cached tiny model for this config, building it first if needed."""
    target = cache_root() / "models" / f"tiny-{tiny_cache_key(model_cfg, task_cfg)}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Parallel runs may ask for the same model: one builds, the others wait on the lock.
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").exists():
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
            try:
                model, tokenizer, sft = build_tiny_model(model_cfg, build_task(task_cfg), progress=progress)
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                record = {"model": model_cfg.model_dump(mode="json"), "task": task_cfg.model_dump(mode="json"),
                          "sft": asdict(sft)}
                (tmp / "workbench_build.json").write_text(json.dumps(record, indent=2))
                tmp.rename(target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target


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


def build_tiny_model(model_cfg: ModelConfig, task: Task, progress: bool = True):
    """Initialise from the seed and run the cold-start SFT on worked examples."""

    cfg = model_cfg.tiny
    tokenizer = build_char_tokenizer()
    model = init_tiny_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    sft = supervised_warmup(
        model, tokenizer, task, model_cfg.prompt_template, max_steps=cfg.sft_max_steps,
        batch_size=cfg.sft_batch_size, lr=cfg.sft_lr, target_accuracy=cfg.sft_target_accuracy,
        check_every=cfg.sft_check_every, rng=random.Random(f"sft-{cfg.seed}"), progress=progress,
    )
    return model.eval(), tokenizer, sft
