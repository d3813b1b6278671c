"""Batch-level units: dynamic-sampling filter, overlong token filter, select/concat of rollouts."""

import torch

from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS
from workbench.batch import Rollouts, ScoredRollouts, concat, select
from workbench.tasks import Problem


def make(rewards, group_ids, P=2, T=3, truncated=None):
    B = len(rewards)
    r = Rollouts(
        problems=[Problem(f"{g}+0=", str(g)) for g in group_ids], group_ids=torch.tensor(group_ids),
        prompt_ids=torch.arange(B * P).view(B, P) + 10, prompt_mask=torch.ones(B, P, dtype=torch.long),
        completion_ids=torch.arange(B * T).view(B, T) + 100, mask=torch.ones(B, T),
        sampler_logp=-torch.rand(B, T), truncated=torch.tensor(truncated or [False] * B),
        texts=[f"t{i}" for i in range(B)],
    )
    return ScoredRollouts(r, torch.tensor(rewards, dtype=torch.float), torch.tensor(rewards) > 0)


def test_zero_std_keeps_only_groups_with_signal():
    keep = BATCH_FILTERS.get("zero_std")(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    assert keep.tolist() == [False, False, True, True, False, False]


def test_overlong_filter_masks_truncated_rows():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = TOKEN_FILTERS.get("overlong")(mask, torch.tensor([False, True]))
    assert out.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def test_select_keeps_rows_aligned():
    s = make([1.0, 0.0, 0.5, 0.5], [0, 0, 1, 1])
    kept = select(s, torch.tensor([True, True, False, False]))
    assert kept.rollouts.texts == ["t0", "t1"]
    assert torch.equal(kept.rollouts.completion_ids, s.rollouts.completion_ids[:2])
    assert kept.rewards.tolist() == [1.0, 0.0]


def test_concat_repads_and_renumbers_groups():
    a = make([1.0, 0.0], [0, 0], P=2, T=3)
    b = make([0.0, 1.0], [0, 0], P=4, T=5)
    c = concat([a, b])
    r = c.rollouts
    assert r.prompt_ids.shape == (4, 4) and r.completion_ids.shape == (4, 5)
    assert r.group_ids.tolist() == [0, 0, 1, 1]  # rounds never share a group id
    assert r.prompt_mask[:2].tolist() == [[0, 0, 1, 1]] * 2  # prompts padded on the left
    assert torch.equal(r.prompt_ids[:2, 2:], a.rollouts.prompt_ids)
    assert r.mask[:2].tolist() == [[1, 1, 1, 0, 0]] * 2  # completions padded on the right
    assert torch.equal(r.sampler_logp[:2, :3], a.rollouts.sampler_logp)
    assert r.texts == ["t0", "t1", "t0", "t1"] and c.rewards.tolist() == [1.0, 0.0, 0.0, 1.0]
