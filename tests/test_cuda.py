"""The GPU path: the torch learner and the HF sampler on CUDA, against the same code on the CPU.

Skipped on a machine without CUDA (CI, the 2-core dev machine). ``benchmarks/gpu_check.sh`` runs this
file, together with the suites that pick ``learner.device: auto`` (= cuda there), on a lent GPU; what it
printed is in docs/engines.md ("Measured on a GPU").
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.conftest import micro_run_config
from tests.learner_helpers import micro_policy, mixed_length_problems
from tests.tolerance import order_tolerance, reduction_depth
from workbench.config import LearnerConfig, RunConfig, SamplerConfig
from workbench.rollout.hf import HFSampler
from workbench.train.learner import TorchLearner

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def no_tf32():
    """cuBLAS may run float32 matmuls in TF32 (10-bit mantissa) when asked; the float32 bounds below
    assume float32 arithmetic, which is torch's default. Fail loudly if something switched it on."""
    assert not torch.backends.cuda.matmul.allow_tf32
    yield


def test_auto_device_puts_learner_and_sampler_on_cuda():
    model, tok = micro_policy()
    learner = TorchLearner(model, LearnerConfig())  # device: auto
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=6, dtype="bfloat16"))
    assert learner.device.type == "cuda"
    assert next(sampler.model.parameters()).device.type == "cuda"
    rollouts = sampler.generate(mixed_length_problems(3), 2, temperature=1.0, seed=0)
    assert rollouts.completion_ids.shape[0] == 6 and rollouts.mask.sum() > 0


def test_cuda_learner_logprobs_equal_cpu_learner_logprobs():
    """Same weights, same tokens: CUDA's float32 kernels only change the order of the sums."""
    model, tok = micro_policy()
    cpu = TorchLearner(copy.deepcopy(model), LearnerConfig(device="cpu"))
    gpu = TorchLearner(copy.deepcopy(model), LearnerConfig(device="cuda"))
    rollouts = HFSampler(cpu.model, tok, SamplerConfig(max_new_tokens=12)).generate(
        mixed_length_problems(), 4, temperature=1.0, seed=0
    )
    with torch.no_grad():
        on_cpu, entropy_cpu = cpu.logprobs(rollouts, slice(None), 1.0)
        on_gpu, entropy_gpu = gpu.logprobs(rollouts.to(gpu.device), slice(None), 1.0)
    on = rollouts.mask.bool()
    # Error analysis (tests/tolerance.py): both sides may differ from the exact value by
    # (reduction depth + positions)·eps32·|logp|, so from each other by twice that.
    operands = 2 * (reduction_depth(model) + rollouts.input_ids.shape[1])
    tol = order_tolerance(operands, float(on_cpu[on].abs().max()) + 1.0)
    assert torch.allclose(on_gpu.cpu()[on], on_cpu[on], atol=tol, rtol=0)
    ent_tol = order_tolerance(operands, float(entropy_cpu[on].abs().max()) + 1.0)
    assert torch.allclose(entropy_gpu.cpu()[on], entropy_cpu[on], atol=ent_tol, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_cuda_sampler_logprobs_equal_cuda_learner_logprobs(temperature):
    """The KV-cached decode on CUDA and the teacher-forced forward on CUDA agree in float32."""
    model, tok = micro_policy()
    learner = TorchLearner(model, LearnerConfig(device="cuda"))
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, temperature=temperature))
    rollouts = sampler.generate(mixed_length_problems(), 4, temperature=temperature, seed=0).to(learner.device)
    with torch.no_grad():
        logp, _ = learner.logprobs(rollouts, slice(None), temperature)
    on = rollouts.mask.bool()
    operands = reduction_depth(model) + rollouts.input_ids.shape[1]  # as in tests/test_sampler_learner.py
    tol = order_tolerance(operands, (float(logp[on].abs().max()) + 1.0) / temperature)
    assert torch.allclose(logp[on], rollouts.sampler_logp.to(logp.device)[on], atol=tol, rtol=0)


@pytest.mark.parametrize("learner_dtype", ["float32", "bfloat16"])
def test_cuda_update_changes_the_weights_by_a_finite_step(learner_dtype):
    """One optimizer step on CUDA: finite loss and grad norm, every weight finite, the weights moved."""
    model, tok = micro_policy()
    learner = TorchLearner(model, LearnerConfig(device="cuda", dtype=learner_dtype, lr=1e-3))
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=8, dtype=learner_dtype))
    rollouts = sampler.generate(mixed_length_problems(), 4, temperature=1.0, seed=1).to(learner.device)
    before = [p.detach().clone() for p in learner.model.parameters()]
    advantages = torch.randn(rollouts.mask.shape[0], generator=torch.Generator().manual_seed(0)).to(learner.device)
    logp, _ = learner.logprobs(rollouts, slice(None), 1.0)
    mask = rollouts.mask.to(logp.dtype)
    loss = -((logp * advantages[:, None] * mask).sum() / mask.sum())  # REINFORCE, token-mean
    learner.backward(loss)
    grad_norm = learner.step()
    assert math.isfinite(loss.item()) and math.isfinite(grad_norm) and grad_norm > 0
    after = list(learner.model.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sampler_dtype", "micro_batch_size"), [("float32", None), ("bfloat16", None), ("float16", None), ("float32", 5)]
)
def test_a_run_trains_on_cuda_and_logs_its_mismatch(sampler_dtype, micro_batch_size):
    """The whole loop on CUDA: every logged number finite; the mismatch is zero when sampler and learner
    share float32 weights, and positive when the sampler keeps a half-precision copy. Micro-batches of 5
    (16 rows: uneven) take the gradient-accumulation path, whose weights once mixed CPU and CUDA tensors
    (found on an H200: the shipped qwen_gsm8k study, micro_batch_size 32, failed at its first update)."""
    from workbench.health import HealthMonitor
    from workbench.train.loop import train

    cfg = RunConfig.model_validate(
        micro_run_config(
            learner={"device": "cuda", "micro_batch_size": micro_batch_size}, sampler={"dtype": sampler_dtype}
        )
    )

    class Rows:
        rows: list[dict] = []

        def log_metrics(self, metrics, step):
            self.rows.append(dict(metrics))

    sink = Rows()
    sink.rows = []
    train(cfg, sink, HealthMonitor.from_config(cfg.health))
    steps = [r for r in sink.rows if "mismatch/kl" in r]
    assert len(steps) == cfg.rollout.steps
    core = ("loss/policy", "grad/norm", "entropy/mean", "reward/mean", "mismatch/kl", "mismatch/prob_abs_diff_max")
    bad = [(k, r[k]) for r in steps for k in core if k in r and not math.isfinite(r[k])]
    assert not bad, bad
    assert all(k in steps[0] for k in core if k != "reward/mean"), sorted(steps[0])
    kl = [r["mismatch/kl"] for r in steps]
    if sampler_dtype == "float32":
        # Error analysis (tests/tolerance.py): per token |Δ log p| <= (depth + positions)·eps32·(|log p| + 1); the
        # micro model's depth is 1·(2·32 + 64) + 99 = 227, positions <= ~30, |log p| + 1 <= ~10, so |Δ| <= 3.1e-4,
        # and the k3 KL (≈ Δ²/2 for small Δ) <= 5e-8: 1e-6 bounds it with room (measured on an H200: 8e-14).
        assert max(abs(v) for v in kl) < 1e-6
    else:
        assert max(kl) > 0
