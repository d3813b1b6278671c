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


def on_model_device(model, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` where ``model``'s weights are. The sampler returns its rollouts on the CPU and the run
    moves each batch to the learner once (``train_batch``), where this is a no-op; a caller scoring a
    sampler's rollouts directly (the step-0 gate's tests, a notebook) needs no ``.to`` of its own."""
    device = next(model.parameters()).device
    return tuple(t.to(device) for t in tensors)


def sequence_logprobs(model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                      with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced logp [b, T] of the sampled tokens and entropy [b, T] of the sampling distribution."""
    input_ids, attention, completion = on_model_device(
        model, rollouts.input_ids[rows], rollouts.attention_mask[rows], rollouts.completion_ids[rows])  # [b, P+T] x2, [b, T]
    # Left padding: positions count real tokens only, exactly as generate() numbered them.
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    p = rollouts.prompt_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, p - 1 : -1].float() / temperature  # [b, T, V] predicts each response token
    logp = torch.log_softmax(logits, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logp, entropy


def lean_sequence_logprobs(model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                           with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` without recomputing shared prompts or padding: same shapes, same values
    to float tolerance. Entries past a row's response (and past the micro-batch's longest) are 0."""
    prompt_ids, prompt_mask, completion, mask = on_model_device(  # [b, P] x2, [b, T] x2
        model, rollouts.prompt_ids[rows], rollouts.prompt_mask[rows], rollouts.completion_ids[rows], rollouts.mask[rows])
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
    distinct, owner = torch.unique(torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1), dim=0,
                                   return_inverse=True)
    cache = DynamicCache(config=model.config)
    distinct_mask = distinct[:, p:]
    head = model(input_ids=distinct[:, :p], attention_mask=distinct_mask,
                 position_ids=(distinct_mask.cumsum(dim=1) - 1).clamp(min=0), **cache_kwargs(model, cache), use_cache=True,
                 logits_to_keep=1).logits[owner]  # [b, 1, V] predicts the first response token
    pieces = [head]
    if t > 1:  # the response's own positions predict the tokens after them
        shared = DynamicCache(config=model.config)
        for index, layer in enumerate(cache.layers):
            shared.update(layer.keys[owner], layer.values[owner], index)
        tail = model(input_ids=completion[:, :-1], attention_mask=attention[:, :-1],
                     position_ids=positions[:, p:-1], **cache_kwargs(model, shared), use_cache=True).logits
        pieces.append(tail)  # [b, t-1, V]
    logits = torch.cat(pieces, dim=1).float() / temperature  # [b, t, V]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)  # [b, t]
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    if t < full_t:  # back to the batch's width: the dropped columns are outside every response
        logp = torch.nn.functional.pad(logp, (0, full_t - t))
        entropy = None if entropy is None else torch.nn.functional.pad(entropy, (0, full_t - t))
    return logp, entropy
