"""The scratchpad task: hand-checked problems, determinism, disjoint splits, and worked solutions
that math-verify accepts and that vary in length."""

import itertools
import random
import statistics
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.config import TaskConfig
from workbench.models.sft import sft_batch
from workbench.reward._worker import math_verify_scorer
from workbench.tasks import Problem, ScratchpadTask, build_task
from workbench.tasks.scratchpad import count_prompts, worked_solution


def evaluate(prompt: str) -> int:
    """Left-to-right sum of a ``a+b-c=`` prompt, written independently of the task's generator."""
    total, sign, digits = 0, 1, ""
    for ch in prompt.rstrip("=") + "+":
        if ch.isdigit():
            digits += ch
        else:
            total, sign, digits = total + sign * int(digits), (1 if ch == "+" else -1), ""
    return total


@pytest.mark.parametrize(
    "operands, ops, solution",
    [
        ([17, 5, 9, 40], ["+", "-", "+"], "17+5=22,22-9=13,13+40=53,\\boxed{53}"),
        ([3, 4], ["+"], "3+4=7,\\boxed{7}"),
        ([90, 90], ["-"], "90-90=0,\\boxed{0}"),
    ],
)
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


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ops": "*"}, "ops"),
        ({"ops": ""}, "ops"),
        ({"digits": 0}, "digits"),
        ({"operands": 1}, "operands"),
        ({"digits": 1, "operands": 2, "ops": "+", "eval_size": 50}, "too few training problems"),
    ],
)
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


def enumerate_prompts(digits: int, operands: int, ops: str) -> dict[str, Fraction]:
    """Every prompt the task can draw, with its exact draw probability, by brute force: 2..operands numbers
    below 10**digits joined by ops, kept when every left-to-right running total is >= 0. Probability as
    ``_draw`` makes it: a uniform operand count, a uniform first number, then per operator a uniform op and
    a uniform number up to 10**digits - 1 (after '+') or up to min(that, the running total) (after '-')."""
    n, out = 10**digits, {}
    for count in range(2, operands + 1):
        for numbers in itertools.product(range(n), repeat=count):
            for signs in itertools.product(ops, repeat=count - 1):
                prompt = "".join(str(a) + op for a, op in zip(numbers, [*signs, "="], strict=True))
                prefixes = [prompt[:i] for i, ch in enumerate(prompt) if ch in "+-="]
                totals = [evaluate(prefix) for prefix in prefixes]
                if min(totals) < 0:
                    continue
                probability = Fraction(1, operands - 1) * Fraction(1, n)
                for sign, before in zip(signs, totals, strict=False):
                    probability *= Fraction(1, len(ops)) * Fraction(1, n if sign == "+" else min(n - 1, before) + 1)
                out[prompt] = probability
    return out


@pytest.mark.parametrize(
    "digits, operands, ops",
    [
        (1, 2, "+"),
        (1, 2, "+-"),
        (1, 3, "+-"),
        (1, 3, "-"),
        (1, 4, "-"),
        (2, 2, "+-"),
        (2, 2, "-"),
    ],
)
def test_counted_prompt_space_equals_the_enumerated_one(digits, operands, ops):
    space = enumerate_prompts(digits, operands, ops)
    assert sum(space.values()) == 1  # exact (Fractions): the enumeration is the whole draw distribution
    assert count_prompts(digits, operands, ops, cap=10**9) == len(space)
    assert count_prompts(digits, operands, ops, cap=len(space)) == len(space)  # a count at the cap is the cap
    assert count_prompts(digits, operands, ops, cap=len(space) - 1) == len(space) - 1


def test_the_shipped_config_draws_2760_prompts_and_nothing_else():
    """digits=1, operands=3, ops '+-' (the studies' task): 155 two-operand and 2,605 three-operand prompts.
    200,000 draws reach every one: the rarest has probability 1/8000, so P(any missed) <= 2760·e^-25."""
    space = enumerate_prompts(1, 3, "+-")
    assert len(space) == 2760 == count_prompts(1, 3, "+-", cap=10**9)
    task = ScratchpadTask(digits=1, operands=3, ops="+-", eval_size=10)
    rng = random.Random(0)
    drawn = {task._draw(rng).prompt for _ in range(200_000)}
    assert drawn == set(space)
    assert min(space.values()) == Fraction(1, 8000)


def test_eval_size_is_capped_at_a_quarter_of_the_real_space():
    ScratchpadTask(digits=1, operands=3, ops="+-", eval_size=690)  # 2760 // 4
    with pytest.raises(ValueError, match=r"task.eval_size=691 .* 2,760 distinct prompts .*\(690\)"):
        ScratchpadTask(digits=1, operands=3, ops="+-", eval_size=691)


def test_a_study_with_too_large_an_eval_set_is_refused_at_plan(tmp_path):
    """`workbench plan` (the config check) refuses it with one line naming the field and the file, exit 2."""
    from typer.testing import CliRunner

    from workbench.cli.main import app

    study = tmp_path / "big_eval.yaml"
    study.write_text(
        "name: big-eval\nbase:\n  model: {builtin: tiny}\n"
        "  task: {name: scratchpad, digits: 1, operands: 3, eval_size: 691}\n"
    )
    result = CliRunner().invoke(app, ["plan", str(study)], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "big_eval.yaml" in result.output and "task.eval_size=691" in result.output
    assert "2,760 distinct prompts" in result.output and "Traceback" not in result.output
    with pytest.raises(ValueError, match="task.eval_size=691"):
        TaskConfig(name="scratchpad", digits=1, operands=3, eval_size=691)
    TaskConfig(name="scratchpad", digits=1, operands=3, eval_size=690)


def test_an_unset_eval_size_fits_a_small_task_and_plans(tmp_path):
    """#53: 1-digit addition draws 100 distinct prompts, so the default 200 cannot hold out a quarter;
    unset, the eval size becomes that quarter (25) and the study plans; set, 200 is still refused.
    A task with room keeps 200 (so every shipped study's run keys stay as they were)."""
    from typer.testing import CliRunner

    from workbench.cli.main import app

    assert TaskConfig(digits=1, ops="+").eval_size == 25  # 10 × 10 pairs // 4
    assert TaskConfig(name="scratchpad", digits=1, operands=2, ops="+").eval_size == 25  # 100 prompts // 4
    assert TaskConfig().eval_size == 200  # 2-digit ±: 19,900 prompts
    with pytest.raises(ValueError, match=r"task.eval_size=200 .* 100 distinct prompts"):
        TaskConfig(digits=1, ops="+", eval_size=200)
    study = tmp_path / "small.yaml"
    study.write_text("name: small\nbase:\n  model: {builtin: tiny}\n  task: {digits: 1, ops: '+'}\n")
    result = CliRunner().invoke(app, ["plan", str(study), "--format", "json"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output


def test_the_shipped_eval_set_takes_the_documented_share_of_training_draws():
    """An eval set of distinct prompts takes the likeliest first: the figures docs/findings.md and
    studies/scratchpad.yaml state for eval_size 100 and 500 (exact probabilities, so the only
    tolerance is the rounding of the stated figures)."""
    space = enumerate_prompts(1, 3, "+-")
    shares = {}
    for size in (100, 500):
        held_out = {p.prompt for p in ScratchpadTask(digits=1, operands=3, ops="+-", eval_size=size).eval_problems()}
        two_operand = {p for p in space if p.count("+") + p.count("-") == 1}
        taken = float(sum(space[p] for p in held_out))
        train_two = float(sum(space[p] for p in two_operand - held_out)) / (1 - taken)
        shares[size] = (round(taken, 2), round(train_two, 2), len(held_out & two_operand))
        print(
            f"eval_size {size}: {taken:.3f} of draws held out, two-operand share of training draws "
            f"{train_two:.3f}, {len(held_out & two_operand)}/155 two-operand prompts in the eval set"
        )
    assert shares == {100: (0.23, 0.37, 52), 500: (0.59, 0.08, 142)}
