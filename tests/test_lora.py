"""LoRA as a learner variant (``learner.lora``, workbench/train/lora.py): real peft adapters on a real micro
Llama. Only the adapters train; the sampler sees the adapted policy (shared module, or merged weights) at the
float32 floor; the KL reference is the base under the same module; checkpoints restore adapters and AdamW.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.learner_helpers import micro_policy, micro_policy_batch, mixed_length_problems
from tests.tolerance import EPS32, order_tolerance, reduction_depth
from workbench.batch import TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig, LoraConfig, RunConfig, SamplerConfig
from workbench.rollout.hf import HFSampler
from workbench.rollout.weights import plain_copy, plain_state_dict
from workbench.train.learner import TorchLearner, reference_policy
from workbench.train.lora import Adapters
from workbench.train.step0_gate import step0_verdict

ALGO = AlgorithmConfig(preset="grpo")


def lora_learner(model, rank: int = 2, lr: float = 1e-2, **lora) -> TorchLearner:
    return TorchLearner(model, LearnerConfig(lr=lr, lora=LoraConfig(rank=rank, alpha=2.0 * rank, **lora)))


def update(learner, rollouts, advantages, step: int = 0) -> dict[str, float]:
    batch = TrainBatch.of(rollouts, advantages)
    batch.step = step
    return learner.update(batch, ALGO, 1.0, torch.Generator().manual_seed(step))


# --- the config ------------------------------------------------------------------------------


def test_absent_lora_leaves_dumps_and_run_keys_as_they_were():
    """Unset, ``learner.lora`` is not in the dump (MLflow params, config.yaml) nor in the run key."""
    plain = RunConfig()
    assert "lora" not in plain.model_dump(mode="json")["learner"]
    assert not any(key.startswith("learner.lora") for key in plain.flat())
    with_lora = RunConfig.model_validate({"learner": {"lora": {"rank": 4}}})
    assert with_lora.flat()["learner.lora.rank"] == 4
    assert with_lora.flat()["learner.lora.target_modules"] == "all-linear"  # the TML default
    assert with_lora.run_key() != plain.run_key()


def test_lora_config_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="target_modules"):
        LoraConfig(target_modules=[])
    with pytest.raises(ValueError, match="ZeRO-3"):
        LearnerConfig(backend="deepspeed", zero_stage=3, lora=LoraConfig())
    with pytest.raises(ValueError):
        LoraConfig(rank=0)


# --- the adapters' metrics, by hand ---------------------------------------------------------------


class OneLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.proj(x)


def test_metrics_hand_computed():
    """One 2x2 layer (4 weights + 2 biases), rank 1, alpha 2: scaling alpha/r = 2. A = [[3, 4]], B = [[1], [2]]:
    B A = [[3, 4], [6, 8]], ‖B A‖_F² = 9 + 16 + 36 + 64 = 125, so ‖2·B A‖_F = 2·√125 = 10√5.
    Trainable: A (1x2) + B (2x1) = 4 of 6 + 4 = 10 parameters."""
    adapters = Adapters(OneLinear(), LoraConfig(rank=1, alpha=2.0, target_modules=["proj"]))
    assert adapters.metrics()["lora/update_norm"] == 0.0  # B starts at 0: the base policy
    layer = adapters.layers()["proj"]
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(torch.tensor([[3.0, 4.0]]))
        layer.lora_B["default"].weight.copy_(torch.tensor([[1.0], [2.0]]))
    metrics = adapters.metrics()
    assert metrics["lora/trainable_params"] == 4
    assert metrics["lora/trainable_frac"] == 4 / 10
    # float64 sums of small integers: exact, then one sqrt (correctly rounded) and a product: 2 roundings
    assert metrics["lora/update_norm"] == pytest.approx(10 * math.sqrt(5), rel=4 * 2.0**-53)
    # ... and the merged weight is W + 2·B A
    merged = plain_state_dict(adapters.model)
    assert set(merged) == {"proj.weight", "proj.bias"}
    expected = layer.base_layer.weight + 2 * torch.tensor([[3.0, 4.0], [6.0, 8.0]])
    # one float32 addition each (|W| < 1, |2BA| <= 16): within 1 ulp of 16
    assert torch.allclose(merged["proj.weight"], expected, rtol=0, atol=16 * EPS32)


def test_rank_above_a_layers_smallest_dimension_is_an_error():
    with pytest.raises(ValueError, match=r"rank=3 is above the smallest dimension \(2\) of the adapted layer proj"):
        Adapters(OneLinear(), LoraConfig(rank=3, target_modules=["proj"]))


# --- only the adapters train ------------------------------------------------------------------


def test_only_the_adapters_change_and_the_base_stays_bit_identical():
    model, _, _, rollouts, advantages = micro_policy_batch()
    base = {name: t.clone() for name, t in model.state_dict().items()}
    learner = lora_learner(model)
    before = {k: v.clone() for k, v in learner.adapters.state_dict().items()}
    assert all(p.requires_grad == (".lora_" in n) for n, p in learner.model.named_parameters())
    assert {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in learner.adapters.parameters()
    }
    metrics = [update(learner, rollouts, advantages, step) for step in range(2)]
    # every base weight, bit for bit (the frozen W under its peft name base_layer)
    now = learner.model.state_dict()
    for name, tensor in base.items():
        key = name if name in now else name.replace(".weight", ".base_layer.weight")
        assert torch.equal(now[key], tensor), name
    after = learner.adapters.state_dict()
    # B starts at 0, so dL/dA = 0 in the first step: A moves from the second, B from the first
    assert all(not torch.equal(after[k], before[k]) for k in after), "every adapter tensor moved"
    assert metrics[0]["lora/update_norm"] > 0 and metrics[1]["lora/update_norm"] > metrics[0]["lora/update_norm"]
    trainable = sum(p.numel() for p in learner.adapters.parameters())
    assert metrics[0]["lora/trainable_params"] == trainable
    # rank 2 on every linear layer of the 1-layer micro Llama (hidden 32, MLP 64; kv = hidden here):
    # q, k, v, o: 2·(32+32) each; gate, up: 2·(32+64); down: 2·(64+32)
    assert trainable == 4 * 2 * 64 + 3 * 2 * 96


# --- the sampler sees the adapted policy ------------------------------------------------------------


@pytest.fixture(scope="module")
def trained():
    """A micro policy whose rank-2 adapters took 3 updates at lr 0.05 (far from the base): its learner, the
    tokenizer, and an untouched copy of the base taken before the adapters were injected."""
    model, tok = micro_policy()
    initial = copy.deepcopy(model)
    learner = lora_learner(model, lr=5e-2)
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12))
    for step in range(3):
        rollouts = sampler.generate(mixed_length_problems(), 4, temperature=1.0, seed=step)
        advantages = torch.randn(len(rollouts.texts), generator=torch.Generator().manual_seed(step))
        update(learner, rollouts, advantages, step)
        sampler.sync_weights(learner.model)
    assert learner.adapters.metrics()["lora/update_norm"] > 0.1
    return learner, tok, initial


def verdict_of(learner, sampler):
    rollouts = sampler.generate(mixed_length_problems(), 4, temperature=1.0, seed=7)
    return step0_verdict(learner, rollouts, 1.0, sampler_dtype="float32", learner_dtype="float32")


def test_a_float32_sampler_shares_the_adapted_module_at_the_float_floor(trained):
    """Same dtype: the HF sampler runs the learner's own module, adapters unmerged, so its logprobs are the
    learner's up to the order of summation (cached decode vs one forward): the step-0 gate's float32 bound."""
    learner, tok, _ = trained
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12))
    assert sampler.model is learner.model
    verdict = verdict_of(learner, sampler)
    print(f"\nshared module: max |Δ logp| {verdict.max_abs_log_ratio:.3g} <= bound {verdict.bound:.3g}")
    assert verdict.passed


def test_merged_weights_give_the_adapted_policy_and_a_wrong_merge_shows(trained):
    """A sampler with its own copy gets ``W + (alpha/r)·B A``: within the float32 bound of the learner. The base
    alone (adapters never merged: a stale sampler) or B A without its alpha/r scale are far outside it."""
    learner, tok, _ = trained
    merged = HFSampler(plain_copy(learner.model), tok, SamplerConfig(max_new_tokens=12))
    assert merged.model is not learner.model and not any(".lora_" in n for n in merged.model.state_dict())
    verdict = verdict_of(learner, merged)
    print(f"\nmerged copy: max |Δ logp| {verdict.max_abs_log_ratio:.3g} <= bound {verdict.bound:.3g}")
    assert verdict.passed

    with learner.adapters.disabled():
        stale = HFSampler(plain_copy(learner.model), tok, SamplerConfig(max_new_tokens=12))
    assert not verdict_of(learner, stale).passed

    unscaled = plain_copy(learner.model)
    weights = plain_state_dict(learner.model)
    with torch.no_grad():
        for name, layer in learner.adapters.layers().items():
            delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight
            weights[f"{name}.weight"] = layer.base_layer.weight + delta  # the scale forgotten
        unscaled.load_state_dict(weights)
    assert not verdict_of(learner, HFSampler(unscaled, tok, SamplerConfig(max_new_tokens=12))).passed


def test_a_bfloat16_sampler_resyncs_merged_weights(trained):
    """Another dtype: the sampler keeps a plain bf16 copy; each sync loads the merged weights into it."""
    learner, tok, _ = trained
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, dtype="bfloat16"))
    eps = float(torch.finfo(torch.bfloat16).eps)

    def check_synced() -> None:
        merged = plain_state_dict(learner.model)
        assert sampler.model.state_dict().keys() == merged.keys()  # plain names, no adapter tensors
        for name, tensor in sampler.model.state_dict().items():
            # one rounding to bfloat16: within eps_bf16/2 of each weight's magnitude (eps, to be safe)
            assert torch.allclose(tensor.float(), merged[name], rtol=eps, atol=0), name

    check_synced()
    rollouts = sampler.generate(mixed_length_problems(), 4, temperature=1.0, seed=5)
    before = {k: v.clone() for k, v in sampler.model.state_dict().items()}
    learner = copy.deepcopy(learner)  # the module's fixture stays as it was for the other tests
    update(learner, rollouts, torch.ones(len(rollouts.texts)).index_fill_(0, torch.arange(0, 24, 2), -1.0), 3)
    sampler.sync_weights(learner.model)  # the resync path: merged weights loaded into the bf16 copy
    check_synced()
    assert any(not torch.equal(before[k], v) for k, v in sampler.model.state_dict().items())


# --- the KL reference: the base, no second copy ------------------------------------------------------


def test_reference_is_the_base_policy_without_a_copy(trained):
    learner, tok, initial = trained
    reference = reference_policy(learner)
    assert reference.model is learner.model  # no second copy of the weights
    rollouts = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12)).generate(
        mixed_length_problems(), 4, temperature=1.0, seed=3
    )
    with torch.no_grad():  # the initial policy, kept apart before the adapters were injected
        expected = TorchLearner(copy.deepcopy(initial), LearnerConfig()).logprobs(
            rollouts, slice(None), 1.0, with_entropy=False
        )[0]
    ref = reference.logprobs(rollouts, 1.0)
    on = rollouts.mask.bool()
    # the same base weights through the same lean forward (peft's wrapper calls the base layer as is):
    # bounded by the summation-order tolerance
    assert (ref[on] - expected[on]).abs().max() <= order_tolerance(
        reduction_depth(learner.model), float(expected[on].abs().max()) + 1
    )
    adapted = learner.logprobs(rollouts, slice(None), 1.0, with_entropy=False)[0].detach()
    assert (ref[on] - adapted[on]).abs().max() > 1e-3  # the adapters were switched off, and then back on
    assert learner.model.training and all(not layer.disable_adapters for layer in learner.adapters.layers().values())


# --- checkpoints: adapters and AdamW state ------------------------------------------------------------


def test_checkpoint_restores_adapters_and_optimizer_exactly(tmp_path):
    model, _, _, rollouts, advantages = micro_policy_batch()
    initial = copy.deepcopy(model)
    learner = lora_learner(model)
    for step in range(2):
        update(learner, rollouts, advantages, step)
    learner.save_checkpoint(tmp_path)
    size = (tmp_path / TorchLearner.CHECKPOINT_FILE).stat().st_size
    base_bytes = sum(t.numel() * t.element_size() for t in initial.state_dict().values())
    assert size < base_bytes / 2  # adapters + their AdamW moments only: the base is not saved

    resumed = lora_learner(copy.deepcopy(initial))  # a fresh run: base from the cache, new adapters
    resumed.load_checkpoint(tmp_path)
    for key, tensor in learner.adapters.state_dict().items():
        assert torch.equal(resumed.adapters.state_dict()[key], tensor), key
    for mine, theirs in zip(learner.optimizer.state.values(), resumed.optimizer.state.values(), strict=True):
        assert all(torch.equal(mine[k], theirs[k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    with torch.no_grad():
        a = learner.logprobs(rollouts, slice(None), 1.0, with_entropy=False)[0]
        b = resumed.logprobs(rollouts, slice(None), 1.0, with_entropy=False)[0]
    assert torch.equal(a, b)
    # and the next update is the same update
    m1, m2 = update(learner, rollouts, advantages, 2), update(resumed, rollouts, advantages, 2)
    assert m1 == m2


def test_adapter_init_depends_on_the_run_seed_not_on_what_ran_before():
    """A's initial draw is seeded from ``torch.initial_seed()`` (the run's ``torch.manual_seed``), not the global
    generator's position: a run that built the tiny model first (a cache miss draws from it) and one that found
    it cached get the same adapters, so a resumed run continues the same run. The global stream is untouched."""
    first, second = OneLinear(), OneLinear()
    torch.manual_seed(11)
    a = Adapters(first, LoraConfig(rank=1, target_modules=["proj"])).state_dict()
    torch.manual_seed(11)
    torch.rand(1000)  # what building a model would draw
    position = torch.get_rng_state()
    b = Adapters(second, LoraConfig(rank=1, target_modules=["proj"])).state_dict()
    assert torch.equal(torch.get_rng_state(), position)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_bfloat16_learner_keeps_its_base_in_bfloat16_and_trains_float32_adapters():
    """``learner.dtype`` is the frozen base's; peft keeps the adapters in float32 under a 16-bit base (their
    small updates are not rounded away: the lint's lr_below_weight_precision concern does not apply to them)."""
    model, _, _, rollouts, advantages = micro_policy_batch()
    learner = TorchLearner(model, LearnerConfig(dtype="bfloat16", lr=1e-2, lora=LoraConfig(rank=2, alpha=4.0)))
    dtypes = {(".lora_" in n, p.dtype) for n, p in learner.model.named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}
    before = learner.adapters.metrics()["lora/update_norm"]
    metrics = update(learner, rollouts, advantages)
    assert before == 0.0 < metrics["lora/update_norm"] and math.isfinite(metrics["loss/policy"])


def test_a_list_of_target_modules_adapts_those_alone():
    """Attention's q and v only (the original LoRA paper's choice): rank 2 on two 32 x 32 projections of the
    1-layer micro Llama = 2 layers x 2·(32 + 32) = 256 trainable parameters."""
    model, _, _, _, _ = micro_policy_batch()
    learner = lora_learner(model, target_modules=["q_proj", "v_proj"])
    assert sorted(name.rsplit(".", 1)[-1] for name in learner.adapters.layers()) == ["q_proj", "v_proj"]
    assert learner.adapters.metrics()["lora/trainable_params"] == 256
    with pytest.raises(ValueError, match="the built-in model has no linear layer 'qkv_proj'"):
        RunConfig.model_validate({"learner": {"lora": {"target_modules": ["qkv_proj"]}}})
