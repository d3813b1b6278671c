"""The lean decode loop (``sampler.decode: lean``) against the reference, transformers' ``generate``."""

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from tests.learner_helpers import micro_policy, mixed_length_problems
from tests.tolerance import order_tolerance, reduction_depth
from workbench.config import LearnerConfig, SamplerConfig
from workbench.rollout.decode import sampling_scores
from workbench.rollout.hf import HFSampler
from workbench.train.learner import TorchLearner


@pytest.fixture(scope="module")
def policy():
    return micro_policy()


problems = mixed_length_problems


def both(model, tok, group_size, temperature, top_p=1.0, max_new_tokens=12, n=6):
    out = {}
    for decode in ("generate", "lean"):
        sampler = HFSampler(model, tok, SamplerConfig(decode=decode, max_new_tokens=max_new_tokens, top_p=top_p))
        out[decode] = sampler.generate(problems(n), group_size, temperature=temperature, seed=7)
    return out["generate"], out["lean"]


def cache_order_tolerance(model, rollouts, temperature: float) -> float:
    """Error analysis: both paths run the same float32 forward; only the order of its sums differs (the
    prompt is run once per group, not once per row; a static cache adds masked, zero-weight keys). Per
    logit: ≤ (reduction depth + positions)·eps32·magnitude (tests/tolerance.py); magnitude: the largest
    |logp| seen plus 1 (the log-sum-exp), scaled by 1/temperature (a logit enters logp that way)."""
    operands = reduction_depth(model) + rollouts.input_ids.shape[1]
    return order_tolerance(operands, (float(rollouts.sampler_logp.abs().max()) + 1.0) / temperature)


def test_greedy_ids_equal_and_logprobs_within_tolerance(policy):
    model, tok = policy
    ref, lean = both(model, tok, group_size=1, temperature=0)  # generate allows greedy with one sequence only
    assert torch.equal(ref.completion_ids, lean.completion_ids)
    assert torch.equal(ref.mask, lean.mask)
    tol = cache_order_tolerance(model, ref, 1.0)  # greedy: the raw logits (temperature 1)
    assert (ref.sampler_logp - lean.sampler_logp).abs().max() <= tol


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_sampled_tokens_and_logprobs_match_generate(policy, temperature, top_p):
    """Same seed, same RNG consumption (one multinomial over every row per step): the same draws.

    A draw can only differ where the two distributions differ, i.e. by the order tolerance below (~1e-4
    of a probability): a uniform draw lands that close to a bucket edge with probability ~V·tol per token.
    So rows must agree (at least 90% of them; here all do), and where a row agrees its logprobs agree."""
    model, tok = policy
    ref, lean = both(model, tok, group_size=4, temperature=temperature, top_p=top_p)
    assert ref.completion_ids.shape[0] == lean.completion_ids.shape[0] == 24
    same_rows = [
        i
        for i in range(24)
        if ref.completion_ids.shape == lean.completion_ids.shape
        and torch.equal(ref.completion_ids[i], lean.completion_ids[i])
    ]
    assert len(same_rows) >= 22
    tol = cache_order_tolerance(model, ref, temperature)
    rows = torch.tensor(same_rows)
    assert (ref.sampler_logp[rows] - lean.sampler_logp[rows]).abs().max() <= tol


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_lean_sampler_logprobs_equal_learner_logprobs(policy, temperature):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, temperature=temperature))
    assert sampler.cfg.decode == "lean"  # the default
    rollouts = sampler.generate(problems(), 4, temperature=temperature, seed=0)
    with torch.no_grad():
        logp = learner.logprobs(rollouts, slice(None), temperature, with_entropy=False)[0].cpu()
    on = rollouts.mask.bool()
    tol = cache_order_tolerance(model, rollouts, temperature)
    assert (logp[on] - rollouts.sampler_logp[on]).abs().max() <= tol
    assert (rollouts.sampler_logp[~on] == 0).all()


def test_finished_rows_get_pad_and_decoding_stops_when_all_are_done(policy):
    """An EOS-heavy policy: raise the EOS logit so most rows end early (EOS then pad, as generate writes)."""
    model, tok = policy
    eos = tok.eos_token_id

    def eos_bias(module, args, output):  # the embeddings are tied: bias the logits, not a weight row
        output[..., eos] += 4.0
        return output

    handle = model.lm_head.register_forward_hook(eos_bias)
    try:
        ref, lean = both(model, tok, group_size=4, temperature=1.0, max_new_tokens=40)
    finally:
        handle.remove()
    assert lean.completion_ids.shape[1] < 40  # every row ended before the budget: the loop stopped early
    assert lean.completion_ids.shape == ref.completion_ids.shape
    for row, mask in zip(lean.completion_ids, lean.mask, strict=True):
        after = row[int(mask.sum()) :]
        assert (after == tok.pad_token_id).all()


def test_sampling_scores_equal_transformers_warpers():
    """The run's temperature and top-p cut exactly as transformers' warpers (same ops: bit-for-bit)."""
    torch.manual_seed(0)
    logits = torch.randn(5, 100) * 3
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.5, 0.3), (1.3, 0.99)]:
        expected = logits
        if temperature != 1.0:
            expected = TemperatureLogitsWarper(temperature)(None, expected)
        if top_p < 1.0:
            expected = TopPLogitsWarper(top_p)(None, expected)
        assert torch.equal(sampling_scores(logits, temperature, top_p), expected)


def test_top_p_hand_computed():
    # probs 0.5, 0.3, 0.2: top-p 0.6 keeps the two most likely (0.5 alone < 0.6); top-p 0.5 keeps one.
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    assert torch.isinf(sampling_scores(logits, 1.0, 0.6)).tolist() == [[True, False, False]]
    assert torch.isinf(sampling_scores(logits, 1.0, 0.5)).tolist() == [[True, False, True]]
