"""A lean autoregressive decode loop over an HF causal LM with a KV cache (``sampler.decode: lean``).

``generate`` spends most of a tiny model's step in per-token Python around the forward pass (logits
processors, stopping criteria, input preparation, keeping every step's [B, V] scores and the
log-softmax over all of them afterwards). This loop keeps only what the sampler needs: one forward
per token through a ``DynamicCache``, the run's temperature and top-p, one draw, the drawn token's logp.

It reproduces ``generate``'s sampling exactly: the same forward inputs (left-padded prompt, positions
counting real tokens, logits of the last position only), the same distribution (logits / temperature,
then top-p as transformers' ``TopPLogitsWarper`` cuts it), and the same RNG consumption (one
``torch.multinomial`` over every row per step, finished rows included, until every row has emitted
EOS or the token budget is spent). Finished rows get the pad token, as in ``generate``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, StaticCache

from workbench.rollout.kv_cache import cache_kwargs


def sampling_scores(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The logits of the sampling distribution [B, V]: scaled by 1/temperature, then tokens outside the
    top-p nucleus set to -inf (the smallest set whose mass reaches ``top_p``; at least one token)."""
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        # The same cut as transformers' TopPLogitsWarper: ascending sort, drop the low tail whose mass <= 1 - top_p.
        sorted_scores, sorted_idx = torch.sort(scores, descending=False)
        tail_mass = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = tail_mass <= (1 - top_p)
        drop_sorted[..., -1:] = False  # keep the most likely token
        drop = drop_sorted.scatter(1, sorted_idx, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def shared_prefill(
    model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int, max_new_tokens: int
) -> tuple[torch.Tensor, StaticCache]:
    """Run each distinct prompt once and hand its keys/values to its ``group_size`` completions.

    Returns the next-token logits [n·G, V] (rows grouped by prompt, like ``num_return_sequences``) and a
    ``StaticCache`` for n·G rows holding the prompts, with room for ``max_new_tokens`` more: written in
    place each step, where a ``DynamicCache`` re-concatenates (copies) every layer's whole cache per token."""
    prefix = DynamicCache(config=model.config)
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=prompt_positions(prompt_mask),
        **cache_kwargs(model, prefix),
        use_cache=True,
        logits_to_keep=1,
    )
    cache = StaticCache(config=model.config, max_cache_len=prompt_ids.shape[1] + max_new_tokens)
    for index, layer in enumerate(prefix.layers):
        cache.update(
            layer.keys.repeat_interleave(group_size, dim=0), layer.values.repeat_interleave(group_size, dim=0), index
        )
    return out.logits[:, -1].repeat_interleave(group_size, dim=0), cache


def prompt_positions(prompt_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only (left padding), as generate numbers them; pads get 1 like there."""
    return (prompt_mask.long().cumsum(-1) - 1).masked_fill(prompt_mask == 0, 1)


@torch.no_grad()
def decode(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: int | list[int],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``group_size`` completions of up to ``max_new_tokens`` after each left-padded prompt
    [n, P]; temperature 0 is greedy. Rows are grouped by prompt. A row ends at any of ``stop_ids`` (EOS, and a
    chat template's end-of-turn token).

    Returns (completion ids [n·G, T], logp [n·G, T] of each drawn token under the sampling distribution),
    T <= max_new_tokens (shorter when every row ended early). Entries after a row's EOS hold the pad token
    (completion) and the pad token's logp (meaningless: the caller masks them)."""
    greedy = temperature == 0
    logits, cache = shared_prefill(model, prompt_ids, prompt_mask, group_size, max_new_tokens)
    mask = prompt_mask.repeat_interleave(group_size, dim=0)  # [B, P], grows by one column per token
    positions = prompt_positions(mask)[:, -1:]  # [B, 1] position of the last token fed
    batch = mask.shape[0]
    unfinished = torch.ones(batch, dtype=torch.long, device=mask.device)
    ones = torch.ones((batch, 1), dtype=mask.dtype, device=mask.device)
    tokens, logps = [], []
    with_cache = cache_kwargs(model, cache)  # one signature lookup, not one per token
    stops = torch.as_tensor(stop_ids, device=mask.device)
    for step in range(max_new_tokens):
        if step > 0:
            out = model(
                input_ids=tokens[-1].unsqueeze(-1),
                attention_mask=mask,
                position_ids=positions,
                **with_cache,
                use_cache=True,
            )
            logits = out.logits[:, -1]
        scores = logits.float() if greedy else sampling_scores(logits.float(), temperature, top_p)  # [B, V]
        if greedy:
            drawn = scores.argmax(dim=-1)
        else:
            drawn = torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)
        drawn = drawn * unfinished + pad_id * (1 - unfinished)  # finished rows: pad, as generate does
        logps.append(torch.log_softmax(scores, dim=-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1))
        tokens.append(drawn)
        unfinished = unfinished & (~torch.isin(drawn, stops)).long()
        if not bool(unfinished.any()):
            break
        mask = torch.cat([mask, ones], dim=-1)
        positions = positions + 1
    return torch.stack(tokens, dim=1), torch.stack(logps, dim=1)
