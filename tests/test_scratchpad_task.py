"""The scratchpad task: hand-checked problems, determinism, disjoint splits, and worked solutions
that math-verify accepts and that vary in length."""

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.config import TaskConfig
from workbench.models.sft import sft_batch
from workbench.reward._worker import math_verify_scorer
from workbench.tasks import Problem, ScratchpadTask, build_task
from workbench.tasks.scratchpad import worked_solution


def evaluate(prompt: str) -> int:
    """Left-to-right sum of a ``a+b-c=`` prompt, written independently of the task's generator."""
    total, sign, digits = 0, 1, ""
    for ch in prompt.rstrip("=") + "+":
        if ch.isdigit():
            digits += ch
        else:
            total, sign, digits = total + sign * int(digits), (1 if ch == "+" else -1), ""
    return total


@pytest.mark.parametrize("operands, ops, solution", [
    ([17, 5, 9, 40], ["+", "-", "+"], "17+5=22,22-9=13,13+40=53,\\boxed{53}"),
    ([3, 4], ["+"], "3+4=7,\\boxed{7}"),
    ([90, 90], ["-"], "90-90=0,\\boxed{0}"),
])
def test_worked_solution_by_hand(operands, ops, solution):
    assert worked_solution(operands, ops) == solution


def test_generated_problems_are_right_and_never_negative():
    task = ScratchpadTask(digits=2, operands=5, ops="+-", eval_size=50)
    for p in task.sample_train(500, random.Random(1)) + task.eval_problems():
        assert int(p.answer) == evaluate(p.prompt) >= 0
        assert p.solution.endswith(f"\\boxed{{{p.answer}}}")
        count = p.prompt.count("+") + p.prompt.count("-") + 1
        assert 2 <= count <= 5
        if p.solution != f"\\boxed{{{p.answer}}}":  # worked: one step per operator, each running total >= 0
            steps = p.solution.split(",")[:-1]
            assert len(steps) == count - 1
            assert all(int(step.split("=")[1]) >= 0 for step in steps)
            assert steps[-1].split("=")[1] == p.answer


def test_digits_and_operands_bound_the_problems():
    task = ScratchpadTask(digits=1, operands=3, ops="+", eval_size=20)
    for p in task.sample_train(300, random.Random(0)):
        numbers = p.prompt.rstrip("=").split("+")
        assert 2 <= len(numbers) <= 3 and all(0 <= int(n) <= 9 for n in numbers)


def test_same_seed_same_problems_and_disjoint_splits():
    task = ScratchpadTask(seed=3, eval_size=100)
    assert ScratchpadTask(seed=3, eval_size=100).eval_problems() == task.eval_problems()
    assert ScratchpadTask(seed=4, eval_size=100).eval_problems() != task.eval_problems()
    assert task.sample_train(50, random.Random(7)) == task.sample_train(50, random.Random(7))
    eval_prompts = {p.prompt for p in task.eval_problems()}
    assert len(eval_prompts) == 100
    assert not eval_prompts & {p.prompt for p in task.sample_train(5000, random.Random(0))}


def test_solutions_vary_in_form_and_length():
    problems = ScratchpadTask().sample_train(2000, random.Random(0))
    terse = [p for p in problems if p.solution == f"\\boxed{{{p.answer}}}"]
    # Half are terse by construction: 2000 Bernoulli(0.5) draws lie within ±4.5 sd (±100) of 1000.
    assert 900 <= len(terse) <= 1100
    lengths = [len(p.solution) for p in problems]
    assert min(lengths) <= 9 and max(lengths) >= 40  # \boxed{7} ... four operands worked
    assert statistics.pstdev(lengths) > 5


@pytest.mark.parametrize("seed", [0, 1])
def test_math_verify_accepts_every_solution_and_rejects_a_wrong_total(seed):
    for p in ScratchpadTask(seed=seed).sample_train(40, random.Random(seed)):
        assert math_verify_scorer(p.solution, p.answer, 5.0)[0], p
        wrong = p.solution.replace(f"\\boxed{{{p.answer}}}", f"\\boxed{{{int(p.answer) + 1}}}")
        assert not math_verify_scorer(wrong, p.answer, 5.0)[0], wrong


def test_probe_judges_the_final_boxed_answer_in_either_form():
    task = ScratchpadTask()
    p = Problem(prompt="17+5-9+40=", answer="53", solution="17+5=22,22-9=13,13+40=53,\\boxed{53}")
    assert task.probe_correct("\\boxed{53}", p)
    assert task.probe_correct("17+5=22,22-9=13,13+40=53,\\boxed{53}", p)
    assert not task.probe_correct("17+5=22,\\boxed{22},\\boxed{50}", p)
    assert not task.probe_correct("53", p)


def test_tiny_tokenizer_covers_every_character_and_fits_the_budget():
    from workbench.models.tiny_context import TINY_MAX_POSITIONS
    from workbench.models.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    problems = ScratchpadTask(operands=4).sample_train(500, random.Random(0))
    input_ids, _, _ = sft_batch(tokenizer, problems, "{prompt}")
    assert (input_ids != tokenizer.unk_token_id).all()
    # The shipped studies' budget (max_new_tokens 64) leaves room above the longest worked solution.
    assert max(len(p.solution) for p in problems) + 1 <= 48 and 64 + 20 < TINY_MAX_POSITIONS


def test_config_builds_the_task_and_keeps_old_dumps_unchanged():
    task = build_task(TaskConfig(name="scratchpad", operands=3, digits=1, eval_size=20))
    assert isinstance(task, ScratchpadTask) and (task.operands, task.digits) == (3, 1)
    # An unset operands leaves the dump (the tiny model's cache key) exactly as before the field existed.
    assert "operands" not in TaskConfig().model_dump(mode="json")
    with pytest.raises(ValueError, match="task.operands applies to task 'scratchpad' only"):
        TaskConfig(operands=3)
    with pytest.raises(ValueError, match="takes ops from"):
        TaskConfig(name="scratchpad", ops="*")


@pytest.mark.parametrize("kwargs, match", [
    ({"ops": "*"}, "ops"), ({"ops": ""}, "ops"), ({"digits": 0}, "digits"), ({"operands": 1}, "operands"),
    ({"digits": 1, "operands": 2, "ops": "+", "eval_size": 50}, "too few training problems"),
])
def test_bad_scratchpad_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScratchpadTask(**kwargs)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 99), min_size=2, max_size=6), st.data())
def test_worked_solution_ends_in_the_left_to_right_total(operands, data):
    ops = ["+"] * (len(operands) - 1)
    ops = [data.draw(st.sampled_from("+-")) for _ in ops]
    text = worked_solution(operands, ops)
    prompt = "".join(str(a) + op for a, op in zip(operands, [*ops, "="], strict=True))
    assert text.endswith(f"\\boxed{{{evaluate(prompt)}}}")
    assert text.count("=") == len(ops)
