"""The sampler's logprobs must be the learner's logprobs for the same weights (float32)."""

import pytest
import torch

from tests.learner_helpers import micro_policy, mixed_length_problems
from tests.tolerance import EPS_BF16, order_tolerance, reduction_depth
from workbench.config import LearnerConfig, SamplerConfig
from workbench.rollout.hf import HFSampler, response_mask
from workbench.train.learner import TorchLearner


@pytest.fixture(scope="module")
def policy():
    return micro_policy()


problems = mixed_length_problems


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_equal_learner_logprobs(policy, temperature):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, temperature=temperature))
    rollouts = sampler.generate(problems(), 4, temperature=temperature, seed=0)
    with torch.no_grad():
        logp, entropy = (t.cpu() for t in learner.logprobs(rollouts, slice(None), temperature))  # rollouts: CPU
    on = rollouts.mask.bool()
    assert on.sum() > 0
    # Error analysis (tests/tolerance.py): generate (KV cache, one position at a time) and the teacher-forced
    # forward compute the same float32 sums in another order: ≤ (reduction depth + positions)·eps32 of the
    # logits' size, |logp|/temperature at most (a logit enters logp scaled by 1/temperature).
    operands = reduction_depth(model) + rollouts.input_ids.shape[1]
    tol = order_tolerance(operands, (float(logp[on].abs().max()) + 1.0) / temperature)
    assert torch.allclose(logp[on], rollouts.sampler_logp[on], atol=tol, rtol=0)
    assert (rollouts.sampler_logp[~on] == 0).all()
    assert (entropy[on] >= 0).all()


def test_rollout_shapes_and_groups(policy):
    model, tok = policy
    sampler = HFSampler(model, tok, SamplerConfig(max_new_tokens=5))
    r = sampler.generate(problems(3), 4, temperature=1.0, seed=1)
    assert r.completion_ids.shape == r.mask.shape == r.sampler_logp.shape == (12, 5)
    assert r.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert [p.prompt for p in r.problems[:4]] == [r.problems[0].prompt] * 4
    assert len(r.texts) == 12
    assert (r.truncated == (r.lengths == 5) & (r.completion_ids[:, -1] != tok.eos_token_id)).all()


def test_sampling_is_seeded(policy):
    model, tok = policy
    sampler = HFSampler(model, tok, SamplerConfig(max_new_tokens=6))
    a = sampler.generate(problems(2), 3, temperature=1.0, seed=5)
    b = sampler.generate(problems(2), 3, temperature=1.0, seed=5)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_greedy_is_deterministic_and_argmax(policy):
    model, tok = policy
    sampler = HFSampler(model, tok, SamplerConfig(max_new_tokens=4))
    r = sampler.generate(problems(2), 1, temperature=0, seed=0)
    r2 = sampler.generate(problems(2), 1, temperature=0, seed=99)
    assert torch.equal(r.completion_ids, r2.completion_ids)


def test_low_precision_sampler_keeps_its_own_copy_and_resyncs(policy):
    model, tok = policy
    learner = TorchLearner(model, LearnerConfig())
    sampler = HFSampler(learner.model, tok, SamplerConfig(dtype="bfloat16"))
    assert sampler.model is not learner.model
    assert next(sampler.model.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        next(learner.model.parameters()).add_(1.0)
    sampler.sync_weights(learner.model)
    a, b = next(sampler.model.parameters()), next(learner.model.parameters())
    # one rounding to bfloat16: ≤ eps_bf16/2 of each weight (eps, to be safe)
    assert torch.allclose(a.float(), b, atol=EPS_BF16 * float(b.detach().abs().max()), rtol=0)
    with torch.no_grad():
        next(learner.model.parameters()).sub_(1.0)


def test_response_mask_hand_computed():
    eos = 1
    completion = torch.tensor([[5, 6, 1, 0, 0], [5, 1, 0, 0, 0], [5, 6, 7, 8, 9], [1, 0, 0, 0, 0]])
    mask, truncated = response_mask(completion, eos)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, False, True, False]


# --- finding 8: the model directory's generation_config.json must not shape sampling ----------------

FLOAT32_EPS = torch.finfo(torch.float32).eps  # 1.19e-7


@pytest.fixture(scope="module")
def policy_with_generation_config(policy, tmp_path_factory):
    """The tiny policy saved with save_pretrained, next to a generation_config.json that, if applied,
    reshapes sampling: a repetition penalty and top-k truncation (as many shipped checkpoints do)."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    model, tok = policy
    path = tmp_path_factory.mktemp("policy_with_generation_config")
    model.save_pretrained(path)
    GenerationConfig(
        do_sample=True,
        repetition_penalty=1.8,
        top_k=3,
        top_p=0.9,
        no_repeat_ngram_size=2,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    ).save_pretrained(path)
    loaded = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    assert loaded.generation_config.repetition_penalty == 1.8 and loaded.generation_config.top_k == 3
    return loaded, tok


def float_floor_tolerance(model, rollouts) -> float:
    """Worst-case float32 difference between a KV-cached and a teacher-forced forward of the same weights.

    Only the order of summation differs, so the error of each logit is bounded by (length of its
    chain of reductions) x eps x (magnitude of the terms). The chain per layer: q.k over head_dim,
    softmax and attention-weighted sum over the context, o_proj over hidden, MLP up over hidden and down
    over intermediate; then lm_head over hidden and log_softmax over the vocabulary. Magnitude: the
    largest |logit| the learner sees, at least 1 (hidden states are RMS-normalised to ~1).
    """
    c = model.config
    context = rollouts.input_ids.shape[1]
    per_layer = c.hidden_size // c.num_attention_heads + 2 * context + 2 * c.hidden_size + c.intermediate_size
    chain = c.num_hidden_layers * per_layer + c.hidden_size + c.vocab_size
    with torch.no_grad():
        logits = model(
            input_ids=rollouts.input_ids.to(model.device), attention_mask=rollouts.attention_mask.to(model.device)
        ).logits
    magnitude = max(1.0, float(logits.abs().max()))
    return 2 * chain * FLOAT32_EPS * magnitude  # 2: the token's logit and the log-sum-exp both carry the error


def test_directory_generation_config_does_not_shape_sampling(policy_with_generation_config):
    model, tok = policy_with_generation_config
    learner = TorchLearner(model, LearnerConfig())
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=12, temperature=1.0))
    rollouts = sampler.generate(problems(), 4, temperature=1.0, seed=0)
    with torch.no_grad():
        logp = learner.logprobs(rollouts, slice(None), 1.0, with_entropy=False)[0].cpu()
    on = rollouts.mask.bool()
    tolerance = float_floor_tolerance(learner.model, rollouts)
    assert tolerance < 1e-2  # a floor, far below what top-k 3 or a 1.8 repetition penalty change (> 0.1)
    assert (logp[on] - rollouts.sampler_logp[on]).abs().max() <= tolerance
    # the directory's settings are restored on the model (the learner's module): only sampling ignores them
    assert model.generation_config.repetition_penalty == 1.8 and model.generation_config.top_k == 3


def test_directory_generation_config_does_not_shape_greedy_eval(policy, policy_with_generation_config):
    """Greedy decoding too: a repetition penalty or banned n-gram would change the argmax path."""
    plain, tok = policy
    shaped, _ = policy_with_generation_config
    a = HFSampler(plain, tok, SamplerConfig(max_new_tokens=12)).generate(problems(), 1, temperature=0, seed=0)
    b = HFSampler(shaped, tok, SamplerConfig(max_new_tokens=12)).generate(problems(), 1, temperature=0, seed=0)
    assert torch.equal(a.completion_ids, b.completion_ids)
