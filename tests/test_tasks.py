import json
import random

import pytest

from workbench.tasks import ArithmeticTask, JsonlTask
from workbench.tasks.arithmetic import count_prompts


def evaluate(prompt: str) -> int:
    for op in "+-*/":
        if op in prompt:
            a, b = prompt.rstrip("=").split(op)
            a, b = int(a), int(b)
            ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b}  # noqa: B023 - called in this iteration
            return ops[op]()
    raise AssertionError(prompt)


@pytest.mark.parametrize("ops", ["+", "-", "*", "/", "+-*/"])
def test_answers_are_correct_and_integral(ops):
    task = ArithmeticTask(digits=2, ops=ops, eval_size=50)
    for p in task.sample_train(200, random.Random(1)) + task.eval_problems():
        assert int(p.answer) == evaluate(p.prompt)
        assert int(p.answer) >= 0  # subtraction is ordered, division exact
        assert p.solution == f"\\boxed{{{p.answer}}}"
        if "/" in p.prompt:
            a, b = p.prompt.rstrip("=").split("/")
            assert int(a) % int(b) == 0


def test_digits_bound_operands():
    task = ArithmeticTask(digits=1, ops="+", eval_size=10)
    for p in task.sample_train(100, random.Random(0)):
        a, b = p.prompt.rstrip("=").split("+")
        assert 0 <= int(a) <= 9 and 0 <= int(b) <= 9


def test_splits_are_disjoint_and_eval_is_fixed():
    task = ArithmeticTask(digits=2, ops="+-", seed=3, eval_size=100)
    eval_prompts = {p.prompt for p in task.eval_problems()}
    assert len(eval_prompts) == 100
    train = task.sample_train(5000, random.Random(0))
    assert not eval_prompts & {p.prompt for p in train}
    again = ArithmeticTask(digits=2, ops="+-", seed=3, eval_size=100)
    assert again.eval_problems() == task.eval_problems()
    assert ArithmeticTask(digits=2, ops="+-", seed=4, eval_size=100).eval_problems() != task.eval_problems()


def test_train_sampling_follows_the_callers_rng():
    task = ArithmeticTask()
    assert task.sample_train(20, random.Random(7)) == task.sample_train(20, random.Random(7))


def test_arithmetic_space_is_the_set_of_prompts_it_draws():
    """digits=1: + and × every pair (100 each), − a >= b (55), ÷ b >= 1 (90). 100,000 draws reach all 345:
    the rarest (a '-' with a = b) has probability 1/400, so P(any missed) <= 345·e^-250."""
    task = ArithmeticTask(digits=1, ops="+-*/", eval_size=10)
    rng = random.Random(0)
    drawn = {task._draw(rng).prompt for _ in range(100_000)}
    assert len(drawn) == count_prompts(1, "+-*/") == 345
    assert count_prompts(1, "-") == 55
    ArithmeticTask(digits=1, ops="-", eval_size=13)
    with pytest.raises(ValueError, match=r"task.eval_size=14 .* 55 distinct prompts"):
        ArithmeticTask(digits=1, ops="-", eval_size=14)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ops": "+^"}, "ops"),
        ({"ops": ""}, "ops"),
        ({"digits": 0}, "digits"),
        ({"digits": 1, "ops": "+", "eval_size": 50}, "too few training problems"),
    ],
)
def test_bad_arithmetic_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ArithmeticTask(**kwargs)


def test_jsonl_split_and_errors(tmp_path):
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(10)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = JsonlTask(str(path), eval_size=3)
    assert len(task.eval_problems()) == 3
    train_prompts = {p.prompt for p in task.sample_train(200, random.Random(0))}
    assert not train_prompts & {p.prompt for p in task.eval_problems()}
    assert len(train_prompts) == 7

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "answer": "1"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: invalid JSON"):
        JsonlTask(str(bad))
    missing_key = tmp_path / "nokey.jsonl"
    missing_key.write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match=r"nokey.jsonl:1: each line needs"):
        JsonlTask(str(missing_key))
    with pytest.raises(FileNotFoundError, match="task file not found"):
        JsonlTask(str(tmp_path / "nope.jsonl"))
