"""Score a batch of rollouts: the bridge from the sampler's output to the learner's input."""

from __future__ import annotations

from workbench.batch import Rollouts, ScoredRollouts
from workbench.reward import CORRECT_TERM, AnswerVerifier, score_completions


def score_rollouts(
    verifier: AnswerVerifier, rollouts: Rollouts, shaping, *, control=None, seed: int = 0
) -> ScoredRollouts:
    """Rewards and the verifier's judgement; ``control`` (name, params): a spurious-reward control in place of
    the correctness term, drawing from ``seed`` (``workbench.reward.score_completions``)."""
    batch = score_completions(
        verifier,
        rollouts.texts,
        [p.answer for p in rollouts.problems],
        rollouts.lengths.long(),
        rollouts.truncated,
        rollouts.group_ids,
        shaping=shaping,
        control=control,
        seed=seed,
    )
    terms = {k: v for k, v in batch.terms.items() if k != CORRECT_TERM}
    return ScoredRollouts(
        rollouts=rollouts, rewards=batch.reward, correct=batch.correct, reward_terms=terms, timed_out=batch.timed_out
    )
