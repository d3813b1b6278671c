"""rollout.staleness with the engines: the vLLM sampler on the pipeline's thread, and the DeepSpeed learner.

The same pipeline as the HF sampler's (workbench/train/pipeline.py, tests/test_staleness.py): a second vLLM engine
over weights of its own samples step t's batch with the snapshot of version max(0, t - k), handed to it by the
in-place sync the synchronous loop uses (verified against the snapshot's weights on the probe).
"""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("vllm")

import pytest
import torch

from tests.conftest import micro_run_config
from tests.engines.test_vllm_sampler import ENGINE_MODEL, FP32_TOLERANCE
from workbench.config import RunConfig, deep_merge
from workbench.health import HealthMonitor
from workbench.models import load_policy
from workbench.rollout.weights import plain_state_dict
from workbench.train.logprobs import sequence_logprobs
from workbench.train.loop import train
from workbench.train.pipeline import StalePipeline

pytestmark = pytest.mark.slow  # two engines per run (~10 s each to start on this machine)


def engine_config(k: int, steps: int, **fields) -> RunConfig:
    # lr 1e-2 and a random reward (a spurious-reward control): the policy moves every step, so versions differ
    return RunConfig.model_validate(
        deep_merge(
            micro_run_config(
                model=ENGINE_MODEL,
                sampler={"backend": "vllm", "max_new_tokens": 8},
                learner={"lr": 1e-2},
                reward={"control": "random"},
                rollout={"staleness": k, "steps": steps, "eval_every": steps},
                health={"mismatch_record_every": 1},
            ),
            fields,
        )
    )


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))


def observed_run(cfg: RunConfig, monkeypatch) -> tuple[list[tuple[int, dict]], list, dict[int, dict], list[dict]]:
    """One run through ``train``: its logged rows, every batch the learner took, the weights of every version
    the learner published (copied here, whether or not a later step samples with them), the mismatch records."""
    taken, published = [], {}
    take, publish = StalePipeline.take, StalePipeline.publish

    def observed_take(self, step):
        result = take(self, step)
        taken.append(result[0])
        return result

    def observed_publish(self, version, model):
        published[version] = {n: t.detach().clone() for n, t in plain_state_dict(model).items()}
        publish(self, version, model)

    monkeypatch.setattr(StalePipeline, "take", observed_take)
    monkeypatch.setattr(StalePipeline, "publish", observed_publish)
    sink = Rows()
    result = train(cfg, sink, HealthMonitor.from_config(cfg.health))
    monkeypatch.undo()
    return sink.rows, taken, published, result.mismatch_records


def gap(model, rollouts) -> float:
    """max |logp_model - sampler logp| over the response tokens of ``rollouts`` (temperature 1, the config's)."""
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, rollouts, slice(None), 1.0, False)
    return float((logp - rollouts.sampler_logp)[rollouts.mask.bool()].abs().max())


def check_versions(cfg: RunConfig, rows, taken, published) -> list[int]:
    """Each step's batch came from version max(0, t - k): the vLLM engine's logprobs are that version's to the
    engine-vs-learner float32 bound; returns the steps at which the current weights give other logprobs."""
    k = cfg.rollout.staleness
    model, _ = load_policy(cfg.model, cfg.task, progress=False)
    model.eval()
    moved = []
    assert [s.step for s in taken] == list(range(cfg.rollout.steps))
    for step, sampled in enumerate(taken):
        assert sampled.version == max(0, step - k)
        assert rows[step][1]["offpolicy/staleness_max"] == step - sampled.version
        model.load_state_dict(published[sampled.version])
        assert gap(model, sampled.rollouts) < FP32_TOLERANCE  # the derivation is test_vllm_sampler.py's
        model.load_state_dict(published[step])
        if gap(model, sampled.rollouts) > 100 * FP32_TOLERANCE:
            moved.append(step)
    return moved


def numbers(rows) -> list[tuple[int, dict]]:
    return [(s, {k: v for k, v in m.items() if not k.startswith("perf/")}) for s, m in rows]


def test_vllm_at_k2_samples_step_t_with_version_t_minus_2_and_one_run_key_logs_one_set_of_numbers(monkeypatch):
    cfg = engine_config(2, 4)
    rows, taken, published, records = observed_run(cfg, monkeypatch)
    moved = check_versions(cfg, rows, taken, published)
    assert len(moved) >= 2  # the check tells versions apart (a policy that never moved would not)
    assert [(r["step"], r["staleness"]) for r in records] == [(0, 0), (1, 1), (2, 2), (3, 2)]
    assert [m["offpolicy/staleness_max"] for _, m in rows[:4]] == [0.0, 1.0, 2.0, 2.0]
    again, *_ = observed_run(cfg, monkeypatch)
    assert numbers(again) == numbers(rows)  # exact: the schedule and the seeds, not the timing, fix them


@pytest.mark.parametrize("sampler", ["vllm", "hf"])
def test_beside_a_deepspeed_zero3_learner_at_k1_step_t_is_sampled_with_version_t_minus_1(monkeypatch, sampler):
    """The learner's side under ZeRO-3: each version's snapshot is taken from the gathered weights."""
    require_engine("deepspeed")
    cfg = engine_config(1, 3, learner={"backend": "deepspeed", "zero_stage": 3}, sampler={"backend": sampler})
    rows, taken, published, _ = observed_run(cfg, monkeypatch)
    assert all(w.numel() > 0 for w in published[1].values())  # whole weights, not ZeRO-3's empty partitions
    assert len(check_versions(cfg, rows, taken, published)) >= 1  # step 1 (version 0) after the policy moved


def test_a_crashed_vllm_stale_run_resumes_bit_for_bit(workdir):
    """k = 2, crash after step 1: the resumed run's new engines sample steps 2 and 3 with the checkpoint's
    snapshots of versions 0 and 1, and every metric equals the uninterrupted run's exactly."""
    from tests.resume_helpers import check_resumed, interrupt_and_resume, resume_config

    cfg = resume_config({}, model=ENGINE_MODEL, sampler={"backend": "vllm"}, rollout={"staleness": 2})
    record = interrupt_and_resume(cfg, crash_after=1)
    check_resumed(record, crash_after=1)
