"""A fixed micro policy and batch for learner tests (torch and DeepSpeed use the same one)."""

from __future__ import annotations

import random

import torch

from workbench.config import SamplerConfig, TinyModelConfig
from workbench.models.tiny import init_tiny_model
from workbench.models.tokenizer import build_char_tokenizer
from workbench.rollout.hf import HFSampler
from workbench.tasks import ArithmeticTask
from workbench.train.learner import TorchLearner


def micro_policy():
    """(model, tokenizer): a 2-layer micro Llama for sampler/learner equality tests."""
    tok = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, seed=3)
    return init_tiny_model(cfg, len(tok), tok.pad_token_id, tok.eos_token_id), tok


def mixed_length_problems(n=6):
    """Prompts of different lengths: they exercise left padding."""
    return ArithmeticTask(digits=3, ops="+-*", eval_size=10).sample_train(n, random.Random(0))


class GradRecordingLearner(TorchLearner):
    """The torch learner, keeping a copy of each accumulated gradient before it is applied."""

    def step(self) -> float:
        self.grads = [p.grad.detach().clone() for p in self.model.parameters()]
        return super().step()


def micro_policy_batch():
    """(model, tokenizer, problems, rollouts, advantages): a 1-layer micro Llama, 12 sampled
    completions (3 problems x 4) and fixed random advantages."""
    tok = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=5)
    model = init_tiny_model(cfg, len(tok), tok.pad_token_id, tok.eos_token_id)
    problems = ArithmeticTask(digits=2, ops="+-", eval_size=10).sample_train(3, random.Random(1))
    rollouts = HFSampler(model, tok, SamplerConfig(max_new_tokens=8)).generate(problems, 4, temperature=1.0, seed=3)
    advantages = torch.randn(len(rollouts.texts), generator=torch.Generator().manual_seed(0))
    return model, tok, problems, rollouts, advantages
