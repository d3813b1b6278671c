"""Batch-level units: dynamic-sampling filter, overlong token filter, select/concat of rollouts."""

import pytest
import torch

from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS
from workbench.batch import Rollouts, ScoredRollouts, concat, select
from workbench.tasks import Problem


def make(rewards, group_ids, P=2, T=3, truncated=None):
    B = len(rewards)
    r = Rollouts(
        problems=[Problem(f"{g}+0=", str(g)) for g in group_ids],
        group_ids=torch.tensor(group_ids),
        prompt_ids=torch.arange(B * P).view(B, P) + 10,
        prompt_mask=torch.ones(B, P, dtype=torch.long),
        completion_ids=torch.arange(B * T).view(B, T) + 100,
        mask=torch.ones(B, T),
        sampler_logp=-torch.rand(B, T),
        truncated=torch.tensor(truncated or [False] * B),
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


# --- finding 7: dynamic sampling judges correctness, not the shaped reward ------------------------


def test_all_wrong_group_with_format_bonus_on_half_is_dropped():
    """DAPO §3.2 drops groups whose accuracy is 0 or 1. Scored for real (math-verify + the format
    shaper): group 0 is all wrong, two of its answers are boxed (reward 0.5), two are not (0.0);
    group 1 is half right. Judged on the total reward, group 0 would be kept and its advantages
    would teach only the format bonus."""
    from workbench.algorithms.filters import filter_input
    from workbench.reward import AnswerVerifier, score_completions

    texts = [
        r"\boxed{7}",
        r"\boxed{8}",
        "7",
        "no idea",  # 2+3: all wrong, half boxed
        r"\boxed{9}",
        r"\boxed{9}",
        r"\boxed{4}",
        "8",
    ]  # 4+5: half right
    answers = ["5"] * 4 + ["9"] * 4
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    with AnswerVerifier(timeout_s=5.0) as verifier:
        scored = score_completions(
            verifier, texts, answers, [3] * 8, [False] * 8, group_ids, shaping=[("format", 0.5, {})]
        )
    assert scored.correct.tolist() == [False] * 4 + [True, True, False, False]
    assert scored.reward.tolist() == [0.5, 0.5, 0.0, 0.0, 1.5, 1.5, 0.5, 0.0]
    zero_std = BATCH_FILTERS.get("zero_std")
    keep = zero_std(filter_input("correct", scored.reward, scored.correct), group_ids)
    assert keep.tolist() == [False] * 4 + [True] * 4
    keep_on_reward = zero_std(filter_input("reward", scored.reward, scored.correct), group_ids)
    assert keep_on_reward.tolist() == [True] * 8  # the total reward varies in both groups


def test_filter_on_defaults_to_correct_once_a_batch_filter_is_set():
    from workbench.config import AlgorithmConfig

    assert AlgorithmConfig(preset="dapo").filter_on == "correct"
    assert AlgorithmConfig(preset="dapo", filter_on="reward").filter_on == "reward"
    assert AlgorithmConfig(preset="grpo").filter_on is None  # no filter: nothing to judge


def test_filter_input_hand_computed():
    from workbench.algorithms.filters import filter_input

    rewards, correct = torch.tensor([1.2, 0.3]), torch.tensor([True, False])
    assert filter_input("correct", rewards, correct).tolist() == [1.0, 0.0]
    assert filter_input("reward", rewards, correct).tolist() == pytest.approx([1.2, 0.3])
    with pytest.raises(ValueError, match="filter_on"):
        filter_input("accuracy", rewards, correct)
