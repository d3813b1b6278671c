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
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            raise ModelDirectoryError(f"{file} cannot be loaded: not JSON ({' '.join(str(error).split())[:120]})") from None
        if not isinstance(data, dict):
            raise ModelDirectoryError(f"{file} cannot be loaded: expected a JSON object")
        if "auto_map" in data:
            classes = ", ".join(sorted(map(str, data["auto_map"])) if isinstance(data["auto_map"], dict) else [])
            raise ModelDirectoryError(
                f"{file}: auto_map{f' ({classes})' if classes else ''} asks to run code from the model directory; "
                "the workbench never runs a model directory's code: use a model whose architecture transformers "
                "ships (remove auto_map)")
        model_type = data.get("model_type") if name == "config.json" else None
        if model_type is not None and model_type not in CONFIG_MAPPING:
            raise ModelDirectoryError(
                f"{file}: model_type {model_type!r} is not an architecture transformers ships, so its code would "
                "come from the model directory; the workbench never runs a model directory's code")
