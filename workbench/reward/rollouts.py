"""Score a batch of rollouts: the bridge from the sampler's output to the learner's input."""

from __future__ import annotations

from workbench.batch import Rollouts, ScoredRollouts
from workbench.reward import AnswerVerifier, score_completions


def score_rollouts(verifier: AnswerVerifier, rollouts: Rollouts, shaping) -> ScoredRollouts:
    batch = score_completions(
        verifier, rollouts.texts, [p.answer for p in rollouts.problems], rollouts.lengths.long(),
        rollouts.truncated, rollouts.group_ids, shaping=shaping,
    )
    terms = {k: v for k, v in batch.terms.items() if k != "correct"} if len(batch.terms) > 1 else {}
    return ScoredRollouts(rollouts=rollouts, rewards=batch.reward, correct=batch.correct, reward_terms=terms)
