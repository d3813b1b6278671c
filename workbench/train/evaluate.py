"""Held-out evaluation: same problems, same decoding, at every eval step.

Besides the step's ``eval/*`` metrics, every eval step records one row per problem
(:class:`ProblemResults`: step, problem id, correct, length, truncated), logged at the end of the
run as the artifact ``eval/problems.csv.gz`` (:mod:`workbench.tracking.artifacts`). ``compare`` uses it for
intervals over seeds *and* problems (:mod:`workbench.compare.problems`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.batch import ScoredRollouts
from workbench.config import RolloutConfig
from workbench.reward.rollouts import score_rollouts
from workbench.tasks import Problem
from workbench.tracking.artifacts import PROBLEM_COLUMNS, encode_problem_rows

EVAL_CHUNK = 256  # prompts per generate call


def problem_ids(problems: list[Problem]) -> list[str]:
    """A stable id per eval problem: the first 12 hex digits of sha1(prompt NUL answer), plus ``#k``
    on the k-th repeat (k >= 1) of the same prompt and answer within the set. It depends on the
    problem's text only, so every seed and arm scored on the same eval set gets the same ids,
    whatever the order of the set."""
    seen: Counter[str] = Counter()
    out = []
    for p in problems:
        digest = hashlib.sha1(f"{p.prompt}\0{p.answer}".encode()).hexdigest()[:12]
        out.append(digest if not seen[digest] else f"{digest}#{seen[digest]}")
        seen[digest] += 1
    return out


@dataclass
class ProblemResults:
    """Per-problem results of every eval step so far, as columns (one entry per step x problem).
    Kept in run checkpoints (``vars(self)``: plain lists, loadable with ``weights_only``)."""

    step: list[int] = field(default_factory=list)
    problem_id: list[str] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)  # 0/1
    length: list[int] = field(default_factory=list)  # response tokens
    truncated: list[int] = field(default_factory=list)  # 0/1: hit max_new_tokens without EOS

    def __len__(self) -> int:
        return len(self.step)

    def extend(self, other: ProblemResults) -> None:
        for name in PROBLEM_COLUMNS:
            getattr(self, name).extend(getattr(other, name))

    def before(self, steps_done: int) -> ProblemResults:
        """The rows of eval steps ``< steps_done``: what a run resumed at ``steps_done`` keeps (the
        eval at ``steps_done`` runs again after the resume, so its rows must not be there twice)."""
        keep = [i for i, s in enumerate(self.step) if s < steps_done]
        return ProblemResults(**{n: [getattr(self, n)[i] for i in keep] for n in PROBLEM_COLUMNS})

    def to_csv_gz(self) -> bytes:
        """The ``eval/problems.csv.gz`` artifact (:mod:`workbench.tracking.artifacts`)."""
        return encode_problem_rows(vars(self))


def evaluate(sampler, verifier, problems: list[Problem], roll: RolloutConfig, *, seed: int, step: int,
             on_scored: Callable[[ScoredRollouts, list[str]], None] | None = None,
             ) -> tuple[dict[str, float], list[dict], ProblemResults]:
    """Score ``problems`` once each: the step's metrics, up to ``roll.log_samples`` completions to
    show, and every problem's result. ``on_scored(scored, problem_ids)`` sees every scored chunk (the
    run's rollout log)."""
    correct, lengths, samples = 0.0, 0.0, []
    rows = ProblemResults()
    ids = problem_ids(problems)
    for start in range(0, len(problems), EVAL_CHUNK):
        chunk = problems[start : start + EVAL_CHUNK]
        rollouts = sampler.generate(chunk, 1, temperature=roll.eval_temperature, seed=seed + start)
        scored = score_rollouts(verifier, rollouts, shaping=())
        if on_scored is not None:
            on_scored(scored, ids[start : start + len(chunk)])
        correct += float(scored.correct.float().sum())
        lengths += float(rollouts.lengths.sum())
        rows.extend(ProblemResults(step=[step] * len(chunk), problem_id=ids[start : start + len(chunk)],
                                   correct=[int(c) for c in scored.correct.tolist()],
                                   length=[int(n) for n in rollouts.lengths.tolist()],
                                   truncated=[int(t) for t in rollouts.truncated.tolist()]))
        room = roll.log_samples - len(samples)
        for i in range(min(room, len(chunk))):
            samples.append({
                "step": step, "prompt": chunk[i].prompt, "completion": rollouts.texts[i],
                "answer": chunk[i].answer, "reward": float(scored.rewards[i]),
                "correct": bool(scored.correct[i]), "length": int(rollouts.lengths[i]),
                "truncated": bool(rollouts.truncated[i]),
            })
    n = len(problems)
    metrics = {"eval/accuracy": correct / n, "eval/length_mean": lengths / n, "eval/n_problems": float(n)}
    return metrics, samples, rows
