"""``TokenLogprob``: the learner's log p of each sampled token, with a backward that keeps one copy of the
logits. Same value and gradient as autograd's ``log_softmax(z).gather`` (the reference)."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tolerance import EPS32, order_tolerance
from workbench.train.logprobs import TokenLogprob, token_logprobs


def reference(z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(z, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def test_hand_computed_value_and_gradient():
    """z = [0, ln 3] over two tokens: softmax = [1/4, 3/4]; token 1: log p = ln 3/4; d/dz = [-1/4, 1/4]."""
    z = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64, requires_grad=True)
    logp = TokenLogprob.apply(z, torch.tensor([1]))
    assert torch.allclose(logp, torch.tensor([math.log(0.75)], dtype=torch.float64), atol=1e-15, rtol=0)
    logp.sum().backward()
    assert torch.allclose(z.grad, torch.tensor([[-0.25, 0.25]], dtype=torch.float64), atol=1e-15, rtol=0)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    positions=st.integers(1, 6),
    vocab=st.integers(2, 300),
    scale=st.floats(0.1, 30.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_same_value_and_gradient_as_log_softmax_gather(rows, positions, vocab, scale, seed):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(rows, positions, vocab, generator=g) * scale).requires_grad_()
    ids = torch.randint(0, vocab, (rows, positions), generator=g)
    upstream = torch.randn(rows, positions, generator=g)
    mine = TokenLogprob.apply(z, ids)
    (mine * upstream).sum().backward()
    grad_mine, z.grad = z.grad.clone(), None
    ref = reference(z, ids)
    (ref * upstream).sum().backward()
    # Error analysis (tests/tolerance.py): both are z_id − logsumexp(z), a max, a sum of V exponentials and a
    # log, in two orders: ≤ (V + 4)·eps32 of the magnitude |z| + |log p| + 1 (the terms subtracted).
    magnitude = float(z.detach().abs().max() + ref.detach().abs().max()) + 1.0
    assert torch.allclose(mine, ref, atol=order_tolerance(vocab + 4, magnitude), rtol=0)
    # gradient: g·(onehot − softmax); softmax = exp(z − lse), whose argument carries the error above, so
    # exp's relative error is ≤ that absolute error (+ one rounding); times |g| ≤ max|upstream|.
    grad_tol = order_tolerance(vocab + 6, magnitude) * (float(upstream.abs().max()) + EPS32)
    assert torch.allclose(grad_mine, z.grad, atol=grad_tol, rtol=0)


def test_pieces_and_chunked_entropy_equal_one_whole_pass():
    """The lean forward hands the head and the tail logits as two pieces; the result is the whole pass's."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 7, 50, generator=g) * 4
    ids = torch.randint(0, 50, (3, 7), generator=g)
    whole, whole_entropy = token_logprobs([z], ids, 0.7, True)
    split, split_entropy = token_logprobs([z[:, :1], z[:, 1:]], ids, 0.7, True)
    assert torch.equal(whole, split) and torch.equal(whole_entropy, split_entropy)  # same ops per position
    assert torch.allclose(
        whole, reference(z / 0.7, ids), atol=order_tolerance(54, float((z / 0.7).abs().max()) * 2 + 1)
    )
    assert token_logprobs([z], ids, 1.0, False)[1] is None
