"""Cold-start supervised stage: teach the answer format from worked examples."""

from __future__ import annotations

import random

import torch
from rich.progress import Progress

from workbench.tasks import Task


def sft_batch(tokenizer, task: Task, template: str, batch_size: int, rng: random.Random):
    """Right-padded prompt+solution+EOS sequences; labels only on the solution tokens."""
    problems = [p for p in task.sample_train(batch_size, rng) if p.solution is not None]
    if not problems:
        raise ValueError(f"task {task.name!r} has no worked solutions to warm up on")
    rows, labels = [], []
    for p in problems:
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


def supervised_warmup(model, tokenizer, task: Task, template: str, *, steps: int, batch_size: int,
                      lr: float, rng: random.Random, progress: bool = True) -> list[float]:
    from workbench.models.tiny import cosine_lr

    if steps == 0:
        return []
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, steps))
    losses = []
    with Progress(disable=not progress, transient=True) as bar:
        job = bar.add_task("building tiny model (cold-start SFT)", total=steps)
        for _ in range(steps):
            input_ids, attention, labels = sft_batch(tokenizer, task, template, batch_size, rng)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            bar.update(job, advance=1, description=f"building tiny model (SFT loss {loss.item():.3f})")
    model.eval()
    return losses
