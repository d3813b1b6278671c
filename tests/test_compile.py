"""``sampler.compile``: the same draws and logprobs as the plain module's decode, to the float32
summation-order tolerance (inductor fuses and reorders the same sums).

The compiled wrapper shares the module's weights, so weight syncs reach it. There is no learner
counterpart: compiling the learner's passes measured no faster inside a run on 2 CPU cores
(docs/engines.md), so it is not offered.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from tests.learner_helpers import micro_policy, mixed_length_problems
from tests.tolerance import order_tolerance, reduction_depth
from workbench.config import RunConfig, SamplerConfig
from workbench.rollout.hf import HFSampler
from workbench.rollout.kv_cache import cache_kwargs

# Raised inside torch while inductor loads (torch/jit/_script.py), not by this project's code.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def sample(model, tok, compile_: bool, seed: int):
    sampler = HFSampler(model, tok, SamplerConfig(max_new_tokens=12, compile=compile_))
    return sampler, sampler.generate(mixed_length_problems(6), 4, temperature=1.0, seed=seed)


@pytest.mark.slow
def test_the_compiled_decode_draws_the_plain_decodes_tokens_with_its_logprobs():
    """Same seed, same RNG consumption: the same draws wherever the two distributions agree, which is
    everywhere but within the order tolerance of a bucket edge (see tests/test_lean_decode.py)."""
    model, tok = micro_policy()
    _, plain = sample(model, tok, False, seed=7)
    sampler, compiled = sample(model, tok, True, seed=7)
    assert sampler.decoding_model() is not model and sampler.decoding_model()._orig_mod is model
    same_rows = [i for i in range(24) if torch.equal(plain.completion_ids[i], compiled.completion_ids[i])]
    assert len(same_rows) >= 22
    # Error analysis (tests/tolerance.py): per logit ≤ (reduction depth + positions)·eps32·(|logp| + 1).
    tol = order_tolerance(
        reduction_depth(model) + plain.input_ids.shape[1], float(plain.sampler_logp.abs().max()) + 1.0
    )
    rows = torch.tensor(same_rows)
    assert (plain.sampler_logp[rows] - compiled.sampler_logp[rows]).abs().max() <= tol
    with torch.no_grad():  # a weight change reaches the compiled wrapper: it shares the module's weights
        model.lm_head.weight.mul_(3.0)
    changed = sampler.generate(mixed_length_problems(6), 4, temperature=1.0, seed=7)
    assert not torch.allclose(changed.sampler_logp, compiled.sampler_logp)


def test_the_cache_keyword_is_read_through_compiles_wrapper():
    model, _ = micro_policy()
    wrapped = torch.compile(model, dynamic=True)  # wrapping compiles nothing until it is called
    assert cache_kwargs(wrapped, "c") == cache_kwargs(model, "c")


@pytest.mark.parametrize(
    ("section", "fields", "message"),
    [
        ("sampler", {"compile": True, "decode": "generate"}, "sampler.compile applies to sampler.backend=hf with"),
        ("sampler", {"compile": True, "backend": "vllm"}, "sampler.compile applies to sampler.backend=hf with"),
    ],
)
def test_compile_is_refused_where_it_does_not_apply(section, fields, message):
    with pytest.raises(ValidationError, match=message):
        RunConfig.model_validate({section: fields})


def test_compiling_is_off_by_default_and_in_the_run_key():
    assert not RunConfig().sampler.compile
    # compiled sums are not bit-identical: a compiled run is another run
    assert RunConfig().run_key() != RunConfig.model_validate({"sampler": {"compile": True}}).run_key()
