"""Named prompt templates (model.prompt_template: none | qwen_math | r1): the exact strings of Dr. GRPO's code,
on the plain path and the chat path, with the lint where a template cannot apply, and a micro run on each path
(which also shows the reflection-word rates logged on the chat path only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.analysis.lint import lint_config
from workbench.cli.main import app
from workbench.config import ModelConfig, RunConfig, TaskConfig
from workbench.models import load_policy
from workbench.rollout.prompts import resolve_prompt_format
from workbench.tasks.templates import PROMPT_TEMPLATES

# sail-sg/understand-r1-zero train_zero_math.py @ 14046dca, copied by hand: apply_*_template("What is 1+1?")
QUESTION = "What is 1+1?"
QWEN_MATH = (
    "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"
)
R1 = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The "
    "Assistant first thinks about the reasoning process in the mind and then provides the User with the answer. "
    "The reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n"
    "User: What is 1+1?\nAssistant: <think>"
)


def test_the_three_templates_render_the_published_strings():
    assert set(PROMPT_TEMPLATES) == {"none", "qwen_math", "r1"}
    rendered = {
        name: ModelConfig(builtin="tiny", prompt_template=name).template_text.format(prompt=QUESTION)
        for name in PROMPT_TEMPLATES
    }
    assert rendered == {"none": QUESTION, "qwen_math": QWEN_MATH, "r1": R1}
    # a question with braces stays as written: format fills {prompt} once and never reads the value's braces
    assert ModelConfig(builtin="tiny", prompt_template="qwen_math").template_text.format(
        prompt="{x} + {0}"
    ) == QWEN_MATH.replace(QUESTION, "{x} + {0}")


def test_free_text_still_works_and_an_unknown_name_lists_the_templates():
    assert ModelConfig(builtin="tiny", prompt_template="Q: {prompt}\nA:").template_text == "Q: {prompt}\nA:"
    with pytest.raises(ValueError, match="none, qwen_math, r1"):
        ModelConfig(builtin="tiny", prompt_template="qwen")
    with pytest.raises(ValueError, match="only one"):  # no attribute lookups: nothing in a template runs
        ModelConfig(builtin="tiny", prompt_template="{prompt} {prompt.__class__}")


def test_none_is_the_default_text_so_the_default_run_and_its_cached_model_are_unchanged():
    default = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    assert ModelConfig(builtin="tiny", prompt_template="none").template_text == default.model.template_text
    assert default.model.prompt_template == "{prompt}"


def test_plain_path_is_the_whole_input_and_the_chat_path_wraps_it_as_the_user_turn(qwen2_chat_dir):
    _, tokenizer = load_policy(ModelConfig(path=str(qwen2_chat_dir)), TaskConfig(), progress=False)
    plain = resolve_prompt_format(ModelConfig(path=str(qwen2_chat_dir), prompt_template="qwen_math"), tokenizer)
    assert plain.render(QUESTION) == QWEN_MATH
    chat = resolve_prompt_format(
        ModelConfig(path=str(qwen2_chat_dir), chat_template="auto", prompt_template="none"), tokenizer, qwen2_chat_dir
    )
    assert f"<|im_start|>user\n{QUESTION}<|im_end|>" in chat.render(QUESTION)
    wrapped = RunConfig.model_validate(
        {"model": {"path": str(qwen2_chat_dir), "chat_template": "auto", "prompt_template": "qwen_math"}}
    )
    assert [f.knob for f in lint_config(wrapped)] == ["model.prompt_template=qwen_math"]  # wrapped twice: lint
    ok = wrapped.model_copy(update={"model": wrapped.model.model_copy(update={"chat_template": "none"})})
    assert "model.prompt_template=qwen_math" not in [f.knob for f in lint_config(ok)]


@pytest.mark.slow
def test_micro_runs_on_the_plain_and_the_chat_path(workdir, qwen2_chat_dir):
    data = Path(__file__).parent / "data" / "gsm8k_mini.jsonl"
    chat_model = {"builtin": None, "path": str(qwen2_chat_dir), "chat_template": "auto", "prompt_template": "none"}
    variants = {
        "r1": {"model": {"prompt_template": "r1"}},
        "qwen_math": {"model": {"prompt_template": "qwen_math"}},
        "chat_none": {
            "model": chat_model,
            "task": {
                "name": "jsonl",
                "path": str(data),
                "eval_path": str(data),
                "answer_format": "gsm8k",
                "eval_size": 4,
            },
        },
    }
    base = micro_run_config(rollout={"steps": 1, "eval_every": 1, "prompts_per_step": 2, "group_size": 2})
    (workdir / "templates.yaml").write_text(yaml.safe_dump({"name": "templates", "base": base, "variants": variants}))
    result = CliRunner().invoke(app, ["run", str(workdir / "templates.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    runs = client.search_runs(
        [client.get_experiment_by_name("templates").experiment_id], "tags.`workbench.role` = 'run'"
    )
    assert {r.data.tags["workbench.variant"]: r.info.status for r in runs} == dict.fromkeys(variants, "FINISHED")
    params = {r.data.tags["workbench.variant"]: r.data.params for r in runs}
    assert params["r1"]["model.prompt_template"] == "r1" and params["qwen_math"]["model.prompt_template"] == "qwen_math"
    metrics = {r.data.tags["workbench.variant"]: r.data.metrics for r in runs}
    # reflection words: logged on the chat-model path, not applicable (absent) on the tiny character model
    assert {"behaviour/reflection_rate", "eval/reflection_rate"} <= set(metrics["chat_none"])
    assert "behaviour/reflection_rate" not in metrics["r1"]
