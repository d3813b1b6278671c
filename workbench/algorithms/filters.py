"""Batch-level units: which groups and tokens enter the loss.

``BATCH_FILTERS`` decide per group whether it is kept (DAPO dynamic sampling); the loop
oversamples and refills until the batch is full. What a batch filter judges is chosen by
``algorithm.filter_on`` (:data:`FILTER_INPUTS`): correctness by default, as DAPO §3.2 and verl's
DAPO recipe (``filter_groups.metric: acc``) do. ``TOKEN_FILTERS`` edit the loss mask.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from workbench.metrics.names import BATCH_FILTERED_FRAC, LENGTH_TRUNCATED_FRAC
from workbench.registry import Activity, Registry

BATCH_FILTERS: Registry = Registry(
    "batch filter",
    selected_by="algorithm.batch_filter",
    settings=("algorithm.filter_on", "algorithm.max_sampling_rounds"),
)
TOKEN_FILTERS: Registry = Registry("token filter", selected_by="algorithm.token_filters")


# filter_on -> the per-completion value a batch filter judges, from (total rewards [B], correct [B] bool).
# "correct": a group all right or all wrong is dropped even when shaping terms (a format bonus, a length
# penalty) spread its rewards; its advantages would only teach the shaping. "reward": the total shaped reward.
DEFAULT_FILTER_ON = "correct"
FILTER_INPUTS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "correct": lambda rewards, correct: correct.to(torch.float32),
    "reward": lambda rewards, correct: rewards,
}


def filter_input(filter_on: str | None, rewards: Tensor, correct: Tensor) -> Tensor:
    """The ``[B]`` values a batch filter judges under ``algorithm.filter_on`` (None: the default)."""
    filter_on = filter_on or DEFAULT_FILTER_ON
    if filter_on not in FILTER_INPUTS:
        raise ValueError(f"unknown filter_on {filter_on!r} (valid: {', '.join(FILTER_INPUTS)})")
    return FILTER_INPUTS[filter_on](rewards, correct)


@BATCH_FILTERS.register("zero_std", activity=Activity(BATCH_FILTERED_FRAC, "groups"))
def keep_nonzero_std(values: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO (Yu et al. 2025) §3.2 dynamic sampling: drop groups whose ``values`` are all equal.

    With ``values`` = correctness (the default ``filter_on``), these are the groups with accuracy
    0 or 1: no correctness signal to learn from, so they only dilute the batch.
    Returns a ``[B]`` bool mask, constant within each group.
    """
    keep = torch.zeros_like(values, dtype=torch.bool)  # [B]
    for g in group_ids.unique():
        members = group_ids == g
        keep[members] = bool((values[members] != values[members][0]).any())
    return keep


# the responses it masks are those that hit max_new_tokens (counted over every sampled response)
@TOKEN_FILTERS.register("overlong", activity=Activity(LENGTH_TRUNCATED_FRAC, "responses"))
def mask_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """DAPO (Yu et al. 2025) §3.4 overlong filtering: truncated responses get no gradient.

    A response cut off at ``max_new_tokens`` is not wrong, only unfinished; punishing it
    teaches the model to be short rather than right.
    """
    return mask * (~truncated).to(mask.dtype).unsqueeze(-1)  # [B, T]
