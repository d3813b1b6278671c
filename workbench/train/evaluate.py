"""Held-out evaluation: same problems, same decoding, at every eval step."""

from __future__ import annotations

from workbench.config import RolloutConfig
from workbench.reward.rollouts import score_rollouts
from workbench.tasks import Problem

EVAL_CHUNK = 256  # prompts per generate call


def evaluate(sampler, verifier, problems: list[Problem], roll: RolloutConfig, *, seed: int,
             step: int) -> tuple[dict[str, float], list[dict]]:
    correct, lengths, samples = 0.0, 0.0, []
    for start in range(0, len(problems), EVAL_CHUNK):
        chunk = problems[start : start + EVAL_CHUNK]
        rollouts = sampler.generate(chunk, 1, temperature=roll.eval_temperature, seed=seed + start)
        scored = score_rollouts(verifier, rollouts, shaping=())
        correct += float(scored.correct.float().sum())
        lengths += float(rollouts.lengths.sum())
        room = roll.log_samples - len(samples)
        for i in range(min(room, len(chunk))):
            samples.append({
                "step": step, "prompt": chunk[i].prompt, "completion": rollouts.texts[i],
                "answer": chunk[i].answer, "reward": float(scored.rewards[i]),
                "correct": bool(scored.correct[i]), "length": int(rollouts.lengths[i]),
                "truncated": bool(rollouts.truncated[i]),
            })
    n = len(problems)
    return {"eval/accuracy": correct / n, "eval/length_mean": lengths / n}, samples
