"""Held-out evaluation: same problems, same decoding, at every eval step.

Besides the step's ``eval/*`` metrics, every eval step records one row per problem
(:class:`ProblemResults`: step, problem id, correct, length, truncated), logged at the end of the
run as the artifact ``eval/problems.csv.gz`` (:mod:`workbench.tracking.artifacts`). ``compare`` uses it for
intervals over seeds *and* problems (:mod:`workbench.compare.problems`).

With ``rollout.eval_samples`` n > 1 every problem gets n answers at ``eval_temperature``: ``eval/accuracy``,
``eval/length_mean`` and the table's ``correct``/``length``/``truncated`` describe each problem's first
answer (so ``eval/accuracy`` stays the mean of the table's ``correct`` that ``compare`` re-derives), and
``eval/pass_at_k`` (k = 1, 2, 4, … ≤ n), ``eval/mean_at_n`` and the table's ``samples``/``n_correct`` use all n.
``eval/verify_timeout_frac`` is over all n answers: each one whose verification ran out of time is scored
incorrect in whichever of those metrics counts it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.batch import ScoredRollouts
from workbench.config import RolloutConfig
from workbench.metrics.names import EVAL_ACCURACY, EVAL_LENGTH_MEAN, EVAL_N_PROBLEMS, EVAL_VERIFY_TIMEOUT_FRAC
from workbench.metrics.passk import pass_at_k_metrics
from workbench.metrics.reflection import reflection_metrics
from workbench.reward.rollouts import score_rollouts
from workbench.tasks import Problem
from workbench.tracking.artifacts import PASS_AT_K_COLUMNS, PROBLEM_COLUMNS, encode_problem_rows

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
    samples: list[int] = field(default_factory=list)  # answers per problem; empty when rollout.eval_samples = 1
    n_correct: list[int] = field(default_factory=list)  # of them judged correct; empty when eval_samples = 1

    @property
    def columns(self) -> tuple[str, ...]:
        return (*PROBLEM_COLUMNS, *PASS_AT_K_COLUMNS)

    def __len__(self) -> int:
        return len(self.step)

    def extend(self, other: ProblemResults) -> None:
        for name in self.columns:
            getattr(self, name).extend(getattr(other, name))

    def before(self, steps_done: int) -> ProblemResults:
        """The rows of eval steps ``< steps_done``: what a run resumed at ``steps_done`` keeps (the
        eval at ``steps_done`` runs again after the resume, so its rows must not be there twice)."""
        keep = [i for i, s in enumerate(self.step) if s < steps_done]
        return ProblemResults(
            **{n: [getattr(self, n)[i] for i in keep if i < len(getattr(self, n))] for n in self.columns}
        )

    def to_csv_gz(self) -> bytes:
        """The ``eval/problems.csv.gz`` artifact (:mod:`workbench.tracking.artifacts`)."""
        return encode_problem_rows(vars(self))


def evaluate(
    sampler,
    verifier,
    problems: list[Problem],
    roll: RolloutConfig,
    *,
    seed: int,
    step: int,
    reflection_words: tuple[str, ...] = (),
    on_scored: Callable[[ScoredRollouts, list[str], int], None] | None = None,
) -> tuple[dict[str, float], list[dict], ProblemResults]:
    """Score ``problems`` with ``roll.eval_samples`` answers each: the step's metrics, up to
    ``roll.log_samples`` completions to show (first answers), and every problem's result. With
    ``reflection_words``, also ``eval/reflection_rate*`` over the first answers.
    ``on_scored(scored, problem_ids, samples_per_problem)`` sees every scored chunk (the run's rollout log)."""
    n_samples = roll.eval_samples
    correct, lengths, samples = 0.0, 0.0, []
    timed_out, scored_answers = 0, 0  # verifications that ran out of time (scored incorrect), of all answers
    counts: list[int] = []  # correct answers per problem, of n_samples
    first_texts: list[str] = []  # each problem's first answer, for the reflection rate
    rows = ProblemResults()
    ids = problem_ids(problems)
    per_call = max(1, EVAL_CHUNK // n_samples)  # prompts per generate call: about EVAL_CHUNK completions
    for start in range(0, len(problems), per_call):
        chunk = problems[start : start + per_call]
        rollouts = sampler.generate(chunk, n_samples, temperature=roll.eval_temperature, seed=seed + start)
        scored = score_rollouts(verifier, rollouts, shaping=())
        assert scored.timed_out is not None  # score_rollouts always says
        timed_out += int(scored.timed_out.sum())
        scored_answers += len(scored.timed_out)
        if on_scored is not None:
            on_scored(scored, ids[start : start + len(chunk)], n_samples)
        first = slice(None, None, n_samples)  # rows are grouped by problem: each problem's first answer
        ok = scored.correct[first]  # [len(chunk)]
        first_texts += rollouts.texts[::n_samples]
        correct += float(ok.float().sum())
        lengths += float(rollouts.lengths[first].sum())
        rows.extend(
            ProblemResults(
                step=[step] * len(chunk),
                problem_id=ids[start : start + len(chunk)],
                correct=[int(c) for c in ok.tolist()],
                length=[int(n) for n in rollouts.lengths[first].tolist()],
                truncated=[int(t) for t in rollouts.truncated[first].tolist()],
            )
        )
        if n_samples > 1:
            chunk_counts = [int(c) for c in scored.correct.view(len(chunk), n_samples).sum(dim=1).tolist()]
            counts += chunk_counts
            rows.samples.extend([n_samples] * len(chunk))
            rows.n_correct.extend(chunk_counts)
        room = roll.log_samples - len(samples)
        for i in range(min(room, len(chunk))):
            j = i * n_samples
            samples.append(
                {
                    "step": step,
                    "prompt": chunk[i].prompt,
                    "completion": rollouts.texts[j],
                    "answer": chunk[i].answer,
                    "reward": float(scored.rewards[j]),
                    "correct": bool(scored.correct[j]),
                    "length": int(rollouts.lengths[j]),
                    "truncated": bool(rollouts.truncated[j]),
                }
            )
    n = len(problems)
    metrics = {EVAL_ACCURACY: correct / n, EVAL_LENGTH_MEAN: lengths / n, EVAL_N_PROBLEMS: float(n)}
    metrics[EVAL_VERIFY_TIMEOUT_FRAC] = timed_out / scored_answers
    if n_samples > 1:
        metrics |= pass_at_k_metrics(n_samples, counts)
    if reflection_words:
        metrics |= reflection_metrics(first_texts, [bool(c) for c in rows.correct], reflection_words, prefix="eval")
    return metrics, samples, rows
