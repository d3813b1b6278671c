"""The DeepSpeed learner on this CPU, against the torch learner: same update, clipping, accumulation,
a non-finite step never applied, ZeRO-3's full weights, checkpoints. Runs in the engines venv."""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("deepspeed")

import copy

import pytest
import torch
from deepspeed.utils import safe_get_full_optimizer_state

from tests.learner_helpers import micro_policy_batch
from tests.tolerance import order_tolerance, reduction_depth
from workbench.algorithms import AGG_MODES
from workbench.batch import TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig, RunConfig, SamplerConfig
from workbench.rollout.hf import HFSampler
from workbench.train.deepspeed_learner import DeepSpeedLearner, deepspeed_config
from workbench.train.learner import TorchLearner, build_learner

LR = 1e-3


@pytest.fixture(scope="module")
def setup():
    """A 1-layer micro Llama, 12 sampled completions and fixed advantages."""
    return micro_policy_batch()


# ZeRO-3 keeps parameters under 1e5 elements whole by default (all of the micro model's): partition them all.
ZERO3_PARTITION_ALL = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}


def learner(setup, **fields):
    backend = fields.pop("backend", "deepspeed")
    if fields.get("zero_stage") == 3:
        fields["deepspeed_config"] = ZERO3_PARTITION_ALL
    return build_learner(copy.deepcopy(setup[0]), RunConfig(learner=LearnerConfig(backend=backend, lr=LR, **fields)))


def update(setup, lrn, algo: AlgorithmConfig | None = None, step: int = 0) -> dict[str, float]:
    algo = algo or AlgorithmConfig(preset="grpo", minibatches=2)
    return lrn.update(TrainBatch.of(setup[3], setup[4], step=step), algo, 1.0, torch.Generator().manual_seed(0))


def weights(lrn) -> list[torch.Tensor]:
    with lrn.gathered_model() as model:
        return [p.detach().clone().float() for p in model.parameters()]


def first_moments(lrn) -> list[torch.Tensor]:
    """AdamW's exp_avg after one step from zero state: (1-β1)·(clipped gradient), full (gathered) tensors."""
    if lrn.cfg.zero_stage == 0:
        return [lrn.engine.optimizer.state[p]["exp_avg"].clone() for p in lrn.model.parameters()]
    return [safe_get_full_optimizer_state(p, "exp_avg").clone() for p in lrn.model.parameters()]


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


# Error analysis (tests/tolerance.py). DeepSpeed runs the same float32 forward/backward as the torch
# learner, but may sum a gradient in another order (flattened buckets, ZeRO partitions) and steps with
# its own Adam kernel.
def gradient_operands(setup) -> int:
    """Summed operands behind one gradient element: every token position plus the reduction depth."""
    return setup[3].input_ids.numel() + reduction_depth(setup[0])


def adamw_weight_tolerance(setup, steps: int, max_weight: float, extra_operands: int = 0) -> float:
    """|Δw| after ``steps`` AdamW steps from the same start. A relative gradient error δ moves AdamW's
    step lr·m̂/(√v̂+ε) by at most lr·δ/4 (d/dg g/(|g|+ε) = ε/(|g|+ε)² ≤ 1/(4|g|)), with
    δ = gradient_operands·eps; the kernel itself rounds ≈ 6 operations on values of size
    max(|w|, lr) (decay, moments, bias corrections, division, update). ``extra_operands``: more sums
    behind the gradient (a clip coefficient from the global norm: one per parameter)."""
    delta = order_tolerance(gradient_operands(setup) + extra_operands, 1.0)
    per_step = LR * delta / 4 + order_tolerance(6, max(max_weight, LR))
    return steps * per_step


def metric_rel_tolerance(setup) -> float:
    """Loss, ratios, entropy and the grad norm are sums over the same positions: gradient_operands·eps."""
    return order_tolerance(gradient_operands(setup), 1.0)


@pytest.fixture(scope="module")
def torch_reference(setup):
    lrn = learner(setup, backend="torch")
    metrics = update(setup, lrn)
    return weights(lrn), metrics


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_update_matches_the_torch_learner(setup, torch_reference, stage):
    """Two AdamW steps (two minibatches), fp32: the same weights as the torch learner up to rounding
    (DeepSpeed's Adam kernel rounds differently: adamw_weight_tolerance), the same pre-clip grad norm
    and loss."""
    ref_weights, ref_metrics = torch_reference
    lrn = learner(setup, zero_stage=stage)
    metrics = update(setup, lrn)
    max_weight = max(float(w.abs().max()) for w in ref_weights)
    assert max_abs_diff(weights(lrn), ref_weights) <= adamw_weight_tolerance(setup, 2, max_weight)
    assert max_abs_diff(weights(lrn), weights(learner(setup, backend="torch"))) > 1e-4  # it did move
    rel = metric_rel_tolerance(setup)
    for key in ("grad/norm", "loss/policy", "entropy/mean", "clip/frac"):
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=rel, abs=rel), key


@pytest.mark.parametrize("stage", [0, 2])
def test_gradient_is_clipped_to_grad_clip_and_the_norm_reported_before_clipping(setup, stage):
    """grad_clip=0.05 < the norm (≈0.95): the step uses the clipped gradient, so AdamW's first moment
    has global norm (1-β1)·0.05; the reported grad/norm is the unclipped one, as the torch learner's."""
    algo = AlgorithmConfig(preset="grpo")
    lrn, ref = learner(setup, zero_stage=stage, grad_clip=0.05), learner(setup, backend="torch", grad_clip=0.05)
    metrics, ref_metrics = update(setup, lrn, algo), update(setup, ref, algo)
    assert metrics["grad/norm"] == pytest.approx(ref_metrics["grad/norm"], rel=metric_rel_tolerance(setup))
    assert metrics["grad/norm"] > 0.5
    moment_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(m) for m in first_moments(lrn)]))
    # a norm of P squared elements, then the clip scale and (1-β1): P + 3 rounded operations
    n_params = sum(p.numel() for p in ref.model.parameters())
    assert float(moment_norm) == pytest.approx((1 - 0.9) * 0.05, rel=order_tolerance(n_params + 3, 1.0))
    ref_weights = weights(ref)
    max_weight = max(float(w.abs().max()) for w in ref_weights)
    assert max_abs_diff(weights(lrn), ref_weights) <= adamw_weight_tolerance(setup, 1, max_weight, n_params)


@pytest.mark.parametrize(
    ("stage", "agg_mode"), [(2, mode) for mode in AGG_MODES.names()] + [(0, "token-mean"), (3, "token-sum")]
)
def test_accumulated_gradient_equals_the_unsplit_gradient(setup, stage, agg_mode):
    """micro_batch_size=5 on 12 sequences (5+5+2): the gradient DeepSpeed steps with equals the
    unsplit one up to float32 summation order (read from AdamW's first moment, clipping off)."""
    algo = AlgorithmConfig(preset="grpo", agg_mode=agg_mode)
    moments, norms = [], []
    for micro in (None, 5):
        lrn = learner(setup, zero_stage=stage, micro_batch_size=micro, grad_clip=1e9)
        norms.append(update(setup, lrn, algo)["grad/norm"])
        moments.append(first_moments(lrn))
    scale = max(float(m.abs().max()) for m in moments[0])
    # splitting changes only the order of the gradient's sums: gradient_operands·eps of its largest element
    assert max_abs_diff(*moments) <= order_tolerance(gradient_operands(setup), scale)
    assert norms[1] == pytest.approx(norms[0], rel=metric_rel_tolerance(setup))


@pytest.mark.parametrize(("stage", "dtype"), [(0, "float32"), (2, "float32"), (3, "float32"), (0, "bfloat16")])
def test_non_finite_step_is_reported_and_not_applied(setup, stage, dtype):
    """A NaN loss (learner.inject_nonfinite_at_step) gives a non-finite grad/norm and leaves the
    weights as they were; the next, finite update applies normally."""
    lrn = learner(setup, zero_stage=stage, dtype=dtype, inject_nonfinite_at_step=0)
    before = weights(lrn)
    metrics = update(setup, lrn, step=0)
    assert not torch.isfinite(torch.tensor(metrics["grad/norm"]))
    assert max_abs_diff(weights(lrn), before) == 0.0
    metrics = update(setup, lrn, step=1)
    assert torch.isfinite(torch.tensor(metrics["grad/norm"]))
    assert max_abs_diff(weights(lrn), before) > 1e-4


def test_zero3_full_weights_for_the_sampler_and_the_reference(setup):
    """ZeRO-3 partitions the weights (each parameter is empty outside a gather); full_state_dict(),
    gathered_model() and policy_copy() give the full weights, equal to the torch learner's."""
    ds, ref = learner(setup, zero_stage=3), learner(setup, backend="torch")
    update(setup, ds), update(setup, ref)
    assert all(p.numel() == 0 for p in ds.model.parameters())  # partitioned away
    full, expected = ds.full_state_dict(), ref.model.state_dict()
    assert full.keys() == expected.keys()
    tol = adamw_weight_tolerance(setup, 2, max(float(w.abs().max()) for w in expected.values()))
    assert max(float((full[k] - expected[k]).abs().max()) for k in full) <= tol
    copy_ = ds.policy_copy()
    assert not any(hasattr(p, "ds_id") for p in copy_.parameters())  # a plain module, DeepSpeed-free
    assert max(float((p - expected[k]).abs().max()) for k, p in copy_.state_dict().items()) <= tol


def test_hf_sampler_on_the_zero3_module_samples_like_the_full_model(setup):
    """The loop hands learner.model to the HF sampler: under ZeRO-3 its forward hooks gather the
    weights, so sampling (same seed) gives the same completions and logprobs as the unpartitioned model."""
    model, tok, problems, _, _ = setup
    ds = learner(setup, zero_stage=3)
    ours = HFSampler(ds.model, tok, SamplerConfig(max_new_tokens=8)).generate(problems, 2, temperature=1.0, seed=9)
    plain = HFSampler(model, tok, SamplerConfig(max_new_tokens=8)).generate(problems, 2, temperature=1.0, seed=9)
    assert torch.equal(ours.completion_ids, plain.completion_ids)
    # the same weights, gathered: only the order of the forward's sums may change; a log-softmax over
    # the vocabulary at the end of reduction_depth sums, on logprobs of size ≤ max |logp|
    tol = order_tolerance(reduction_depth(model), float(plain.sampler_logp.abs().max()))
    assert torch.allclose(ours.sampler_logp, plain.sampler_logp, atol=tol, rtol=0)


@pytest.mark.parametrize("stage", [2, 3])
def test_checkpoint_round_trip_gives_the_same_next_update(setup, tmp_path, stage):
    """Save after one update, load into a fresh learner: the same weights, and the next update (which
    needs the AdamW moments and step count back) agrees up to Adam-kernel rounding. Not bitwise: DeepSpeed's CPU Adam
    kernel keeps one process-wide β^t, advanced by multiplication for consecutive steps and recomputed
    with pow() otherwise, so two engines stepping in turn (or a resumed one) round the bias
    correction differently (≈1 ulp/step)."""
    a = learner(setup, zero_stage=stage)
    update(setup, a)
    a.save_checkpoint(tmp_path)
    b = learner(setup, zero_stage=stage)
    b.load_checkpoint(tmp_path)
    assert max_abs_diff(weights(a), weights(b)) == 0.0
    after_a, after_b = update(setup, a), update(setup, b)
    rel = metric_rel_tolerance(setup)  # the weights agree bitwise before this update: summation order only
    for key in ("loss/policy", "grad/norm", "policy/approx_kl", "clip/frac"):
        assert after_b[key] == pytest.approx(after_a[key], rel=rel, abs=rel), key
    wa = weights(a)
    assert max_abs_diff(wa, weights(b)) <= adamw_weight_tolerance(setup, 2, max(float(w.abs().max()) for w in wa))


def test_fp16_on_this_cpu_is_a_clear_error(setup):
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():
        pytest.skip("this accelerator (a GPU) trains in fp16: the CPU-only refusal does not apply")
    with pytest.raises(ValueError, match="learner.dtype=float16.*bfloat16 or float32"):
        learner(setup, dtype="float16")


def test_deepspeed_config_is_generated_from_the_learner_config():
    cfg = LearnerConfig(
        backend="deepspeed",
        zero_stage=2,
        lr=3e-4,
        betas=(0.9, 0.95),
        weight_decay=0.1,
        grad_clip=0.5,
        dtype="bfloat16",
        deepspeed_config={"zero_optimization": {"offload_optimizer": {"device": "cpu"}}},
    )
    ds = deepspeed_config(cfg)
    assert ds["optimizer"] == {
        "type": "AdamW",
        "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
    }
    assert ds["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}  # merged, not replaced
    assert ds["gradient_clipping"] == 0.5 and ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert ds["managed_gradient_accumulation"] is False and ds["gradient_accumulation_steps"] == 1
    with pytest.raises(ValueError, match="may not set \\['optimizer'\\]"):
        deepspeed_config(cfg.model_copy(update={"deepspeed_config": {"optimizer": {"type": "SGD"}}}))
    with pytest.raises(ValueError, match="zero_optimization.stage.*zero_stage"):
        deepspeed_config(cfg.model_copy(update={"deepspeed_config": {"zero_optimization": {"stage": 3}}}))


def test_torch_learner_is_built_for_backend_torch(setup):
    assert isinstance(learner(setup, backend="torch"), TorchLearner)
    assert isinstance(learner(setup), DeepSpeedLearner)


def test_zero3_on_several_processes_is_refused_with_the_reason(setup, monkeypatch):
    """Under ZeRO-3 every forward is collective (rank 0's sampling too): rank 0 drives cannot mirror that."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="zero_stage=3 with WORLD_SIZE=2.*every forward is a collective"):
        learner(setup, zero_stage=3)
