"""The lean learner forward (``learner.forward: lean``) against the reference (``full``): same logprobs,
entropy, gradient and update metrics to float32 summation-order tolerance."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.learner_helpers import GradRecordingLearner
from tests.tolerance import order_tolerance, reduction_depth
from workbench.config import AlgorithmConfig, LearnerConfig, SamplerConfig, TinyModelConfig
from workbench.models.tiny import init_tiny_model
from workbench.models.tokenizer import build_char_tokenizer
from workbench.rollout.hf import HFSampler
from workbench.tasks import ArithmeticTask
from workbench.train.learner import ReferencePolicy, TorchLearner
from workbench.train.logprobs import lean_sequence_logprobs, sequence_logprobs
from workbench.train.update import policy_update


def update(learner, rollouts, advantages, algo: AlgorithmConfig) -> dict[str, float]:
    """One ``policy_update`` on the batch. Its signature is being restructured in parallel (a
    ``TrainBatch`` argument): this works with either, so the test survives the merge."""
    try:
        from workbench.batch import TrainBatch
    except ImportError:  # the signature before the restructuring
        return policy_update(learner, rollouts, advantages, algo, 1.0, torch.Generator().manual_seed(0))
    return policy_update(learner, TrainBatch.of(rollouts, advantages), algo, 1.0, torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def setup():
    """A 2-layer micro Llama; 5 prompts of different lengths (left padding) x 4 completions; an EOS bias
    while sampling so responses end at different lengths (right padding inside the batch)."""
    tok = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, seed=11)
    model = init_tiny_model(cfg, len(tok), tok.pad_token_id, tok.eos_token_id)
    problems = ArithmeticTask(digits=3, ops="+-*", eval_size=10).sample_train(5, random.Random(2))

    def eos_bias(module, args, output):
        output[..., tok.eos_token_id] += 2.5
        return output

    handle = model.lm_head.register_forward_hook(eos_bias)
    rollouts = HFSampler(model, tok, SamplerConfig(max_new_tokens=10)).generate(problems, 4, temperature=1.0, seed=1)
    handle.remove()
    lengths = rollouts.lengths
    assert lengths.min() < lengths.max()  # ragged responses
    assert rollouts.prompt_mask.sum(1).min() < rollouts.prompt_mask.shape[1]  # ragged prompts
    advantages = torch.randn(len(rollouts.texts), generator=torch.Generator().manual_seed(0))
    return model, rollouts, advantages


def tolerance(model, rollouts, magnitude: float) -> float:
    """Error analysis (tests/tolerance.py): the lean forward computes the reference's float32 sums in
    another order (a prompt's keys/values computed in a smaller batch, all-padding keys left out instead
    of weighted by exp(-inf) = 0). Each output is the end of a chain of at most (reduction depth +
    positions) summed operands, so the two differ by ≤ that count·eps32·magnitude."""
    return order_tolerance(reduction_depth(model) + rollouts.input_ids.shape[1], magnitude)


@pytest.mark.parametrize("rows", ["all", "subset"])
def test_logprobs_and_entropy_equal_the_full_forward(setup, rows):
    model, rollouts, _ = setup
    # subset: a micro-batch of short rows, so columns are dropped on both sides (and a prompt appears once)
    select = slice(None) if rows == "all" else torch.tensor([0, 1, 5, 17])
    with torch.no_grad():
        ref_logp, ref_entropy = sequence_logprobs(model, rollouts, select, 1.0)
        logp, entropy = lean_sequence_logprobs(model, rollouts, select, 1.0)
    assert logp.shape == ref_logp.shape == entropy.shape
    on = rollouts.mask[select].bool()
    # magnitude: |logp| + 1 (the log-sum-exp); entropy ≤ log V ≈ 4.6 plus the same
    assert (logp[on] - ref_logp[on]).abs().max() <= tolerance(model, rollouts, float(ref_logp[on].abs().max()) + 1)
    assert (entropy[on] - ref_entropy[on]).abs().max() <= tolerance(model, rollouts, float(ref_entropy.max()) + 1)
    width = int(rollouts.mask[select].sum(1).max())
    assert (logp[:, width:] == 0).all()  # beyond the micro-batch's longest response: nothing computed


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_any_micro_batch_gives_the_full_forwards_logprobs(setup, data):
    """Property: for any subset of rows, in any order (a micro-batch of a shuffled minibatch), the lean
    forward's logprobs are the full forward's, row by row, within the summation-order tolerance."""
    model, rollouts, _ = setup
    n = rollouts.completion_ids.shape[0]
    rows = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)))
    with torch.no_grad():
        ref, _ = sequence_logprobs(model, rollouts, rows, 0.7, with_entropy=False)
        logp, _ = lean_sequence_logprobs(model, rollouts, rows, 0.7, with_entropy=False)
    on = rollouts.mask[rows].bool()
    # magnitude: (|logp| + 1) / temperature: a logit enters logp scaled by 1/0.7
    assert (logp[on] - ref[on]).abs().max() <= tolerance(model, rollouts, (float(ref[on].abs().max()) + 1) / 0.7)
    assert logp.shape == ref.shape


def test_gradient_and_metrics_equal_the_full_forward(setup):
    """One GRPO update (token-mean, clip 0.2), micro-batches of 7: same accumulated gradient, same metrics."""
    model, rollouts, advantages = setup
    algo = AlgorithmConfig(preset="grpo", agg_mode="token-mean")
    runs = {}
    for forward in ("full", "lean"):
        learner = GradRecordingLearner(copy.deepcopy(model), LearnerConfig(forward=forward, micro_batch_size=7))
        metrics = update(learner, rollouts, advantages, algo)
        runs[forward] = learner.grads, metrics
    (full_grads, full_m), (lean_grads, lean_m) = runs["full"], runs["lean"]
    # A weight's gradient sums over every position of the batch, each term the end of a reduction chain:
    # (positions + depth)·eps32 of the largest element (the bound tests/test_grad_accumulation.py derives).
    operands = rollouts.input_ids.numel() + reduction_depth(model)
    scale = max(float(g.abs().max()) for g in full_grads)
    worst = max(float((a - b).abs().max()) for a, b in zip(full_grads, lean_grads, strict=True))
    assert worst <= order_tolerance(operands, scale)
    rel = order_tolerance(operands, 1.0)  # metrics: sums of values ≤ 1 after their normaliser
    for key in ("loss/policy", "grad/norm", "entropy/mean", "mismatch/kl", "policy/ratio_mean"):
        assert lean_m[key] == pytest.approx(full_m[key], rel=rel, abs=rel), key


def test_single_step_update_runs_one_forward(setup, monkeypatch):
    """One optimizer step per batch: the loss's forward is also the old policy's (no extra no-grad pass)."""
    model, rollouts, advantages = setup
    learner = TorchLearner(copy.deepcopy(model), LearnerConfig())
    calls = []
    original = learner.logprobs
    monkeypatch.setattr(learner, "logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    metrics = update(learner, rollouts, advantages, AlgorithmConfig(preset="grpo", agg_mode="token-mean"))
    assert len(calls) == 1
    assert metrics["policy/ratio_mean"] == 1.0  # ratio against its own detached copy: exactly 1


def test_full_is_selectable_and_lean_is_the_default():
    assert LearnerConfig().forward == "lean"
    assert LearnerConfig(forward="full").forward == "full"
    with pytest.raises(ValueError):
        LearnerConfig(forward="packed")


def test_reference_policy_runs_the_lean_forward(setup):
    """The reference policy (a frozen copy, eval mode) gives the learner's logprobs at equal weights."""
    model, rollouts, _ = setup
    learner = TorchLearner(copy.deepcopy(model), LearnerConfig())
    reference = ReferencePolicy(learner.policy_copy())
    assert reference.forward is lean_sequence_logprobs
    with torch.no_grad():
        logp = learner.logprobs(rollouts, slice(None), 1.0, with_entropy=False)[0].cpu()
    on = rollouts.mask.bool()
    ref = reference.logprobs(rollouts, 1.0).cpu()
    assert (ref[on] - logp[on]).abs().max() <= tolerance(model, rollouts, float(logp[on].abs().max()) + 1)
