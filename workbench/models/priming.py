"""Priming a user's model before RL: an SFT stage on a JSONL of worked solutions (``data.prime.path``).

The same stage the built-in model's cold start runs (``workbench.models.sft``: SFT until a greedy probe
of training prompts reaches a target accuracy), on ``model.path``'s weights and tokenizer, cached by the
model directory's contents, the file's contents, the template and the settings, like the cold start.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict
from pathlib import Path

from workbench.config import PrimeConfig
from workbench.models.build_cache import cache_root, cached_build
from workbench.models.directory import NO_REMOTE_CODE, load_tokenizer
from workbench.models.sft import supervised_warmup
from workbench.tasks.priming import WorkedSolutions

PRIME_VERSION = 1  # bump when the stage changes, to invalidate cached primed models
PRIME_RECORD = "workbench_prime.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prime_cache_key(model_path: Path, template: str, prime: PrimeConfig, cold_start: int = 0) -> str:
    """Model directory (its config and weight files' contents), data file contents, template and settings, and
    which replicate of the stage (``model.cold_start``; 0, the only one before replication, is not hashed)."""
    files = sorted(p for p in model_path.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin"))
    payload = {
        "v": PRIME_VERSION,
        "model": {p.name: _digest(p) for p in files},
        "template": template,
        "data": _digest(Path(prime.path or "")),
        "prime": prime.model_dump(mode="json", exclude={"path"}),
    }
    if cold_start:
        payload["cold_start"] = cold_start
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def primed_model_dir(
    model_path: Path, template: str, prime: PrimeConfig, progress: bool = True, cold_start: int = 0
) -> Path:
    """The cached primed copy of ``model_path``, running the SFT stage first if needed; replicate ``cold_start``
    of the stage draws its batches in its own order (the weights it starts from are ``model_path``'s)."""
    target = cache_root() / "models" / f"primed-{prime_cache_key(model_path, template, prime, cold_start)}"

    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM

        data = WorkedSolutions(prime.path or "")
        tokenizer = load_tokenizer(model_path, padding_side="left")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32", **NO_REMOTE_CODE)
        sft = supervised_warmup(
            model,
            tokenizer,
            data,
            template,
            max_steps=prime.max_steps,
            batch_size=prime.batch_size,
            lr=prime.lr,
            target_accuracy=prime.target_accuracy,
            check_every=prime.check_every,
            rng=random.Random(f"prime-{cold_start}"),
            progress=progress,
            label="priming model.path",
        )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"model_path": str(model_path), "prime": prime.model_dump(mode="json"), "sft": asdict(sft)}
        (tmp / PRIME_RECORD).write_text(json.dumps(record, indent=2))

    return cached_build(target, build)


def stage_metrics(directory: Path) -> dict[str, float]:
    """The cold start's (or the priming stage's) own metrics, logged under ``cold_start/``: SFT steps,
    final loss and probe accuracy, read from the build record beside the weights; {} for a plain model."""
    for name in (PRIME_RECORD, "workbench_build.json"):
        record = directory / name
        if record.is_file():
            sft = json.loads(record.read_text())["sft"]
            metrics = {
                "cold_start/steps": float(sft["steps"]),
                "cold_start/loss": float(sft["final_loss"]),
                "cold_start/probe_accuracy": float(sft["probe_accuracy"]),
            }
            # no SFT step ran (sft_max_steps: 0): no loss, a missing point rather than a NaN the health rules stop on
            return {key: value for key, value in metrics.items() if math.isfinite(value)}
    return {}
