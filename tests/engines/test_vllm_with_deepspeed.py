"""A vLLM engine's shutdown leaves DeepSpeed's default process group alone.

An in-process vLLM engine joins torch.distributed's default group when one exists (the DeepSpeed learner
starts it first) and its shutdown (``cleanup_dist_env_and_memory``) destroyed that group. The learner was
left on a destroyed group after a mid-run engine rebuild, and the next run's ``deepspeed.initialize``
failed with "Group ... is not registered" (DeepSpeed caches a clone of the world group). Found by
test_gpu_study_engines.py, whose study runs two variants in one process.
"""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("vllm")
require_engine("deepspeed")

import torch

from tests.engines.test_vllm_sampler import run_config
from workbench.config import LearnerConfig
from workbench.models import load_policy
from workbench.rollout import build_sampler
from workbench.train.deepspeed_learner import DeepSpeedLearner

ZERO1 = LearnerConfig(backend="deepspeed", zero_stage=1)


def test_closing_a_vllm_sampler_keeps_the_default_group_deepspeed_started():
    """Learner, then sampler, as a run builds them; the sampler closes; the next run's learner starts."""
    cfg = run_config()
    model, tokenizer = load_policy(cfg.model, cfg.task, progress=False)
    learner = DeepSpeedLearner(model, ZERO1)  # starts (or joins) the default process group
    world = torch.distributed.group.WORLD
    sampler = build_sampler(cfg, learner.model, tokenizer)
    sampler.close()
    assert torch.distributed.is_initialized() and torch.distributed.group.WORLD is world
    learner.close()
    model, _ = load_policy(cfg.model, cfg.task, progress=False)
    DeepSpeedLearner(model, ZERO1).close()  # raised "Group ... is not registered" before the fix
    assert sampler.keeps_default_group
