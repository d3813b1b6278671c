"""A local HF model directory, loaded as data only: no code from the directory runs, ever.

transformers runs a directory's own Python when its ``config.json`` or ``tokenizer_config.json``
names classes in ``auto_map`` (or its ``model_type`` is not one transformers ships), and with
``trust_remote_code`` unset it *asks* on stdin, so ``yes y | workbench run`` once executed it. Every
``from_pretrained`` of the workbench passes :data:`NO_REMOTE_CODE`, and :func:`refuse_remote_code`
refuses such a directory before transformers reads it, in one line naming the file. There is no
opt-in: the workbench loads the tokenizer from ``tokenizer.json`` itself and the model through the
architectures transformers ships, so a directory that needs its own code cannot be trained here.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import ModelDirectoryError

NO_REMOTE_CODE = {"trust_remote_code": False}  # every from_pretrained: never run the directory's code, never ask


def refuse_remote_code(path: Path) -> None:
    """Raise :class:`ModelDirectoryError` when loading ``path`` would run code found in the directory."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for name in ("config.json", "tokenizer_config.json"):
        file = path / name
        data = _json_object(file)
        if "auto_map" in data:
            classes = ", ".join(sorted(map(str, data["auto_map"])) if isinstance(data["auto_map"], dict) else [])
            raise ModelDirectoryError(
                f"{file}: auto_map{f' ({classes})' if classes else ''} asks to run code from the model directory; "
                "the workbench never runs a model directory's code: use a model whose architecture transformers "
                "ships (remove auto_map)"
            )
        model_type = data.get("model_type") if name == "config.json" else None
        if model_type is not None and model_type not in CONFIG_MAPPING:
            raise ModelDirectoryError(
                f"{file}: model_type {model_type!r} is not an architecture transformers ships, so its code would "
                "come from the model directory; the workbench never runs a model directory's code"
            )


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
LIST_TOKEN_KEYS = ("additional_special_tokens", "extra_special_tokens")
SETTING_KEYS = ("model_max_length", "clean_up_tokenization_spaces")
PROBE_TEXTS = (  # what a prompt holds: words, digits and signs, spacing, a newline, non-ASCII
    "What is 12 + 30? Natalia sold 48 clips; #### 72",
    "  two spaces,\ta tab\nand a new line\n\n",
    "café – 東京 🙂 \\boxed{1,000} x^2 = 0.5",
)


def load_tokenizer(path: Path, padding_side: str = "left"):
    """The model directory's own tokenizer, exactly: its ``tokenizer.json`` loaded as itself (never a class
    that transformers picks from ``config.json``'s model_type, which for ``qwen2`` rebuilt the tokenizer as
    Qwen's and dropped the file's own model and pre-tokenizer), with the special tokens of its
    ``tokenizer_config.json`` (and ``special_tokens_map.json``) and its chat template. The result encodes
    probe texts exactly as ``tokenizers.Tokenizer.from_file(tokenizer.json)``; a directory without a
    ``tokenizer.json``, or whose tokenizer does not, is refused (:class:`ModelDirectoryError`, one line)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    file = path / "tokenizer.json"
    if not file.is_file():
        raise ModelDirectoryError(
            f"{path}: no tokenizer.json; the workbench loads a model directory's tokenizer exactly from its own "
            "tokenizer.json (a fast tokenizer: save one with the directory's tokenizer, save_pretrained)"
        )
    settings = {**_json_object(path / "special_tokens_map.json"), **_json_object(path / "tokenizer_config.json")}
    kwargs = {key: _token_text(settings[key]) for key in SPECIAL_TOKEN_KEYS if settings.get(key) is not None}
    for key in LIST_TOKEN_KEYS:
        if isinstance(settings.get(key), list) and settings[key]:
            kwargs["additional_special_tokens"] = [_token_text(t) for t in settings[key]]
    kwargs |= {key: settings[key] for key in SETTING_KEYS if settings.get(key) is not None}
    try:
        own = Tokenizer.from_file(str(file))
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(file), padding_side=padding_side, **kwargs)
    except Exception as error:  # noqa: BLE001 - a malformed file: the user's directory, reported as such
        raise ModelDirectoryError(f"{file} cannot be loaded: {' '.join(str(error).split())[:160]}") from None
    template = _chat_template(path, settings)
    if template is not None:
        tokenizer.chat_template = template
    for text in PROBE_TEXTS:
        for special in (True, False):
            loaded = tokenizer(text, add_special_tokens=special)["input_ids"]
            expected = own.encode(text, add_special_tokens=special).ids
            if loaded != expected:
                raise ModelDirectoryError(
                    f"{file}: transformers' tokenizer encodes {text!r} as {loaded[:8]}..., the file itself as "
                    f"{expected[:8]}...; refused: the workbench trains with a model directory's own tokenizer exactly"
                )
    return tokenizer


def _json_object(file: Path) -> dict:
    """A JSON object file of the directory, or ``{}`` when it is not there."""
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ModelDirectoryError(f"{file} cannot be loaded: not JSON ({' '.join(str(error).split())[:120]})") from None
    if not isinstance(data, dict):
        raise ModelDirectoryError(f"{file} cannot be loaded: expected a JSON object")
    return data


def _token_text(value) -> str:
    """A special token as saved: a string, or an AddedToken's fields (``{"content": ..., ...}``)."""
    return value["content"] if isinstance(value, dict) and "content" in value else str(value)


def _chat_template(path: Path, settings: dict) -> str | None:
    """``chat_template.jinja`` (transformers 5), else ``chat_template`` in ``tokenizer_config.json``
    (a string, or a list of named templates whose ``default`` is used)."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = settings.get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None
