"""The step-0 gate (workbench/train/step0_gate.py) with the real HF sampler and torch learner: quiet on
healthy float32 and bfloat16 samplers, tripped by a leaked repetition_penalty and by a weight copy the
sampler never received."""

from __future__ import annotations

import contextlib

import pytest
import torch

import workbench.rollout.hf as hf
from tests.learner_helpers import micro_policy, mixed_length_problems
from workbench.config import LearnerConfig, SamplerConfig
from workbench.rollout.hf import HFSampler, plain_copy
from workbench.train.learner import TorchLearner
from workbench.train.step0_gate import MismatchGateError, check_step0, mismatch_bound, step0_verdict


@pytest.fixture()
def policy():
    return micro_policy()


def rollouts_of(sampler: HFSampler, temperature: float = 1.0):
    return sampler.generate(mixed_length_problems(), 4, temperature=temperature, seed=0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_healthy_sampler_passes(policy, dtype, temperature):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, dtype=dtype))
    verdict = check_step0(
        learner,
        rollouts_of(sampler, temperature),
        temperature,
        sampler="hf",
        sampler_dtype=dtype,
        learner_dtype="float32",
    )
    print(f"\n{dtype} sampler, T={temperature}: max |Δ| {verdict.max_abs_log_ratio:.3g} ≤ bound {verdict.bound:.3g}")
    assert verdict.passed
    if dtype == "bfloat16":  # the bf16 copy really disagrees a little: the bound is not vacuous by accident
        assert verdict.max_abs_log_ratio > 0


def test_a_leaked_repetition_penalty_trips_it(policy, monkeypatch):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    model.generation_config.repetition_penalty = 1.3  # as a model directory's generation_config.json sets it
    # plant the fault the sampler guards against: generate under the model's own generation config
    monkeypatch.setattr(hf, "run_config_only", lambda model, tokenizer: contextlib.nullcontext())
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, decode="generate"))
    with pytest.raises(MismatchGateError, match="step-0 mismatch gate") as caught:
        check_step0(learner, rollouts_of(sampler), 1.0, sampler="hf", sampler_dtype="float32", learner_dtype="float32")
    message = str(caught.value)
    assert "\n" not in message and "repetition_penalty" in message
    print(f"\n{message}")


def test_the_same_sampler_without_the_leak_passes(policy):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    model.generation_config.repetition_penalty = 1.3  # neutralised by the sampler's run_config_only
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, decode="generate"))
    assert step0_verdict(learner, rollouts_of(sampler), 1.0, sampler_dtype="float32", learner_dtype="float32").passed


def test_an_unsynced_weight_copy_trips_it(policy):
    model, tok = policy
    sampler = HFSampler(plain_copy(model), tok, SamplerConfig(max_new_tokens=12))  # its own copy
    learner = TorchLearner(model, LearnerConfig())
    with torch.no_grad():  # a resumed checkpoint loaded into the learner, never pushed to the sampler
        for p in learner.model.parameters():
            p.mul_(1 + 1e-3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)).to(p.device))
    verdict = step0_verdict(learner, rollouts_of(sampler), 1.0, sampler_dtype="float32", learner_dtype="float32")
    print(f"\nunsynced copy: max |Δ| {verdict.max_abs_log_ratio:.3g} > bound {verdict.bound:.3g}")
    assert not verdict.passed


def test_the_bound_per_dtype_pair():
    # float32 pair: 2·n·u·M with n = 550, u = 2^-24, M = 10: 6.6e-4 (the engines suite's 1e-3 bar)
    assert mismatch_bound(500, 50, "float32", "float32", 10.0) == pytest.approx(2 * 550 * 2**-24 * 10)
    # a bf16 side: 2·6·√n·u_bf16·M (probabilistic; the worst case n·u_bf16 ≈ 2.1 would explain anything)
    assert mismatch_bound(500, 50, "bfloat16", "float32", 10.0) == pytest.approx(2 * 6 * 550**0.5 * 2**-8 * 10)
    assert mismatch_bound(500, 50, "float16", "float32", 1.0) < mismatch_bound(500, 50, "bfloat16", "float32", 1.0)
