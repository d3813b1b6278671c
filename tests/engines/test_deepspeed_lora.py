"""DeepSpeed + LoRA (``learner.lora`` with ``learner.backend: deepspeed``) on this CPU, against the torch
learner with the same adapters: ZeRO 0-2 train the adapters alone (the base bit-identical), agree with the
torch learner up to DeepSpeed's own rounding, and checkpoint adapters + optimizer state; ZeRO-3 is refused.
Runs where deepspeed is installed (the engines venv)."""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("deepspeed")

import copy

import pytest
import torch

from tests.engines.test_deepspeed_learner import (
    LR,
    adamw_weight_tolerance,
    max_abs_diff,
    metric_rel_tolerance,
    update,
)
from tests.learner_helpers import micro_policy_batch
from workbench.config import LearnerConfig, LoraConfig, RunConfig
from workbench.train.learner import build_learner

LORA = LoraConfig(rank=2, alpha=4.0)


@pytest.fixture(scope="module")
def setup():
    return micro_policy_batch()


def lora_learner(setup, **fields):
    backend = fields.pop("backend", "deepspeed")
    torch.manual_seed(0)  # the adapters' A is drawn from the run seed: the same A for every learner here
    return build_learner(
        copy.deepcopy(setup[0]), RunConfig(learner=LearnerConfig(backend=backend, lr=LR, lora=LORA, **fields))
    )


def adapter_tensors(lrn) -> list[torch.Tensor]:
    state = lrn.adapters.state_dict()
    return [state[k].float() for k in sorted(state)]


def base_tensors(lrn) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in lrn.model.state_dict().items() if ".lora_" not in k}


@pytest.fixture(scope="module")
def torch_reference(setup):
    lrn = lora_learner(setup, backend="torch")
    metrics = update(setup, lrn)
    return adapter_tensors(lrn), metrics


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_lora_update_matches_the_torch_learner_and_leaves_the_base(setup, torch_reference, stage):
    """Two AdamW steps on the adapters, fp32: the torch learner's adapters up to DeepSpeed's rounding (the
    bound of the full fine-tuning test, tests/engines/test_deepspeed_learner.py); the base untouched."""
    ref_adapters, ref_metrics = torch_reference
    lrn = lora_learner(setup, zero_stage=stage)
    base = base_tensors(lrn)
    assert torch.equal(
        torch.cat([t.flatten() for t in adapter_tensors(lrn)]),
        torch.cat([t.flatten() for t in adapter_tensors(lora_learner(setup, backend="torch"))]),
    )
    metrics = update(setup, lrn)
    after = base_tensors(lrn)
    assert all(torch.equal(after[k], base[k]) for k in base)
    max_weight = max(float(w.abs().max()) for w in ref_adapters)
    assert max_abs_diff(adapter_tensors(lrn), ref_adapters) <= adamw_weight_tolerance(setup, 2, max_weight)
    rel = metric_rel_tolerance(setup)
    for key in ("grad/norm", "loss/policy", "entropy/mean"):
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=rel, abs=rel), key
    assert metrics["lora/trainable_params"] == ref_metrics["lora/trainable_params"]
    assert metrics["lora/update_norm"] > 0


@pytest.mark.parametrize("stage", [0, 2])
def test_lora_checkpoint_round_trip(setup, tmp_path, stage):
    """Adapters and optimizer state come back (the frozen base is left out of the checkpoint); the next update
    agrees up to DeepSpeed's Adam-kernel rounding (see the full fine-tuning round-trip test)."""
    a = lora_learner(setup, zero_stage=stage)
    update(setup, a)
    a.save_checkpoint(tmp_path)
    b = lora_learner(setup, zero_stage=stage)
    b.load_checkpoint(tmp_path)
    assert max_abs_diff(adapter_tensors(a), adapter_tensors(b)) == 0.0
    after_a, after_b = update(setup, a), update(setup, b)
    rel = metric_rel_tolerance(setup)
    for key in ("loss/policy", "grad/norm"):
        assert after_b[key] == pytest.approx(after_a[key], rel=rel, abs=rel), key


def test_zero3_with_lora_is_refused():
    with pytest.raises(ValueError, match="ZeRO-3"):
        LearnerConfig(backend="deepspeed", zero_stage=3, lora=LORA)
