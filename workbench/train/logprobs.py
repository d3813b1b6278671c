"""Teacher-forced log-probabilities of sampled completions: what every learner backend and the
reference policy compute from a model's forward pass.

Two ways to the same numbers (``learner.forward``):

* ``full`` (``sequence_logprobs``), the reference: one forward over [prompt | completion] of every row.
* ``lean`` (``lean_sequence_logprobs``): GRPO samples G completions per prompt, so a batch repeats each
  prompt G times. Each distinct prompt of the micro-batch is run once; its keys/values (with their
  autograd history) are handed to its completions, which run on top of them. Columns that are padding
  in every row of the micro-batch (left of the longest prompt, right of the longest completion) are
  dropped first. Same sums in another order: equal to float tolerance (tests/test_lean_learner.py).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from workbench.algorithms import entropy_from_logits
from workbench.batch import Rollouts
from workbench.rollout.kv_cache import cache_kwargs

ENTROPY_CHUNK_ELEMENTS = 2**26  # 256 MB of float32 logits per entropy chunk (its softmax is one more)


class TokenLogprob(torch.autograd.Function):
    """``log_softmax(z)[..., id]`` per position, ``z`` [..., V], ``ids`` [...]: the same value and gradient
    (d/dz = onehot(id) − softmax(z), times the incoming gradient) to a few float32 roundings
    (tests/test_logprobs.py), but its backward keeps only ``z`` itself and the logsumexp [...], and builds the
    gradient in one new [..., V] tensor. Autograd's log_softmax + gather keeps a second [..., V] (the output)
    and allocates three in its backward (the scatter's zeros, the softmax, their sum)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(z, dim=-1)  # [...]
        ctx.save_for_backward(z, ids, lse)
        return z.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        z, ids, lse = ctx.saved_tensors
        dz = (z - lse.unsqueeze(-1)).exp_()  # softmax(z): the one new [..., V]
        dz.mul_(-grad.unsqueeze(-1))
        dz.scatter_add_(-1, ids.unsqueeze(-1), grad.unsqueeze(-1))
        return dz, None


def token_logprobs(
    pieces: list[torch.Tensor], completion: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p [b, t] of ``completion`` [b, t] under logits given as ``pieces`` ([b, k_i, V] each, consecutive
    positions, Σ k_i = t), and the entropy [b, t] of the sampling distribution (logits / temperature).

    Memory, since at a real vocabulary one [b, t, V] float32 tensor is gigabytes (5 GB at 64 x 130 x 151,936,
    docs/engines.md): the pieces are never concatenated; ``TokenLogprob`` keeps only z for its backward and
    writes the gradient into one new tensor; temperature 1 makes no scaled copy; the entropy, a metric without
    gradient, is computed a few rows at a time. ``benchmarks/bench_learner_memory.py`` measures the peak."""
    logps, entropies, start = [], [], 0
    for logits in pieces:
        k = logits.shape[1]
        z = logits.float()  # half-precision logits: scored in float32
        if temperature != 1.0:
            z = z / temperature
        logps.append(TokenLogprob.apply(z, completion[:, start : start + k]))  # [b, k]
        if with_entropy:
            rows = max(1, ENTROPY_CHUNK_ELEMENTS // max(1, k * z.shape[-1]))
            with torch.no_grad():
                entropies.append(torch.cat([entropy_from_logits(chunk) for chunk in z.detach().split(rows)]))
        start += k
    logp = logps[0] if len(logps) == 1 else torch.cat(logps, dim=1)
    if not with_entropy:
        return logp, None
    return logp, entropies[0] if len(entropies) == 1 else torch.cat(entropies, dim=1)


def on_model_device(model, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` where ``model``'s weights are. The sampler returns its rollouts on the CPU and the run
    moves each batch to the learner once (``train_batch``), where this is a no-op; a caller scoring a
    sampler's rollouts directly (the step-0 gate's tests, a notebook) needs no ``.to`` of its own."""
    device = next(model.parameters()).device
    return tuple(t.to(device) for t in tensors)


def sequence_logprobs(
    model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced logp [b, T] of the sampled tokens and entropy [b, T] of the sampling distribution."""
    input_ids, attention, completion = on_model_device(
        model, rollouts.input_ids[rows], rollouts.attention_mask[rows], rollouts.completion_ids[rows]
    )  # [b, P+T] x2, [b, T]
    # Left padding: positions count real tokens only, exactly as generate() numbered them.
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    p = rollouts.prompt_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    return token_logprobs(
        [logits[:, p - 1 : -1]], completion, temperature, with_entropy
    )  # predicts each response token


def lean_sequence_logprobs(
    model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` without recomputing shared prompts or padding: same shapes, same values
    to float tolerance. Entries past a row's response (and past the micro-batch's longest) are 0."""
    prompt_ids, prompt_mask, completion, mask = on_model_device(  # [b, P] x2, [b, T] x2
        model, rollouts.prompt_ids[rows], rollouts.prompt_mask[rows], rollouts.completion_ids[rows], rollouts.mask[rows]
    )
    b, full_t = completion.shape
    # Drop columns that are padding in every row: left of the longest prompt, right of the longest response.
    first = int(prompt_mask.any(dim=0).int().argmax())  # the first column some row's prompt reaches
    prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
    t = max(1, int(mask.sum(dim=1).max()))
    completion, mask = completion[:, :t], mask[:, :t]
    p = prompt_ids.shape[1]
    attention = torch.cat([prompt_mask, mask.to(prompt_mask.dtype)], dim=1)  # [b, p+t]
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # as sequence_logprobs numbers them

    # Each distinct prompt once; ``owner[i]`` is row i's prompt.
    distinct, owner = torch.unique(
        torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1), dim=0, return_inverse=True
    )
    cache = DynamicCache(config=model.config)
    distinct_mask = distinct[:, p:]
    head = model(
        input_ids=distinct[:, :p],
        attention_mask=distinct_mask,
        position_ids=(distinct_mask.cumsum(dim=1) - 1).clamp(min=0),
        **cache_kwargs(model, cache),
        use_cache=True,
        logits_to_keep=1,
    ).logits[owner]  # [b, 1, V] predicts the first response token
    pieces = [head]
    if t > 1:  # the response's own positions predict the tokens after them
        shared = DynamicCache(config=model.config)
        for index, layer in enumerate(cache.layers):
            shared.update(layer.keys[owner], layer.values[owner], index)
        tail = model(
            input_ids=completion[:, :-1],
            attention_mask=attention[:, :-1],
            position_ids=positions[:, p:-1],
            **cache_kwargs(model, shared),
            use_cache=True,
        ).logits
        pieces.append(tail)  # [b, t-1, V]
    logp, entropy = token_logprobs(pieces, completion, temperature, with_entropy)  # [b, t]
    if t < full_t:  # back to the batch's width: the dropped columns are outside every response
        logp = torch.nn.functional.pad(logp, (0, full_t - t))
        entropy = None if entropy is None else torch.nn.functional.pad(entropy, (0, full_t - t))
    return logp, entropy
