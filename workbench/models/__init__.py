"""Policy models: the built-in tiny CPU model, or any local HF causal-LM directory."""

from __future__ import annotations

from pathlib import Path

from workbench.config import ModelConfig, TaskConfig


def model_dir(model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True) -> Path:
    """Where the weights live: the user's ``path``, or the cached tiny model (built on first use)."""
    if model_cfg.path is not None:
        path = Path(model_cfg.path).expanduser()
        check_model_path(path)
        return path
    from workbench.models.tiny import tiny_model_dir

    return tiny_model_dir(model_cfg, task_cfg, progress=progress)


def check_model_path(path: Path) -> None:
    if not path.is_dir():
        raise FileNotFoundError(f"model.path does not exist or is not a directory: {path}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path has no config.json (not a HF model directory): {path}")


def load_policy(model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True):
    """(model, tokenizer) with left padding, ready for sampling and learning."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress display covers loading

    path = model_dir(model_cfg, task_cfg, progress=progress)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token_id is None:  # many base models ship without one
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    return model, tokenizer
