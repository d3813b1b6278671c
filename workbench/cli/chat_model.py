"""``workbench chat-model PATH``: a small local chat model to walk the real-model path on a CPU (the
recipe: :mod:`workbench.models.local_chat`). Registered on the main app by :func:`register`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.output import console, fail

__all__ = ["chat_model", "register"]


def chat_model(
    path: Annotated[Path, typer.Argument(help="a new or empty directory to save the model to")],
    family: Annotated[
        str,
        typer.Option(
            help="qwen2 (ChatML, <|im_end|>) or llama3 (<|eot_id|>): the architecture, special tokens "
            "and chat template of that family"
        ),
    ] = "qwen2",
) -> None:
    """Build a small random-weight chat model (a few MB) with its own tokenizer and chat template, saved
    with save_pretrained, to try model.path, chat_template: auto and the end-of-turn stop without a
    download: `workbench chat-model .workbench/chat-model && workbench run studies/chat_cpu.yaml`. Its
    weights are random: it exercises the path, it does not learn arithmetic."""
    from workbench.models.local_chat import build_chat_model  # deferred: transformers

    try:
        saved = build_chat_model(path, family)
    except (ValueError, FileExistsError) as e:
        raise fail(str(e)) from None
    console.print(
        f"wrote a {family} chat model to {saved} (random weights, its own tokenizer and chat template); "
        "try it: workbench run studies/chat_cpu.yaml",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``chat-model`` to ``app``."""
    app.command("chat-model")(chat_model)
