"""The data step before RL: draw the prompt pool, measure pass rates on the initial policy, curate, order.

Pass rates are measured with the run's own sampler and verifier (``data.curate.samples`` completions
per prompt at ``data.curate.temperature``), before the first update, and cached on disk by everything
that determines them (the model's build, template, task, pool, sampler and these settings; not the
run's seed): a second run, or another seed of the same arm, reads them back instead of sampling.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.config import RunConfig
from workbench.models.build_cache import cache_root
from workbench.reward import AnswerVerifier
from workbench.reward.rollouts import score_rollouts
from workbench.rollout.base import Sampler
from workbench.tasks import Problem, Task
from workbench.tasks.curation import (
    CURATORS,
    PromptOrder,
    curriculum_stages,
    difficulty_of,
    draw_pool,
    easy_to_hard,
    pass_rate_histogram,
)

CURATION_VERSION = 1  # bump when measuring changes, to invalidate cached pass rates
MEASURE_CHUNK = 32  # prompts per generate call while measuring: bounds the memory of one call


def measure_pass_rates(
    problems: list[Problem], sampler: Sampler, verifier: AnswerVerifier, *, samples: int, temperature: float, seed: int
) -> list[float]:
    """Fraction of ``samples`` completions per prompt that the verifier judges correct (shaping ignored)."""
    rates: list[float] = []
    with torch.random.fork_rng(devices=[]):  # the run's own torch RNG stream is left as it was
        for start in range(0, len(problems), MEASURE_CHUNK):
            chunk = problems[start : start + MEASURE_CHUNK]
            rollouts = sampler.generate(chunk, samples, temperature=temperature, seed=seed * 1_000_003 + start)
            correct = score_rollouts(verifier, rollouts, []).correct.float()  # [len(chunk) * samples], grouped
            rates += correct.view(len(chunk), samples).mean(dim=1).tolist()
    return rates


def model_identity(directory: Path) -> dict[str, Any]:
    """What identifies a model directory's weights without reading them: its files' names, sizes and mtimes
    (a built tiny or primed model's directory name is already a hash of its build)."""
    files = sorted(p for p in directory.iterdir() if p.is_file())
    return {"dir": str(directory.resolve()), "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def curation_key(cfg: RunConfig, model: dict[str, Any]) -> str:
    sampler = cfg.sampler.model_dump(mode="json", include={"backend", "dtype", "decode", "top_p", "max_new_tokens"})
    payload = {
        "v": CURATION_VERSION,
        "model": model,
        "template": cfg.model.template_text,
        "task": cfg.task.model_dump(mode="json"),
        "pool": cfg.data.pool,
        "sampler": sampler,
        "timeout_s": cfg.reward.timeout_s,
        "curate": cfg.data.curate.model_dump(mode="json", exclude={"name", "keep"}) if cfg.data.curate else None,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def cached_pass_rates(path: Path, prompts: list[str], measure: Callable[[], list[float]]) -> tuple[list[float], bool]:
    """``(rates, from_cache)``: the rates stored at ``path`` for exactly these prompts, else ``measure()``'s,
    stored there (atomically: a parallel run reads either nothing or the whole file)."""
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["prompts"] == prompts:
            return [float(r) for r in stored["pass_rates"]], True
    rates = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".curation-")
    with os.fdopen(fd, "w") as handle:
        json.dump({"prompts": prompts, "pass_rates": rates}, handle)
    os.replace(tmp, path)
    return rates, False


def prepare_prompts(
    cfg: RunConfig, task: Task, sampler: Sampler, verifier: AnswerVerifier, rng: random.Random, model_directory: Path
) -> tuple[PromptOrder, dict[str, float], dict[str, Any]]:
    """The run's prompt order, its ``data/*`` metrics logged at step 0 and the record kept as ``data.json``
    (pool, pass rates, histogram, what was kept, the curriculum schedule)."""
    data = cfg.data
    if not data.uses_pool:
        return PromptOrder(task, rng), {}, {}
    pool = draw_pool(task, data.pool, cfg.task.seed)
    record: dict[str, Any] = {"pool": len(pool), "order": data.order}
    metrics = {"data/pool_size": float(len(pool))}
    rates: list[float] | None = None
    if data.curate is not None:
        curate = data.curate
        path = cache_root() / "curation" / f"{curation_key(cfg, model_identity(model_directory))}.json"
        rates, cached = cached_pass_rates(
            path,
            [p.prompt for p in pool],
            lambda: measure_pass_rates(
                pool, sampler, verifier, samples=curate.samples, temperature=curate.temperature, seed=curate.seed
            ),
        )
        kept = CURATORS.get(curate.name)(np.asarray(rates), keep=curate.keep)
        record |= {
            "pass_rate_histogram": pass_rate_histogram(rates),
            "kept": int(kept.sum()),
            "pass_rates_from_cache": cached,
            "prompts": [
                {"prompt": p.prompt, "pass_rate": r, "kept": bool(k)} for p, r, k in zip(pool, rates, kept, strict=True)
            ],
        }
        metrics |= {
            "data/kept": float(kept.sum()),
            "data/kept_frac": float(kept.mean()),
            "data/pass_rate_mean": float(np.mean(rates)),
        }
        if not kept.any():
            raise ValueError(
                f"data.curate.keep={list(curate.keep)} keeps none of the {len(pool)} prompts "
                f"(pass-rate histogram by decile: {record['pass_rate_histogram']})"
            )
        pool = [p for p, k in zip(pool, kept, strict=True) if k]
        rates = [r for r, k in zip(rates, kept, strict=True) if k]
    order = PromptOrder(task, rng, order=data.order, pool=pool, pass_rates=rates)
    schedule = data.schedule
    if schedule is not None:
        by_rate = schedule.by == "pass_rate"
        keys = rates if by_rate else [difficulty_of(task, p) for p in pool]
        ranked = easy_to_hard(keys, larger_is_easier=by_rate)
        order.pool = [pool[i] for i in ranked]
        order.pass_rates = None if rates is None else [rates[i] for i in ranked]
        order.stages = curriculum_stages([keys[i] for i in ranked], schedule.stages, cfg.rollout.steps)
        record["curriculum"] = {
            "by": schedule.by,
            "stages": [
                {"steps": [s.first_step, s.last_step], "prompts": s.stop - s.start, schedule.by: list(s.key_range)}
                for s in order.stages
            ],
        }
    return order, metrics, record
