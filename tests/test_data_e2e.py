"""Data variants end to end on the micro model: curation measured once and then read from the cache, and
the SFT stage that primes a user's model directory (data.prime.path)."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from tests.conftest import micro_run_config
from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.models import model_dir
from workbench.models.priming import PRIME_RECORD, stage_metrics
from workbench.tasks import ArithmeticTask
from workbench.train.loop import train


class MemorySink:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, metrics))


def run(cfg: RunConfig):
    sink = MemorySink()
    result = train(cfg, sink, HealthMonitor.from_config(cfg.health))
    return result, dict(sink.rows[0][1])


@pytest.mark.slow
def test_curation_is_measured_once_logged_and_shared_by_seeds():
    data = {"pool": 8, "curate": {"samples": 2, "keep": [0.0, 1.0]}, "order": "curriculum", "curriculum": {"stages": 2}}
    first, start = run(RunConfig(**micro_run_config(data=data, rollout={"steps": 2, "eval_every": 2})))
    assert first.data_record["pass_rates_from_cache"] is False
    assert start["data/pool_size"] == start["data/kept"] == 8 and "cold_start/probe_accuracy" in start
    assert sum(first.data_record["pass_rate_histogram"]) == 8
    assert [s["steps"] for s in first.data_record["curriculum"]["stages"]] == [[0, 0], [1, 1]]
    # another seed of the same arm: the same curated prompts, read back rather than sampled
    second, start2 = run(RunConfig(**micro_run_config(seed=1, data=data, rollout={"steps": 2, "eval_every": 2})))
    assert second.data_record["pass_rates_from_cache"] is True
    assert second.data_record["prompts"] == first.data_record["prompts"]
    assert {k: v for k, v in start2.items() if k.startswith("data/")} == {
        k: v for k, v in start.items() if k.startswith("data/")
    }


def test_a_user_model_is_primed_by_an_sft_stage_once(tmp_path):
    base = tmp_path / "user-model"
    cfg = RunConfig(**micro_run_config())
    shutil.copytree(model_dir(cfg.model, cfg.task, progress=False), base)
    (base / "workbench_build.json").unlink()  # a user's directory: no cold-start record
    lines = [
        {"prompt": p.prompt, "answer": p.answer, "solution": p.solution}
        for p in ArithmeticTask(eval_size=10).sample_train(40, random.Random(0))
    ]
    data = tmp_path / "worked.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    primed_cfg = RunConfig(
        **micro_run_config(
            model={"path": str(base), "builtin": None},
            task={"name": "jsonl", "path": str(data)},
            data={"prime": {"path": str(data), "max_steps": 4, "batch_size": 4, "check_every": 2, "lr": 1e-3}},
        )
    )
    assert model_dir(primed_cfg.model, primed_cfg.task, progress=False) == base  # without the prime: the user's
    primed = model_dir(primed_cfg.model, primed_cfg.task, progress=False, prime=primed_cfg.data.prime)
    assert primed != base and (primed / PRIME_RECORD).is_file()
    assert json.loads((primed / PRIME_RECORD).read_text())["sft"]["steps"] == 4
    assert set(stage_metrics(primed)) == {"cold_start/steps", "cold_start/loss", "cold_start/probe_accuracy"}
    assert stage_metrics(base) == {}
    built = (primed / "config.json").stat().st_mtime_ns
    assert model_dir(primed_cfg.model, primed_cfg.task, progress=False, prime=primed_cfg.data.prime) == primed
    assert (primed / "config.json").stat().st_mtime_ns == built  # cached: not trained again


def test_a_cold_start_without_sft_steps_logs_no_nan(tmp_path):
    """sft_max_steps: 0 leaves the SFT loss NaN in the build record; logged, it would stop the run (non_finite)."""
    (tmp_path / "workbench_build.json").write_text(
        json.dumps({"sft": {"steps": 0, "final_loss": float("nan"), "probe_accuracy": 0.0}})
    )
    assert stage_metrics(tmp_path) == {"cold_start/steps": 0.0, "cold_start/probe_accuracy": 0.0}
