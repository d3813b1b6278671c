"""Verifications that run out of time are scored incorrect and counted: ``reward/verify_timeout_frac`` (train
batches, native loop and TRL's verifier reward) and ``eval/verify_timeout_frac`` (evals).

Timeouts are real: ``misbehaving_scorer``'s ``SLOW`` marker is a busy loop that the worker's own time budget
ends (0.75 x ``timeout_s``), so each planted one costs 0.3 s here.
"""

from __future__ import annotations

import pytest
import torch

from workbench.batch import Rollouts, concat, select
from workbench.config import RolloutConfig
from workbench.metrics.compute import rollout_metrics
from workbench.metrics.names import (
    ACCURACY_TRAIN,
    EVAL_ACCURACY,
    EVAL_MEAN_AT_N,
    EVAL_VERIFY_TIMEOUT_FRAC,
    REWARD_MEAN,
    REWARD_VERIFY_TIMEOUT_FRAC,
)
from workbench.reward import AnswerVerifier
from workbench.reward.rollouts import score_rollouts
from workbench.reward.testing import misbehaving_scorer
from workbench.tasks import Problem
from workbench.train.evaluate import evaluate

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 0.4


@pytest.fixture(scope="module")
def verifier():
    with AnswerVerifier(timeout_s=TIMEOUT_S, workers=1, scorer=misbehaving_scorer) as v:
        v.score(["warm"], ["warm"])  # start the worker outside the tests
        yield v


def rollouts_of(problems: list[Problem], texts: list[str], group_size: int) -> Rollouts:
    """Rollouts with the given texts, ``group_size`` completions per problem in a row."""
    b, t = len(texts), 4
    return Rollouts(
        problems=[p for p in problems for _ in range(group_size)],
        group_ids=torch.arange(b) // group_size,
        prompt_ids=torch.zeros(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.long),
        completion_ids=torch.zeros(b, t, dtype=torch.long),
        mask=torch.ones(b, t),
        sampler_logp=torch.zeros(b, t),
        truncated=torch.zeros(b, dtype=torch.bool),
        texts=texts,
    )


def test_two_planted_timeouts_among_eight_completions_log_a_quarter(verifier):
    problems = [Problem("a?", "a"), Problem("b?", "b")]
    # every completion is the right answer except the two SLOW ones, which a correct verifier never reaches
    texts = ["a", "SLOW 1", "a", "a", "b", "b", "SLOW 2", "b"]
    scored = score_rollouts(verifier, rollouts_of(problems, texts, 4), shaping=())
    assert scored.timed_out is not None
    assert scored.timed_out.tolist() == [False, True, False, False, False, False, True, False]
    m = rollout_metrics(scored)
    assert m[REWARD_VERIFY_TIMEOUT_FRAC] == 0.25  # 2 / 8
    assert m[ACCURACY_TRAIN] == 0.75 and m[REWARD_MEAN] == 0.75  # the two timeouts scored 0

    calm = score_rollouts(verifier, rollouts_of(problems, ["a"] * 4 + ["b"] * 4, 4), shaping=())
    assert rollout_metrics(calm)[REWARD_VERIFY_TIMEOUT_FRAC] == 0.0  # logged as 0, not left out

    # a batch filter's select and its refill rounds' concat keep each completion's flag
    kept = select(scored, torch.tensor([False] * 4 + [True] * 4))
    assert kept.timed_out is not None and kept.timed_out.tolist() == [False, False, True, False]
    both = concat([calm, scored])
    assert both.timed_out is not None and both.timed_out.tolist() == [False] * 8 + scored.timed_out.tolist()
    assert rollout_metrics(both)[REWARD_VERIFY_TIMEOUT_FRAC] == 0.125  # 2 / 16


class PlantedSampler:
    """Answers every eval problem correctly, except the (problem, sample) pairs in ``slow``: ``SLOW``."""

    def __init__(self, slow: set[tuple[str, int]]) -> None:
        self.slow = slow

    def generate(self, problems, n, temperature, seed):
        texts = ["SLOW" if (p.answer, j) in self.slow else p.answer for p in problems for j in range(n)]
        return rollouts_of(problems, texts, n)


def test_a_planted_eval_timeout_is_counted_and_scored_incorrect(verifier):
    problems = [Problem(f"{d}?", str(d)) for d in range(4)]
    metrics, _, rows = evaluate(
        PlantedSampler({("2", 0)}), verifier, problems, RolloutConfig(log_samples=0), seed=0, step=0
    )
    assert metrics[EVAL_VERIFY_TIMEOUT_FRAC] == 0.25  # 1 of 4 answers
    assert metrics[EVAL_ACCURACY] == 0.75 and rows.correct == [1, 1, 0, 1]  # ... scored incorrect

    # n = 2 answers per problem: the fraction is over all 8; eval/accuracy reads first answers only
    roll = RolloutConfig(eval_samples=2, eval_temperature=1.0, log_samples=0)
    metrics, _, rows = evaluate(PlantedSampler({("0", 1)}), verifier, problems, roll, seed=0, step=0)
    assert metrics[EVAL_VERIFY_TIMEOUT_FRAC] == 0.125  # 1 of 8 answers
    assert metrics[EVAL_ACCURACY] == 1.0 and metrics[EVAL_MEAN_AT_N] == 0.875 and rows.n_correct == [1, 2, 2, 2]

    metrics, _, _ = evaluate(PlantedSampler(set()), verifier, problems, RolloutConfig(log_samples=0), seed=0, step=0)
    assert metrics[EVAL_VERIFY_TIMEOUT_FRAC] == 0.0


def test_trls_verifier_reward_logs_the_fraction_under_its_canonical_name(verifier):
    from workbench.execution.trl_callback import trl_metrics, unavailable_metrics
    from workbench.execution.trl_engine import verifier_reward

    logged: dict[str, float] = {}
    reward = verifier_reward(verifier, group_size=4)
    texts = ["a", "SLOW 1", "a", "a", "b", "b", "SLOW 2", "b"]
    rewards = reward(
        prompts=[""] * 8,
        completions=texts,
        completion_ids=[[1, 2]] * 8,
        answer=["a"] * 4 + ["b"] * 4,
        log_metric=logged.__setitem__,
    )
    assert rewards == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    canonical = trl_metrics(logged)  # what WorkbenchCallback logs for the step
    assert canonical[REWARD_VERIFY_TIMEOUT_FRAC] == 0.25 and canonical[ACCURACY_TRAIN] == 0.75
    # an engine: trl run measures both; a plain TRL script with its own reward function measures neither
    assert not {REWARD_VERIFY_TIMEOUT_FRAC, EVAL_VERIFY_TIMEOUT_FRAC} & set(unavailable_metrics(with_eval=True, beta=0))
    assert {REWARD_VERIFY_TIMEOUT_FRAC, EVAL_VERIFY_TIMEOUT_FRAC} <= set(unavailable_metrics(with_eval=False, beta=0))


class PlantingVerifier(AnswerVerifier):
    """An exact-match verifier that, on its ``k``-th ``score`` call, scores ``SLOW`` in place of the completions
    at ``plan[k]``'s indices: real timeouts at chosen rows of chosen batches."""

    def __init__(self, plan: dict[int, set[int]]) -> None:
        super().__init__(timeout_s=TIMEOUT_S, workers=1, scorer=misbehaving_scorer)
        self.plan, self.calls = plan, 0

    def score(self, completions, answers):
        planted = self.plan.get(self.calls, set())
        self.calls += 1
        return super().score([f"SLOW {i}" if i in planted else c for i, c in enumerate(completions)], answers)


@pytest.mark.slow
def test_the_loop_logs_the_fraction_at_every_step_and_eval(monkeypatch):
    """Two steps of 2 prompts x 4 completions, evals at steps 0 and 2 (16 problems): the verifier's calls are
    eval 0, step 0, step 1, eval 2. Two timeouts planted in step 1's batch, one in eval 2's."""
    from tests.conftest import micro_run_config
    from workbench.config import RunConfig
    from workbench.health import HealthMonitor
    from workbench.train import step as step_module
    from workbench.train.loop import train

    planting = PlantingVerifier({2: {1, 6}, 3: {3}})
    monkeypatch.setattr(step_module, "AnswerVerifier", lambda **_: planting)
    cfg = RunConfig.model_validate(
        micro_run_config(rollout={"prompts_per_step": 2, "group_size": 4, "steps": 2, "eval_every": 2})
    )
    rows: dict[int, dict[str, float]] = {}

    class Sink:
        def log_metrics(self, metrics, step):
            rows[step] = metrics

    result = train(cfg, Sink(), HealthMonitor.from_config(cfg.health))
    assert planting.calls == 4
    assert [rows[s][REWARD_VERIFY_TIMEOUT_FRAC] for s in (0, 1)] == [0.0, 0.25]  # 2 of 8 at step 1
    assert REWARD_VERIFY_TIMEOUT_FRAC not in rows[2]  # the final eval only: no training batch
    assert [rows[s][EVAL_VERIFY_TIMEOUT_FRAC] for s in (0, 2)] == [0.0, 1 / 16]  # 1 of 16 at step 2
    assert EVAL_VERIFY_TIMEOUT_FRAC not in rows[1]
    at_2 = [c for s, c in zip(result.problems.step, result.problems.correct, strict=True) if s == 2]
    assert at_2[3] == 0  # the timed-out answer is scored incorrect


def test_a_controls_own_verification_counts_its_timeouts():
    """incorrect_label judges the completions a second time, against wrong labels: the reward is that judgement,
    so a timeout there is a timeout of the reward, counted like the first pass's."""
    from workbench.reward import score_completions

    # the first pass (against the gold "1") runs clean; the control's pass (against "2") times out on row 1
    with PlantingVerifier({1: {1}}) as planting:
        batch = score_completions(
            planting,
            ["2", "2", "1", "7"],
            ["1"] * 4,
            lengths=[1] * 4,
            truncated=[False] * 4,
            group_ids=[0] * 4,
            control=("incorrect_label", {}),
        )
    assert planting.calls == 2
    assert batch.correct.tolist() == [False, False, True, False]  # the first pass: true correctness
    assert batch.reward.tolist() == [1.0, 0.0, 0.0, 0.0]  # "2" matches the wrong label, but row 1 timed out
    assert batch.timed_out.tolist() == [False, True, False, False]
