"""Named prompt templates: ``model.prompt_template: none | qwen_math | r1`` (or any text with ``{prompt}``).

Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783,
§2.1 and its template ablation) trains Qwen2.5-Math base models under three templates and finds "no
template" best for them: much of RL's early gain corrects a model–template mismatch. The exact strings are
those of its code, ``sail-sg/understand-r1-zero`` ``train_zero_math.py`` (``apply_qwen_math_template``,
``apply_r1_template``, ``apply_no_template``; ``--prompt_template {qwen_math, no, r1}``), read at commit
14046dcaa53d47b3a5e3217c63e649d8862147d9, with ``{{``/``}}`` for the literal braces of ``\\boxed{}``
because a template is filled with ``str.format(prompt=...)`` (no code runs: ``{prompt}`` is the only
placeholder :func:`workbench.config.check_prompt_template` admits, so no attribute or index lookups).

Each is a registered unit declaring where it applies: all three were written for the plain path
(``model.chat_template: none``), where the text *is* the model's input; ``qwen_math`` is itself a Qwen chat
turn and ``r1`` a base-model completion prompt, so inside a chat template both would be wrapped again
(``workbench lint`` warns: rule ``template_on_the_chat_path``).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.registry import Registry


@dataclass(frozen=True)
class PromptTemplate:
    """A named prompt template: its ``str.format`` text, its source, and whether it suits a chat template."""

    text: str  # with {prompt}; literal braces doubled
    source: str
    chat_path: str = ""  # why it should not go inside a chat template; "" = it applies on both paths


PROMPT_TEMPLATES: Registry[PromptTemplate] = Registry("prompt template")

UNDERSTAND_R1_ZERO = "sail-sg/understand-r1-zero train_zero_math.py (Dr. GRPO, arXiv:2503.20783)"

PROMPT_TEMPLATES.register("none")(
    PromptTemplate(text="{prompt}", source=f"apply_no_template, {UNDERSTAND_R1_ZERO}: the question as is")
)
PROMPT_TEMPLATES.register("qwen_math")(
    PromptTemplate(
        text=(
            "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{{}}.<|im_end|>\n"
            "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
        ),
        source=f"apply_qwen_math_template, {UNDERSTAND_R1_ZERO}",
        chat_path="it is already a Qwen chat turn (<|im_start|>…<|im_end|>): a chat template would wrap it twice",
    )
)
PROMPT_TEMPLATES.register("r1")(
    PromptTemplate(
        text=(
            "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
            "The Assistant first thinks about the reasoning process in the mind and then provides the User with the "
            "answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> "
            "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
            "</answer>.\nUser: {prompt}\nAssistant: <think>"
        ),
        source=f"apply_r1_template, {UNDERSTAND_R1_ZERO}",
        chat_path="it is a base-model completion prompt ending in 'Assistant: <think>': inside a chat template the "
        "assistant's turn would start after a user turn that already holds one",
    )
)


def template_text(setting: str) -> str:
    """The ``str.format`` text of ``model.prompt_template``: a registered name's text, else the setting itself."""
    return PROMPT_TEMPLATES.get(setting).text if setting in PROMPT_TEMPLATES else setting
