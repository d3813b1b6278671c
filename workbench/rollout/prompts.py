"""How a problem becomes the text the model continues, and which tokens end its answer.

``model.chat_template: none`` (the default) shows ``model.prompt_template.format(prompt=...)`` as is and
stops at EOS. With a chat template (``auto``: the model directory's; or a Jinja template, inline or a
file), the same text is the user turn, after an optional ``model.system_prompt``, rendered by
``tokenizer.apply_chat_template(..., add_generation_prompt=True)``; generation then stops at the
template's end-of-turn token as well (``<|im_end|>`` for ChatML, ``<|eot_id|>`` for Llama 3), which a
base model's tokenizer often does not name as its EOS.

The rendered text is tokenized once, by the sampler, with ``add_special_tokens=False`` (the template
writes its own BOS); those ids are the rollout's ``prompt_ids``, so the learner scores exactly the
tokens the sampler conditioned on.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.config import ModelConfig

TEMPLATE_MARKERS = ("{%", "{{")  # a chat_template value holding these is Jinja, anything else a file path
PROBE_REPLY = "WORKBENCH-REPLY-PROBE"  # an assistant turn's content, to find what the template writes after it


# A chat template is a program: transformers renders it in Jinja's immutable sandbox (no attribute
# access outside the sandbox's rules, ranges capped at 100,000 items), which bounds what it can reach
# but not what it costs: nested loops or a string doubled in a loop hang `plan` or exhaust memory.
# The checks that render it before any run (`check_generation_prompt`, `end_of_turn_ids`) do so within
# these budgets (#53).
MAX_TEMPLATE_CHARS = 1_000_000  # the template's source; real ones are 1-10 kB (Qwen2.5's is ~2.5 kB)
MAX_RENDERED_CHARS = 1_000_000  # one rendered probe prompt; a real one is a few hundred characters
RENDER_SECONDS = 5.0  # a real template renders the probe in milliseconds


class ChatTemplateError(ValueError):
    """A chat template that is missing, unreadable, or cannot wrap a prompt for generation."""


class _RenderTimeout(Exception):
    pass


@contextmanager
def render_budget(seconds: float = RENDER_SECONDS) -> Iterator[None]:
    """Stop a template that renders for longer than ``seconds`` (``ChatTemplateError``). The alarm is a
    real-time interval timer, so it applies on the main thread (``plan`` and ``run`` check templates
    there); elsewhere the render runs without it, bounded by the sandbox and the size checks."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _RenderTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _RenderTimeout:
        raise ChatTemplateError(
            f"model.chat_template did not render a one-line prompt within {seconds:g} s: "
            "a template that loops this long would stall every step"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _checked_render(tokenizer, messages, **kwargs) -> str:
    """``apply_chat_template`` of ``messages`` to text within the time and size budgets."""
    with render_budget():
        text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    if len(text) > MAX_RENDERED_CHARS:
        raise ChatTemplateError(
            f"model.chat_template renders a one-line prompt as {len(text):,} characters "
            f"(more than {MAX_RENDERED_CHARS:,})"
        )
    return text


@dataclass(frozen=True)
class PromptFormat:
    """Renders problems' prompts for the model and says which token ids end a completion."""

    template: str = "{prompt}"  # model.prompt_template: the whole prompt, or the user turn of a chat
    stop_ids: tuple[int, ...] = ()  # EOS first, then end-of-turn tokens; empty: the tokenizer's EOS only
    chat: bool = False  # wrap in the tokenizer's chat template
    system_prompt: str | None = None
    tokenizer: Any = field(default=None, repr=False, compare=False)  # with chat: the tokenizer holding the template

    def render(self, prompt: str) -> str:
        """The text the model continues for a problem's ``prompt``."""
        text = self.template.format(prompt=prompt)
        if not self.chat:
            return text
        return self.tokenizer.apply_chat_template(
            chat_messages(text, self.system_prompt), tokenize=False, add_generation_prompt=True
        )

    def stops(self, tokenizer) -> list[int]:
        """The ids that end a completion: ``stop_ids``, or the tokenizer's EOS when none were resolved."""
        return list(self.stop_ids) or [tokenizer.eos_token_id]


def as_prompt_format(prompt: PromptFormat | str) -> PromptFormat:
    """A plain ``prompt_template`` string is the format without a chat template."""
    return prompt if isinstance(prompt, PromptFormat) else PromptFormat(template=prompt)


def chat_messages(user: str, system_prompt: str | None) -> list[dict[str, str]]:
    system = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    return [*system, {"role": "user", "content": user}]


def resolve_prompt_format(model_cfg: ModelConfig, tokenizer, model_path: str | Path | None = None) -> PromptFormat:
    """The run's ``PromptFormat``. With an explicit template it is installed on ``tokenizer``
    (``tokenizer.chat_template``). Raises ``ChatTemplateError`` naming the field."""
    setting = model_cfg.chat_template
    if setting == "none":
        return PromptFormat(template=model_cfg.template_text, stop_ids=(tokenizer.eos_token_id,))
    if setting == "auto":
        if not getattr(tokenizer, "chat_template", None):
            where = model_path if model_path is not None else "the model directory"
            raise ChatTemplateError(
                f"model.chat_template: auto, but {where} has no chat template (no 'chat_template' in its "
                "tokenizer_config.json or chat_template.jinja): set model.chat_template: none to use "
                "model.prompt_template as plain text, or give a Jinja template or a file"
            )
    else:
        tokenizer.chat_template = read_template(setting)
    if len(tokenizer.chat_template) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(
            f"model.chat_template is {len(tokenizer.chat_template):,} characters long "
            f"(more than {MAX_TEMPLATE_CHARS:,})"
        )
    check_generation_prompt(tokenizer, model_cfg.system_prompt)
    stops = [tokenizer.eos_token_id, *end_of_turn_ids(tokenizer, model_cfg.system_prompt)]
    return PromptFormat(
        template=model_cfg.template_text,
        stop_ids=tuple(dict.fromkeys(stops)),
        chat=True,
        system_prompt=model_cfg.system_prompt,
        tokenizer=tokenizer,
    )


def read_template(setting: str) -> str:
    """An inline Jinja template as is, else the contents of the file it names."""
    if any(marker in setting for marker in TEMPLATE_MARKERS):
        return setting
    path = Path(setting).expanduser()
    if not path.is_file():
        raise ChatTemplateError(
            f"model.chat_template: {setting!r} is neither auto, none, a Jinja template "
            "(it has no '{%' or '{{') nor an existing file"
        )
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ChatTemplateError(f"model.chat_template: the file {path} is empty")
    return text


def check_generation_prompt(tokenizer, system_prompt: str | None) -> None:
    """The template must honour ``add_generation_prompt``: one that renders the same with and without it
    leaves the assistant header to the model, which would then be scored on writing it."""
    messages = chat_messages("1+1=", system_prompt)
    try:
        with_prompt = _checked_render(tokenizer, messages, add_generation_prompt=True)
        without = _checked_render(tokenizer, messages, add_generation_prompt=False)
    except ChatTemplateError:
        raise
    except Exception as error:  # noqa: BLE001 - Jinja syntax/undefined errors, a template raising on a system turn
        raise ChatTemplateError(f"model.chat_template cannot render a prompt: {error}") from None
    if with_prompt == without:
        raise ChatTemplateError(
            "model.chat_template has no generation prompt (it renders the same with add_generation_prompt=True "
            "and False), so the model would have to write the assistant header itself: use a template with an "
            "'{% if add_generation_prompt %}' block, or model.chat_template: none"
        )


def end_of_turn_ids(tokenizer, system_prompt: str | None) -> list[int]:
    """The special token the template writes right after an assistant turn's content (``<|im_end|>``,
    ``<|eot_id|>``), if it writes one; found by rendering a probe reply."""
    messages = [*chat_messages("1+1=", system_prompt), {"role": "assistant", "content": PROBE_REPLY}]
    try:
        text = _checked_render(tokenizer, messages)
    except ChatTemplateError:
        raise
    except Exception:  # noqa: BLE001 - a template that refuses assistant turns: EOS is the only stop
        return []
    _, found, after = text.rpartition(PROBE_REPLY)
    if not found:
        return []
    ids = tokenizer(after, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    return ids[:1] if ids and ids[0] in special else []
