"""Cold-start supervised stage: teach the answer format from worked examples, stopping early.

RL needs a policy that is right sometimes but not always. Training stops as soon as greedy
accuracy on a fixed probe of *training* problems reaches a target, so the starting point is
"imperfect" by construction rather than by a lucky step count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from workbench.progress import Heartbeat, line_printed, progress_interval, since_last_line
from workbench.rollout.decode import decode
from workbench.tasks import Problem, Task


@dataclass
class SFTResult:
    steps: int
    final_loss: float
    probe_accuracy: float


def sft_batch(tokenizer, problems: list[Problem], template: str):
    """Right-padded prompt+solution+EOS sequences; labels only on the solution tokens."""
    rows, labels = [], []
    for p in problems:
        if p.solution is None:
            raise ValueError("cold-start SFT needs problems with a worked 'solution'")
        prompt_ids = tokenizer(template.format(prompt=p.prompt), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(p.solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        labels.append([-100] * len(prompt_ids) + answer_ids)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    label_t = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    return input_ids, attention, label_t


@torch.no_grad()
def probe_completions(model, tokenizer, probe: list[Problem], template: str, *, lean: bool = True) -> list[str]:
    """Greedy completions of the probe's prompts, with a budget of the longest worked solution + 2 tokens.

    ``lean`` runs the workbench's KV-cached decode loop (the sampler's ``decode: lean``), which picks the
    same greedy tokens as ``generate`` (the reference, ``lean=False``) in a fraction of the time: the
    probe runs every ``sft_check_every`` steps of the cold start."""
    model.eval()
    enc = tokenizer(
        [template.format(prompt=p.prompt) for p in probe], return_tensors="pt", padding=True, add_special_tokens=False
    )
    budget = max(len(p.solution or "") for p in probe) + 2
    if lean:
        out = decode(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            1,
            max_new_tokens=budget,
            temperature=0.0,
            top_p=1.0,
            stop_ids=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
        )[0]
    else:
        out = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=budget,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )[:, enc["input_ids"].shape[1] :]
    model.train()
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def probe_accuracy(model, tokenizer, probe: list[Problem], template: str, task: Task | None = None) -> float:
    """Greedy exact-match of the worked solution (cheap; the RL reward uses math-verify).

    A task whose solutions vary in form (terse or worked) judges a completion with its own
    ``probe_correct`` instead: any right form counts."""
    texts = probe_completions(model, tokenizer, probe, template)
    correct = getattr(task, "probe_correct", None) or (lambda text, p: text.strip() == p.solution)
    return sum(correct(t, p) for t, p in zip(texts, probe, strict=True)) / len(probe)


Rewrite = Callable[[Problem, random.Random], Problem]  # a problem's SFT solution in another form (data.prime)


def supervised_warmup(
    model,
    tokenizer,
    task: Task,
    template: str,
    *,
    max_steps: int,
    batch_size: int,
    lr: float,
    target_accuracy: float,
    check_every: int,
    rng: random.Random,
    progress: bool = True,
    rewrite: Rewrite | None = None,
    label: str = "building tiny model",
) -> SFTResult:
    """SFT on the task's worked solutions (or ``rewrite``'s forms of them) until the probe's greedy accuracy
    reaches ``target_accuracy`` or ``max_steps`` pass. The probe always judges the true answer."""
    probe = task.sample_train(128, random.Random("sft-probe"))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = 20  # linear warmup, then constant: the stop is decided by the probe, not a schedule
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    loss_value, accuracy, step = float("nan"), 0.0, 0
    # the bar tracks what ends the cold start, probe accuracy against its target; the step cap is a
    # safety limit, and a percentage (or ETA) of it would mislead (issue #32: "2 h 8 min", then done at 42%)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("probe acc {task.completed:.2f} / target {task.total:.2f}"),
        TextColumn("step {task.fields[step]} (cap {task.fields[cap]})"),
        TimeElapsedColumn(),
    )
    # Not on a terminal (a log file, CI, `make demo | tee`): a plain line every `progress_interval()`
    # seconds instead of the live bar, which would print nothing for the cold start's minutes (#53); the
    # heartbeat prints the last state when a step (a probe) runs past the interval.
    console = Console(stderr=True)
    plain = progress and not console.is_terminal
    every, started = progress_interval(), time.monotonic()
    done = 0  # steps finished, for the heartbeat's line

    def plain_line(step: int) -> None:
        elapsed = int(time.monotonic() - started)
        console.print(
            f"{time.strftime('%H:%M:%S')} {label}: cold-start SFT step {step} (cap {max_steps}), "
            f"loss {loss_value:.3f}, probe acc {accuracy:.2f} / target {target_accuracy:.2f}, "
            f"{elapsed // 60}:{elapsed % 60:02d} elapsed (it ends at the target, so no ETA)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        line_printed()

    heartbeat = Heartbeat(every if plain else 0.0, lambda: plain_line(done))
    with heartbeat, Progress(*columns, disable=not progress or plain, transient=True) as bar:
        job = bar.add_task(f"{label} (cold-start SFT)", total=target_accuracy, step=0, cap=max_steps)
        for step in range(1, max_steps + 1):
            problems = task.sample_train(batch_size, rng)
            if rewrite is not None:
                problems = [rewrite(p, rng) for p in problems]
            input_ids, attention, labels = sft_batch(tokenizer, problems, template)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            loss_value = loss.item()
            done = step
            if step % check_every == 0:
                accuracy = probe_accuracy(model, tokenizer, probe, template, task)
                if accuracy >= target_accuracy:
                    break
            bar.update(
                job,
                completed=min(accuracy, target_accuracy),
                step=step,
                description=f"{label} (SFT loss {loss_value:.3f})",
            )
            if plain and (step == 1 or since_last_line() >= every):  # the clock the heartbeat and a study share
                plain_line(step)
    model.eval()
    return SFTResult(steps=step, final_loss=loss_value, probe_accuracy=accuracy)
