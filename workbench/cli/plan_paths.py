"""`workbench plan`'s look at the files a study names: the model directory and the data files.

`plan` runs anywhere (a laptop, before the GPU box is up), so a file missing *here* is a note, not an
error: `workbench run` refuses it with the same words (exit code 2) before anything starts. A model
directory that is here is inspected as `run` would (config, weights, tokenizer, chat template), without
loading weights."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path


def path_notes(specs: Sequence) -> Iterator[str]:
    """One line per distinct problem with the study's ``model.path``, ``task.path`` or ``task.eval_path``."""
    seen: set[tuple[str, ...]] = set()
    for spec in specs:
        model, task = spec.config.model, spec.config.task
        checks = [("task.path", task.path), ("task.eval_path", task.eval_path)]
        for field, value in checks:
            if value is not None and (field, value) not in seen:
                seen.add((field, value))
                if not Path(value).expanduser().is_file():
                    yield f"{field} {value} does not exist on this machine: `workbench run` will refuse it"
        key = ("model", model.path, model.chat_template, model.system_prompt or "")
        if model.path is not None and key not in seen:
            seen.add(key)
            problem = model_dir_problem(model)
            if problem is not None:
                yield problem


def model_dir_problem(model) -> str | None:
    """Why ``workbench run`` would refuse ``model`` (a ``ModelConfig`` with a ``path``), or None."""
    from workbench.models import inspect_model_dir  # deferred: transformers
    from workbench.rollout.prompts import resolve_prompt_format  # deferred: transformers

    path = Path(model.path).expanduser()
    if not path.is_dir():
        return (
            f"model.path {model.path} does not exist on this machine: `workbench run` will refuse it "
            "(point it at a local HF model directory: --set model.path=DIR)"
        )
    try:
        tokenizer, _ = inspect_model_dir(path)
        resolve_prompt_format(model, tokenizer, path)
    except (OSError, ValueError) as error:
        return " ".join(str(error).split())
    return None
