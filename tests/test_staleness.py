"""rollout.staleness: k, the pipelined sampler (workbench/train/pipeline.py).

k = 0 is the synchronous loop, untouched: every shipped study's run keys stay as they were and no pipeline
metric is logged. With k >= 1 the batch of step t is sampled by the policy after max(0, t - k) updates, on a
sampler thread, and the schedule (not the timing) fixes every number.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import micro_run_config
from tests.tolerance import EPS32, order_tolerance, reduction_depth
from workbench.config import RunConfig, deep_merge
from workbench.health import HealthMonitor
from workbench.study import apply_overrides, expand, load_study
from workbench.train.logprobs import sequence_logprobs
from workbench.train.loop import train
from workbench.train.pipeline import behaviour_version, split_threads
from workbench.train.step import open_run_parts, rl_step

STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))
PIPELINE_KEYS = {"offpolicy/staleness_mean", "offpolicy/staleness_max", "perf/sampler_wait_s", "perf/learner_wait_s"}


def learning_config(**rollout) -> dict:
    # lr 1e-2 and a random reward (a spurious-reward control): the micro model's policy moves every step, so versions differ
    return micro_run_config(learner={"lr": 1e-2}, reward={"control": "random"}, rollout=rollout)


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))


def logged(cfg: RunConfig, records: list | None = None) -> list[tuple[int, dict]]:
    """Every step's logged metrics; the mismatch flight recorder's records into ``records``."""
    sink = Rows()
    result = train(cfg, sink, HealthMonitor.from_config(cfg.health))
    if records is not None:
        records.extend(result.mismatch_records)
    return sink.rows


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_staleness_zero_written_out_keeps_every_run_key_of_a_shipped_study(path):
    """The field at its default is not hashed: a study that spells ``rollout.staleness: 0`` has the keys it had
    before the field existed (checked once against main's keys, 171 runs, on 2026-11-29); 1 is a new run."""
    study = load_study(path)
    specs = expand(study)
    synchronous = [s for s in specs if s.config.rollout.staleness == 0]
    assert synchronous
    for spec in synchronous:  # the field written out in the run's own config
        written = spec.config.model_dump(mode="json")
        written["rollout"]["staleness"] = 0
        assert RunConfig.model_validate(written).run_key() == spec.run_key
    if len(synchronous) == len(specs):  # and in the study's YAML, for every run
        assert [s.run_key for s in expand(apply_overrides(study, ["rollout.staleness=0"]))] == [
            s.run_key for s in specs
        ]


def test_a_staleness_is_another_run():
    keys = {RunConfig.model_validate(micro_run_config(rollout={"staleness": k})).run_key() for k in (0, 1, 2)}
    assert len(keys) == 3


def test_the_schedule():
    assert [behaviour_version(t, 2) for t in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [behaviour_version(t, 1) for t in range(4)] == [0, 0, 1, 2]
    assert [split_threads(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]


def test_what_the_pipeline_cannot_run_is_refused_at_load():
    with pytest.raises(ValueError, match="refill rounds"):
        RunConfig.model_validate(micro_run_config(rollout={"staleness": 1}, algorithm={"preset": "dapo"}))


@pytest.mark.parametrize(
    "engines",
    [
        {"sampler": {"backend": "vllm"}},
        {"learner": {"backend": "deepspeed"}},
        {"sampler": {"backend": "vllm"}, "learner": {"backend": "deepspeed"}},
    ],
    ids=["vllm", "deepspeed", "vllm+deepspeed"],
)
def test_the_engines_pipeline_too(engines):
    """The vLLM sampler and the DeepSpeed learner load with a staleness (run in tests/engines/test_staleness_engines.py)."""
    assert RunConfig.model_validate(micro_run_config(rollout={"staleness": 2}, **engines)).rollout.staleness == 2


def gap(model, rollouts) -> float:
    """max |logp_model - sampler logp| over the response tokens of ``rollouts``."""
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, rollouts, slice(None), 1.0, False)
    return float((logp - rollouts.sampler_logp)[rollouts.mask.bool()].abs().max())


@pytest.mark.slow
def test_at_k2_the_batch_of_step_t_is_sampled_by_version_t_minus_2():
    """The sampler logprobs of step t's batch are the logprobs of the weights after max(0, t - 2) updates
    (recomputed here from a copy kept after each update), and not those of the current weights."""
    cfg = RunConfig.model_validate(learning_config(staleness=2, steps=5))
    versions: dict[int, torch.nn.Module] = {}
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        versions[0] = parts.learner.policy_copy()
        taken = []
        take = parts.pipeline.take

        def observed_take(step):
            result = take(step)
            taken.append(result[0])
            return result

        parts.pipeline.take = observed_take
        metrics = []
        for step in range(cfg.rollout.steps):
            metrics.append(rl_step(cfg, step, parts))
            versions[step + 1] = parts.learner.policy_copy()
    # the sampler's fp32 decode and the full forward sum the same operands in other orders
    moved = []
    tol = 4 * order_tolerance(reduction_depth(versions[0]), 30.0, EPS32)  # logits of size <= 30; ± per side, x2
    for step, sampled in enumerate(taken):
        assert sampled.step == step and sampled.version == max(0, step - 2)
        assert (
            metrics[step]["offpolicy/staleness_max"]
            == metrics[step]["offpolicy/staleness_mean"]
            == step - sampled.version
        )
        assert gap(versions[sampled.version], sampled.rollouts) <= tol
        if (
            gap(versions[step], sampled.rollouts) > 100 * tol
        ):  # the policy moved since: the current weights give other logprobs
            moved.append(step)
    assert len(moved) >= 2  # the check above tells versions apart (a policy that never moves would not)


@pytest.mark.slow
def test_two_runs_of_one_run_key_log_identical_metrics_at_k2():
    cfg = RunConfig.model_validate(
        deep_merge(learning_config(staleness=2, steps=4), {"health": {"mismatch_record_every": 1}})
    )
    records: list[dict] = []
    first, second = logged(cfg, records), logged(cfg)
    # the flight recorder says how many versions behind each recorded batch's sampler was
    assert [(r["step"], r["staleness"]) for r in records] == [(0, 0), (1, 1), (2, 2), (3, 2)]

    def numbers(rows):
        return [(s, {k: v for k, v in m.items() if not k.startswith("perf/")}) for s, m in rows]

    assert numbers(first) == numbers(second)  # exact: the schedule, not the timing, fixes them
    assert [m["offpolicy/staleness_max"] for _, m in first[:4]] == [0.0, 1.0, 2.0, 2.0]
    assert all(PIPELINE_KEYS <= set(m) for _, m in first[:4])
    assert first[1][1]["mismatch/kl"] > 0  # a stale batch: sampler and learner policies differ


@pytest.mark.slow
def test_staleness_zero_logs_no_pipeline_metric_and_runs_in_turn():
    cfg = RunConfig.model_validate(deep_merge(learning_config(steps=2), {"health": {"mismatch_record_every": 1}}))
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        assert parts.pipeline is None
    records: list[dict] = []
    assert not any(PIPELINE_KEYS & set(m) for _, m in logged(cfg, records))
    assert len(records) == 2 and not any("staleness" in r for r in records)  # the records of before


@pytest.mark.slow  # ~4 s: the CLI plans 39 runs
def test_the_staleness_study_plans_its_declared_design(tmp_path):
    """studies/staleness.yaml: 13 arms (the synchronous baseline; staleness 1/2/4/8 x none/tis/decoupled) at the first
    look's 3 seeds, and `workbench plan` prints the seeds its SESOI and noise SD need (25) and the cap (9)."""
    from typer.testing import CliRunner

    from workbench.cli.main import app

    path = STUDIES[0].parent / "staleness.yaml"
    specs = expand(load_study(path))
    arms = {s.variant: (s.config.rollout.staleness, s.config.algorithm.correction) for s in specs}
    assert len(specs) == 13 * 3 and arms["s0"] == (0, None)
    assert {arms[f"s{k}_{c}"] for k in (1, 2, 4, 8) for c in ("none", "tis", "decoupled")} == {
        (k, None if c == "none" else c) for k in (1, 2, 4, 8) for c in ("none", "tis", "decoupled")
    }
    result = CliRunner().invoke(
        app,
        ["plan", str(path)],
        catch_exceptions=False,
        env={"COLUMNS": "200", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"},
    )
    assert result.exit_code == 0, result.output
    assert "final_eval_accuracy: 25 seeds per arm (study has 3)" in result.output
    assert "capped at 9 seeds per arm" in result.output and "warning:" not in result.output


def test_a_synchronous_run_never_logs_the_pipeline_metrics_so_rules_on_them_do_not_apply():
    from workbench.metrics.catalogue import BY_NAME, unlogged_by_config

    assert PIPELINE_KEYS <= set(BY_NAME)
    assert set(unlogged_by_config({"rollout.staleness": 0})) >= PIPELINE_KEYS
    assert not PIPELINE_KEYS & set(unlogged_by_config({"rollout.staleness": "2"}))


@pytest.mark.slow
def test_a_failure_on_the_sampler_thread_is_raised_on_the_learner_not_waited_for():
    """Asking for step 2 at k = 1 before version 1 exists: the sampler thread fails on the missing snapshot, and the
    learner's take of that step raises the error instead of waiting for a batch that will never come."""
    cfg = RunConfig.model_validate(learning_config(staleness=1, steps=3))
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        pipe = parts.pipeline
        pipe.ask(2, lambda step: parts.prompts.draw(step, cfg.rollout.prompts_per_step), parts.rng.getstate)
        assert [pipe.take(step)[0].version for step in (0, 1)] == [0, 0]
        with pytest.raises(KeyError):
            pipe.take(2)
