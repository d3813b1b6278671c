"""Chat models as labs use them: the template wraps the prompt, generation stops at the end of the turn,
and the learner scores exactly the token ids the sampler produced after the templated prompt. Models and
tokenizers load as a run loads them (``workbench.models.load_policy``); the reference token ids come from
each directory's own tokenizer, rebuilt in memory (tests/chat/models.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.chat.models import LLAMA3_CHAT_TEMPLATE, llama3_chat_tokenizer, qwen2_chat_tokenizer
from tests.tolerance import order_tolerance, reduction_depth
from workbench.cli.main import app
from workbench.config import LearnerConfig, ModelConfig, SamplerConfig, TaskConfig
from workbench.models import load_policy
from workbench.reward import AnswerVerifier
from workbench.reward._worker import ANSWER_SCORERS
from workbench.reward.rollouts import score_rollouts
from workbench.rollout.hf import HFSampler
from workbench.rollout.prompts import ChatTemplateError, chat_messages, resolve_prompt_format
from workbench.tasks import Problem
from workbench.train.learner import TorchLearner

PROBLEMS = [
    Problem("What is 1,000 + 24?", "1024"),
    Problem("Tom has $20 and spends $15. How much is left?", "5"),
    Problem("Add 7 and 8.", "15"),
]
SYSTEM = "Answer after ####."


def load(path):
    """(model, tokenizer) as a run loads them."""
    return load_policy(ModelConfig(path=str(path)), TaskConfig(), progress=False)


def chat_format(path, tokenizer, **model):
    return resolve_prompt_format(ModelConfig(path=str(path), **({"chat_template": "auto"} | model)), tokenizer, path)


OWN_TOKENIZER = {"qwen2": qwen2_chat_tokenizer, "llama3": llama3_chat_tokenizer}


def template_ids(family: str, problem: Problem, system: str | None) -> list[int]:
    """The reference for the sampler's ids: transformers' apply_chat_template(tokenize=True) of the model
    directory's own tokenizer (the object the directory was saved from, not one loaded back from it)."""
    return list(
        OWN_TOKENIZER[family]().apply_chat_template(
            chat_messages(problem.prompt, system), add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )


@pytest.mark.parametrize(("family", "end_of_turn"), [("qwen2", "<|im_end|>"), ("llama3", "<|eot_id|>")])
def test_auto_template_wraps_the_prompt_and_stops_at_the_end_of_turn_as_well_as_eos(
    family, end_of_turn, qwen2_chat_dir, llama3_chat_dir
):
    path = {"qwen2": qwen2_chat_dir, "llama3": llama3_chat_dir}[family]
    _, tokenizer = load(path)
    fmt = chat_format(path, tokenizer, system_prompt=SYSTEM)
    assert tokenizer.convert_ids_to_tokens(list(fmt.stop_ids)) == [tokenizer.eos_token, end_of_turn]
    text = fmt.render("What is 2+2?")
    assert text == tokenizer.apply_chat_template(
        chat_messages("What is 2+2?", SYSTEM), tokenize=False, add_generation_prompt=True
    )
    assert SYSTEM in text and text.count("What is 2+2?") == 1
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == template_ids(family, Problem("What is 2+2?", "4"), SYSTEM)
    if family == "llama3":  # the template writes BOS itself: exactly one, not two
        assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1


def test_prompt_template_is_the_user_turn(qwen2_chat_dir):
    _, tokenizer = load(qwen2_chat_dir)
    fmt = chat_format(qwen2_chat_dir, tokenizer, prompt_template="Q: {prompt} Answer after ####.")
    assert "<|im_start|>user\nQ: Add 7 and 8. Answer after ####.<|im_end|>" in fmt.render("Add 7 and 8.")
    assert fmt.render("x").endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_sampler_and_learner_see_the_same_token_ids(family, qwen2_chat_dir, llama3_chat_dir):
    """The ids the sampler's model ran on are those of apply_chat_template of the directory's own tokenizer
    (for the Qwen2 config, not of the Qwen2Tokenizer transformers' AutoTokenizer substitutes); the learner's
    forward runs on exactly prompt ids + sampled ids, and its logprobs are the sampler's."""
    path = {"qwen2": qwen2_chat_dir, "llama3": llama3_chat_dir}[family]
    model, tokenizer = load(path)
    fmt = chat_format(path, tokenizer, system_prompt=SYSTEM)
    learner = TorchLearner(model, LearnerConfig(forward="full"))  # full: one forward over the rows as given
    seen: list[torch.Tensor] = []
    hook = learner.model.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs["input_ids"]), with_kwargs=True
    )
    sampler = HFSampler(learner.model, tokenizer, SamplerConfig(max_new_tokens=12), fmt)
    group = 3
    rollouts = sampler.generate(PROBLEMS, group, temperature=1.0, seed=0)
    prefill = seen[0]  # the decode loop's first forward: each distinct prompt once, left-padded
    for row, problem in enumerate(PROBLEMS):
        real = rollouts.prompt_mask[row * group].bool()
        assert rollouts.prompt_ids[row * group][real].tolist() == template_ids(family, problem, SYSTEM)
        assert torch.equal(prefill[row].cpu(), rollouts.prompt_ids[row * group])
    seen.clear()
    with torch.no_grad():
        logp = learner.logprobs(rollouts, slice(None), 1.0)[0].cpu()
    hook.remove()
    (learner_ids,) = seen
    assert torch.equal(learner_ids.cpu(), rollouts.input_ids)
    on = rollouts.mask.bool()
    # Error analysis (tests/tolerance.py): the KV-cached decode and the teacher-forced forward sum the same
    # float32 products in another order: <= (reduction depth + positions) x eps32 x the logits' size.
    tol = order_tolerance(
        reduction_depth(learner.model) + rollouts.input_ids.shape[1], float(logp[on].abs().max()) + 1.0
    )
    assert torch.allclose(logp[on], rollouts.sampler_logp[on], atol=tol, rtol=0)


@pytest.mark.parametrize("stop", ["<|im_end|>", "<|endoftext|>"])
def test_a_completion_ends_at_its_first_end_of_turn_or_eos(qwen2_chat_dir, stop):
    model, tokenizer = load(qwen2_chat_dir)
    fmt = chat_format(qwen2_chat_dir, tokenizer)
    stop_id = tokenizer.convert_tokens_to_ids(stop)

    def likelier_stop(module, args, output):  # the random model rarely ends; make the stop token likely
        output.logits[..., stop_id] += 6.0
        return output

    model.register_forward_hook(likelier_stop)
    r = HFSampler(model, tokenizer, SamplerConfig(max_new_tokens=16), fmt).generate(
        PROBLEMS, 4, temperature=1.0, seed=1
    )
    ended = ~r.truncated
    assert ended.sum() >= 6  # of 12: the +6 logit makes the stop token far likelier than any other
    for ids, mask, done, text in zip(r.completion_ids, r.mask, ended, r.texts, strict=True):
        n = int(mask.sum())
        stops = [i for i, t in enumerate(ids[:n].tolist()) if t in fmt.stop_ids]
        if done:  # the mask covers the completion up to and including its first stop token, nothing after
            assert stops == [n - 1] and ids[n - 1] == stop_id
        else:
            assert stops == [] and n == 16
        assert "<|im_end|>" not in text and "<|endoftext|>" not in text


def test_auto_without_a_template_in_the_directory_is_a_clear_error(qwen2_chat_dir, tmp_path):
    bare = tmp_path / "no-template"
    shutil.copytree(qwen2_chat_dir, bare)
    (bare / "chat_template.jinja").unlink()
    _, tokenizer = load(bare)
    with pytest.raises(
        ChatTemplateError,
        match=r"model.chat_template: auto, but .*no-template has no chat "
        r"template .* set model.chat_template: none",
    ):
        chat_format(bare, tokenizer)
    plain = chat_format(bare, tokenizer, chat_template="none")  # the documented way out: the prompt as is
    assert plain.render("1+1=") == "1+1=" and plain.stop_ids == (tokenizer.eos_token_id,)


def test_a_template_without_a_generation_prompt_is_refused(qwen2_chat_dir):
    _, tokenizer = load(qwen2_chat_dir)
    no_generation_prompt = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    with pytest.raises(ChatTemplateError, match="has no generation prompt"):
        chat_format(qwen2_chat_dir, tokenizer, chat_template=no_generation_prompt)


def test_a_template_given_inline_or_as_a_file_replaces_the_directorys(qwen2_chat_dir, tmp_path):
    _, tokenizer = load(qwen2_chat_dir)
    inline = chat_format(qwen2_chat_dir, tokenizer, chat_template=LLAMA3_CHAT_TEMPLATE.replace("bos_token", "''"))
    assert inline.render("hi").endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    file = tmp_path / "chatml.jinja"
    file.write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    _, tokenizer = load(qwen2_chat_dir)
    from_file = chat_format(qwen2_chat_dir, tokenizer, chat_template=str(file))
    assert from_file.render("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # no Qwen system turn
    with pytest.raises(ChatTemplateError, match="neither auto, none, a Jinja template .* nor an existing file"):
        chat_format(qwen2_chat_dir, tokenizer, chat_template=str(tmp_path / "missing.jinja"))


def test_chat_settings_that_cannot_act_are_refused_at_load():
    with pytest.raises(ValueError, match="chat_template applies to model.path"):
        ModelConfig(builtin="tiny", chat_template="auto")
    with pytest.raises(ValueError, match="system_prompt needs a chat template"):
        ModelConfig(path="/m", system_prompt="Be brief.")


def test_run_refuses_a_missing_template_in_one_line_with_exit_code_2(qwen2_chat_dir, workdir):
    bare = workdir / "no-template"
    shutil.copytree(qwen2_chat_dir, bare)
    (bare / "chat_template.jinja").unlink()
    study = Path(__file__).parents[2] / "studies" / "qwen_gsm8k.yaml"
    data = Path(__file__).parent / "data" / "gsm8k_mini.jsonl"
    settings = [
        f"model.path={bare}",
        f"task.path={data}",
        f"task.eval_path={data}",
        "sampler.backend=hf",
        "learner.backend=torch",
        "learner.zero_stage=0",
    ]
    result = CliRunner().invoke(app, ["run", str(study), "--quiet", *[a for s in settings for a in ("--set", s)]])
    assert result.exit_code == 2, result.output
    assert "model.chat_template: auto, but" in result.output and "set model.chat_template: none" in result.output
    assert not (workdir / "mlflow.db").exists()  # refused before any run opened
    planned = CliRunner().invoke(app, ["plan", str(study), *[a for s in settings for a in ("--set", s)]])
    assert planned.exit_code == 0 and "note: model.chat_template: auto, but" in planned.output


def test_a_gsm8k_answer_sampled_after_the_template_is_extracted_and_verified(qwen2_chat_dir):
    """Sampling path to reward: a model steered to write "#### 1,000" and end its turn gets a completion text
    without the stop token, which the gsm8k verifier reads as 1000 against a GSM8K gold solution."""
    model, tokenizer = load(qwen2_chat_dir)
    fmt = chat_format(qwen2_chat_dir, tokenizer)
    script = [
        *tokenizer("#### 1,000", add_special_tokens=False)["input_ids"],
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    calls = []

    def write_the_script(module, args, output):  # one forward per generated token (the first is the prefill)
        step = min(len(calls), len(script) - 1)
        calls.append(step)
        output.logits[:, -1, script[step]] += 1e4
        return output

    model.register_forward_hook(write_the_script)
    problems = [
        Problem("A farm has 250 rows of 4 plants. How many plants?", "250 * 4 = 1000 plants.\n#### 1000"),
        Problem("Same farm, one more plant?", "#### 1001"),
    ]
    rollouts = HFSampler(model, tokenizer, SamplerConfig(max_new_tokens=16), fmt).generate(
        problems, 2, temperature=1.0, seed=0
    )
    assert rollouts.texts == ["#### 1,000"] * 4 and not rollouts.truncated.any()
    assert rollouts.lengths.tolist() == [len(script)] * 4  # the end-of-turn token is the completion's last
    with AnswerVerifier(timeout_s=2.0, scorer=ANSWER_SCORERS["gsm8k"]) as verifier:
        scored = score_rollouts(verifier, rollouts, shaping=())
    assert scored.correct.tolist() == [True, True, False, False]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # 10^10 loop iterations: hangs for hours without the budget
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
            "{% if add_generation_prompt %}A:{% endif %}",
            r"did not render a one-line prompt within 5 s",
        ),
        # a string doubled 25 times: 2^25 = 33,554,432 characters, plus "A:", for one prompt
        (
            "{% set s = namespace(x='a') %}{% for i in range(25) %}{% set s.x = s.x ~ s.x %}{% endfor %}{{ s.x }}"
            "{% if add_generation_prompt %}A:{% endif %}",
            r"renders a one-line prompt as 33,554,434 characters",
        ),
    ],
)
def test_a_template_that_loops_or_explodes_is_refused_in_one_line_within_its_budget(qwen2_chat_dir, template, expected):
    """#53: a CPU-heavy chat template hung `plan`. The checks render it within a time budget (5 s) and
    a size budget (10^6 characters) and refuse it in one line naming model.chat_template."""
    import time

    _, tokenizer = load(qwen2_chat_dir)
    started = time.monotonic()
    with pytest.raises(ChatTemplateError, match=expected):
        chat_format(qwen2_chat_dir, tokenizer, chat_template=template)
    assert time.monotonic() - started < 60  # the budget, plus a loaded machine's slack
