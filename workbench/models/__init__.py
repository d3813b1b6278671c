"""Policy models: the built-in tiny CPU model, or any local HF causal-LM directory."""

from __future__ import annotations

from pathlib import Path

from workbench.config import ModelConfig, PrimeConfig, TaskConfig
from workbench.models.directory import NO_REMOTE_CODE, load_tokenizer, refuse_remote_code


def model_dir(
    model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True, prime: PrimeConfig | None = None
) -> Path:
    """Where the weights live: the user's ``path`` (primed first by an SFT stage when ``prime.path`` is set),
    or the cached tiny model (built on first use, its cold start's data shaped by ``prime.mix``)."""
    if model_cfg.path is not None:
        path = Path(model_cfg.path).expanduser()
        check_model_path(path)
        if prime is None or prime.path is None:
            return path
        from workbench.models.priming import primed_model_dir  # deferred: torch, transformers

        return primed_model_dir(
            path, model_cfg.template_text, prime, progress=progress, cold_start=model_cfg.cold_start
        )
    from workbench.models.tiny import tiny_model_dir  # deferred: torch, transformers

    return tiny_model_dir(model_cfg, task_cfg, progress=progress, prime=prime)


def check_model_path(path: Path) -> None:
    if not path.is_dir():
        raise FileNotFoundError(f"model.path does not exist or is not a directory: {path}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path has no config.json (not a HF model directory): {path}")
    refuse_remote_code(path)  # before transformers reads it: it would run the directory's code (or ask on stdin)


def _first_line(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def inspect_model_dir(path: Path):
    """Preflight of a local model directory, without loading weights: ``(tokenizer, max positions)``.

    Loads ``config.json`` and the tokenizer exactly as training will (so a fake or garbled
    config fails here, as one line, not inside an MLflow run), checks the architecture is a
    causal LM and that weight files exist. Raises ``ValueError``/``FileNotFoundError``."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    check_model_path(path)
    try:
        config = AutoConfig.from_pretrained(path, **NO_REMOTE_CODE)
    except Exception as error:  # noqa: BLE001 - OSError (bad JSON), ValueError (unknown model_type), ...
        raise ValueError(f"model.path {path}: config.json cannot be loaded: {_first_line(error)}") from None
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"model.path {path}: model_type {config.model_type!r} is not a causal language model")
    weights = [*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin"), *path.glob("*.safetensors.index.json")]
    if not weights:
        raise FileNotFoundError(f"model.path {path}: no weights (*.safetensors or pytorch_model*.bin)")
    tokenizer = load_tokenizer(path)  # the directory's own tokenizer.json, exactly, or a one-line refusal
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return tokenizer, positions


def token_count_over(tokenizer, text: str, budget: int) -> int | None:
    """Tokens in ``text`` if more than ``budget``, else ``None``; never tokenizes megabytes to say so.

    A prefix of ``(budget + 1) * 64`` characters is tokenized first: if it alone exceeds the
    budget by more than one token, so does the text (subword tokenizers split a prefix as they
    split the start of the whole text, except for the token cut at its end)."""
    cut = (budget + 1) * 64
    if len(text) > cut:
        prefix = len(tokenizer(text[:cut], add_special_tokens=False)["input_ids"])
        if prefix > budget + 1:
            return prefix
    count = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return count if count > budget else None


def load_policy(model_cfg: ModelConfig, task_cfg: TaskConfig, progress: bool = True, prime: PrimeConfig | None = None):
    """(model, tokenizer) with left padding, ready for sampling and learning."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress display covers loading

    path = model_dir(model_cfg, task_cfg, progress=progress, prime=prime)
    tokenizer = load_tokenizer(path, padding_side="left")
    if tokenizer.pad_token_id is None:  # many base models ship without one
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32", **NO_REMOTE_CODE)
    return model, tokenizer
