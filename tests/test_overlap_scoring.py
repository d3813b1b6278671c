"""Scoring in the background while the learner's forward runs (``reward.overlap``; by default with a
GPU learner only).

The learner's forward needs no reward, so the run scores on a thread while it runs and waits for the
rewards only where the loss needs the advantages. The promise is "the same numbers, sooner": every
logged number but the timings equals the in-turn run's exactly (the same operations, on the same
thread, in the same order), and the forward really does start before the scoring ends.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import micro_run_config
from workbench.batch import PendingBatch, TrainBatch
from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.reward import AnswerVerifier
from workbench.reward.testing import sleepy_scorer
from workbench.train.loop import train
from workbench.train.step import open_run_parts, overlaps_scoring, rl_step


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, metrics))


def logged(cfg: RunConfig) -> list[tuple[int, dict]]:
    """Every step's logged metrics, timings left out (they are the only thing overlap may change)."""
    sink = Rows()
    train(cfg, sink, HealthMonitor.from_config(cfg.health))
    return [(step, {k: v for k, v in m.items() if not k.startswith("perf/")}) for step, m in sink.rows]


@pytest.mark.parametrize(
    "algorithm",
    [
        {"preset": "grpo"},
        {"preset": "grpo", "kl_coef": 0.1, "kl_in": "reward"},  # the KL forward runs beside the scoring too
        {"preset": "grpo", "kl_coef": 0.1, "kl_in": "loss", "epochs": 2, "minibatches": 2},  # the no-grad "old" forward
    ],
    ids=["grpo", "kl-in-reward", "kl-in-loss-2x2"],
)
def test_overlapped_scoring_logs_exactly_the_numbers_of_scoring_in_turn(algorithm):
    base = micro_run_config(
        algorithm=algorithm,
        reward={"overlap": True, "shaping": [{"name": "format", "weight": 0.1}]},
        rollout={"steps": 3, "eval_every": 2},
    )
    overlapped = RunConfig.model_validate(base)
    in_turn = RunConfig.model_validate({**base, "reward": {**base["reward"], "overlap": False}})
    assert overlaps_scoring(overlapped) and not overlaps_scoring(in_turn)
    assert overlapped.run_key() == in_turn.run_key()  # a setting of how, not of what: one run
    first, second = logged(overlapped), logged(in_turn)
    assert [s for s, _ in first] == [s for s, _ in second] == [0, 1, 2, 3]
    for (_, a), (_, b) in zip(first, second):
        assert a == b  # exact: no tolerance, the same floats


def test_by_default_only_a_gpu_learner_overlaps_because_a_cpu_learner_shares_the_cores():
    """Unset, the rule follows the measurement (docs/engines.md): on 2 CPU cores a forward beside the
    verifier's processes measured no faster. Asked for, it overlaps anywhere; told not to, nowhere."""

    def cfg(**fields):
        return RunConfig.model_validate(micro_run_config(**fields))

    assert not overlaps_scoring(cfg(learner={"device": "cpu"}))
    assert overlaps_scoring(cfg(learner={"device": "cuda"}))
    assert overlaps_scoring(cfg(learner={"device": "cpu"}, reward={"overlap": True}))
    assert not overlaps_scoring(cfg(learner={"device": "cuda"}, reward={"overlap": False}))


def test_a_batch_filter_scores_in_turn_because_it_picks_groups_by_their_rewards():
    cfg = RunConfig.model_validate(micro_run_config(algorithm={"preset": "dapo"}, reward={"overlap": True}))
    assert cfg.algorithm.batch_filter is not None
    assert not overlaps_scoring(cfg)
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        assert parts.scoring is None
        metrics = rl_step(cfg, 0, parts)
    assert metrics["perf/score_s"] > 0


def test_the_learners_forward_starts_before_the_verifier_has_finished_scoring():
    """A verifier that takes 0.1 s per completion (16 completions, one worker: >= 1.6 s of scoring). The
    learner's forward begins before that scoring ends (scoring in turn would make it begin after), the
    update receives a PendingBatch, and the step reports the scoring's own time."""
    cfg = RunConfig.model_validate(micro_run_config(reward={"overlap": True}))
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        parts.verifier.close()
        parts.verifier = AnswerVerifier(timeout_s=5.0, scorer=sleepy_scorer)
        parts.verifier.score(["1"], ["1"])  # start its worker outside the timed step
        seen = {}
        score, logprobs, update = parts.verifier.score, parts.learner.logprobs, parts.learner.update

        def timed_score(*args, **kwargs):
            result = score(*args, **kwargs)
            seen["scoring_ended"] = time.monotonic()
            return result

        def timed_logprobs(*args, **kwargs):
            seen.setdefault("forward_began", time.monotonic())
            return logprobs(*args, **kwargs)

        def typed_update(batch, *args, **kwargs):
            seen["batch"] = type(batch)
            return update(batch, *args, **kwargs)

        parts.verifier.score, parts.learner.logprobs, parts.learner.update = timed_score, timed_logprobs, typed_update
        try:
            metrics = rl_step(cfg, 0, parts)
        finally:
            parts.verifier.close()
    assert seen["forward_began"] < seen["scoring_ended"]
    assert seen["batch"] is PendingBatch
    assert metrics["perf/score_s"] >= 16 * 0.1
    assert metrics["perf/step_s"] < metrics["perf/sample_s"] + metrics["perf/score_s"] + metrics["perf/learn_s"]


def test_a_scoring_failure_reaches_the_step_as_it_would_in_turn():
    """The scoring thread's exception is raised where the update asks for the rewards."""
    cfg = RunConfig.model_validate(micro_run_config(reward={"overlap": True}))
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:

        def failing(*args, **kwargs):
            raise RuntimeError("answer-verifier workers failed to start")

        parts.verifier.score = failing
        with pytest.raises(RuntimeError, match="workers failed to start"):
            rl_step(cfg, 0, parts)


def test_a_finished_batch_is_its_own_ready_value():
    from tests.learner_helpers import micro_policy_batch

    rollouts, advantages = micro_policy_batch()[3:5]
    batch = TrainBatch.of(rollouts, advantages)
    assert batch.ready() is batch
    calls = []
    pending = PendingBatch(0, rollouts, rollouts.mask, None, lambda: calls.append(1) or batch)
    assert pending.ready() is batch and pending.ready() is batch and calls == [1]  # completed once
