"""The KV-cache keyword follows the installed transformers (``cache`` from 5.24, ``past_key_values``
before): the lean sampler and learner run without the deprecation warning on either."""

from __future__ import annotations

import inspect
import warnings

import torch

from tests.learner_helpers import micro_policy, mixed_length_problems
from workbench.config import SamplerConfig
from workbench.rollout.hf import HFSampler
from workbench.rollout.kv_cache import cache_kwargs
from workbench.train.logprobs import sequence_logprobs


def test_the_keyword_is_the_one_the_installed_forward_takes_and_wrappers_are_looked_through():
    model, _ = micro_policy()
    taken = inspect.signature(type(model).forward).parameters
    (keyword,) = cache_kwargs(model, None)
    assert keyword in taken and keyword in ("cache", "past_key_values")

    class Engine:  # DeepSpeed's engine keeps the model as .module and forwards *args, **kwargs
        module = model

        def forward(self, *args, **kwargs): ...

    assert cache_kwargs(Engine(), None) == {keyword: None}


def test_lean_decode_and_learner_forward_raise_no_deprecation_warning():
    model, tok = micro_policy()
    sampler = HFSampler(model, tok, SamplerConfig(decode="lean", max_new_tokens=6))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # 5.24: "`past_key_values` is deprecated"
        warnings.simplefilter("error", DeprecationWarning)
        rollouts = sampler.generate(mixed_length_problems(3), 2, temperature=1.0, seed=0)
        with torch.no_grad():
            logp, _ = sequence_logprobs(model, rollouts, slice(None), 1.0)
    assert torch.isfinite(logp).all()
