"""Teacher-forced log-probabilities of sampled completions: what every learner backend and the
reference policy compute from a model's forward pass."""

from __future__ import annotations

import torch

from workbench.algorithms import entropy_from_logits
from workbench.batch import Rollouts


def sequence_logprobs(model, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                      with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced logp [b, T] of the sampled tokens and entropy [b, T] of the sampling distribution."""
    input_ids = rollouts.input_ids[rows]  # [b, P+T]
    attention = rollouts.attention_mask[rows]  # [b, P+T]
    # Left padding: positions count real tokens only, exactly as generate() numbered them.
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    p = rollouts.prompt_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, p - 1 : -1].float() / temperature  # [b, T, V] predicts each response token
    logp = torch.log_softmax(logits, dim=-1).gather(-1, rollouts.completion_ids[rows].unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logp, entropy
