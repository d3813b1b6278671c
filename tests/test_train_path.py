"""The algorithm path's pieces: the learner wrappers ``build_learner`` chooses, the one stopwatch,
and the rule that the loop and the update hold no multi-rank, fault-injection or timing code."""

from __future__ import annotations

import ast
import copy
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from tests.conftest import micro_run_config
from tests.learner_helpers import micro_policy_batch
from workbench.batch import TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig, RunConfig
from workbench.health import HealthMonitor
from workbench.train import update as update_module
from workbench.train.deepspeed_learner import DeepSpeedLearner
from workbench.train.learner import TorchLearner, build_learner
from workbench.train.learner_protocol import Learner, no_section
from workbench.train.step import open_run_parts, rl_step
from workbench.train.stopwatch import Stopwatch
from workbench.train.wrappers import NonFiniteInjection

TRAIN = Path(__file__).resolve().parent.parent / "workbench" / "train"
ALGO = AlgorithmConfig(preset="grpo", minibatches=2)


@pytest.fixture(scope="module")
def setup():
    """A 1-layer micro Llama, 12 sampled completions and fixed advantages."""
    return micro_policy_batch()


def learner_for(setup, **fields):
    return build_learner(copy.deepcopy(setup[0]), RunConfig(learner=LearnerConfig(lr=1e-3, **fields)))


def update(setup, learner, step: int, section=no_section) -> dict[str, float]:
    batch = TrainBatch.of(setup[3], setup[4], step=step)
    return learner.update(batch, ALGO, 1.0, torch.Generator().manual_seed(0), section)


def weights(learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.model.parameters()]


def test_build_learner_wraps_the_backend_only_when_fault_injection_is_asked(setup):
    assert type(learner_for(setup)) is TorchLearner
    wrapped = learner_for(setup, inject_nonfinite_at_step=3)
    assert isinstance(wrapped, NonFiniteInjection) and isinstance(wrapped.inner, TorchLearner)
    assert wrapped.device == wrapped.inner.device  # the rest of the surface is the backend's


LEARNER_METHODS = sorted(name for name, value in vars(Learner).items() if callable(value) and not name.startswith("_"))


@pytest.mark.parametrize("backend", [TorchLearner, DeepSpeedLearner])
def test_every_backend_defines_the_whole_learner_surface(backend):
    """The backends inherit from the protocol (through LearnerBase): a method one forgot would be the
    protocol's empty stub, returning None. Each is defined by the backend or by LearnerBase."""
    assert "update" in LEARNER_METHODS and "gathered_model" in LEARNER_METHODS
    assert [name for name in LEARNER_METHODS if getattr(backend, name) is getattr(Learner, name)] == []


def test_a_wrapped_learner_offers_the_surface_of_its_backend(setup):
    wrapped = learner_for(setup, inject_nonfinite_at_step=3)
    assert all(callable(getattr(wrapped, name)) for name in LEARNER_METHODS)
    assert (wrapped.cfg, wrapped.model, wrapped.device) == (
        wrapped.inner.cfg,
        wrapped.inner.model,
        wrapped.inner.device,
    )


def test_fault_injection_poisons_exactly_its_step_and_the_step_is_never_applied(setup):
    """Step 1 back-propagates a NaN loss: a non-finite grad/norm, weights untouched; steps 0 and 2 train."""
    learner = learner_for(setup, inject_nonfinite_at_step=1)
    before = weights(learner)
    assert torch.isfinite(torch.tensor(update(setup, learner, step=0)["grad/norm"]))
    after_0 = weights(learner)
    assert any(not torch.equal(a, b) for a, b in zip(after_0, before))
    assert not torch.isfinite(torch.tensor(update(setup, learner, step=1)["grad/norm"]))
    assert all(torch.equal(a, b) for a, b in zip(weights(learner), after_0))
    assert torch.isfinite(torch.tensor(update(setup, learner, step=2)["grad/norm"]))
    assert not learner.poisoned  # the poison ends with its update


def test_a_wrapper_outside_its_step_changes_nothing(setup):
    """Same inputs, same float operations: the wrapped and the bare learner agree bit for bit."""
    bare, wrapped = learner_for(setup), learner_for(setup, inject_nonfinite_at_step=7)
    assert update(setup, bare, step=0) == update(setup, wrapped, step=0)
    assert all(torch.equal(a, b) for a, b in zip(weights(bare), weights(wrapped)))


def test_timed_algorithm_sections_change_no_value_and_record_their_time(setup):
    watch = Stopwatch()
    plain, timed = learner_for(setup), learner_for(setup)
    expected = update(setup, plain, step=0)
    assert update(setup, timed, step=0, section=watch) == expected
    seconds = watch.lap()
    assert set(seconds) == {"algorithm"} and seconds["algorithm"] > 0  # the update opens only its own sections
    assert watch.lap() == {}  # a lap starts the next one from zero


def test_the_algorithm_sections_hold_the_algorithms_computations_and_none_of_the_learners_passes(setup):
    """TIS, 2 minibatches of 6 sequences, micro-batches of 4 (4 + 2): one section for the importance
    weights and one per micro-batch loss (4), and no learner pass (logprobs, backward, step) inside one."""
    learner, opened, inside = learner_for(setup, micro_batch_size=4), [], []
    passes = {name: getattr(learner, name) for name in ("logprobs", "backward", "step")}

    @contextmanager
    def section(name: str):
        opened.append(name)
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()

    def outside_any_section(name):
        def call(*args, **kwargs):
            assert not inside, f"learner.{name} ran inside an algorithm section"
            return passes[name](*args, **kwargs)

        return call

    for name in passes:
        setattr(learner, name, outside_any_section(name))
    batch = TrainBatch.of(setup[3], setup[4], step=0)
    learner.update(
        batch,
        AlgorithmConfig(preset="grpo", minibatches=2, correction="tis"),
        1.0,
        torch.Generator().manual_seed(0),
        section,
    )
    assert opened == ["algorithm"] * 5


def test_a_run_step_reports_the_time_inside_the_updates_algorithm_sections_as_perf_algorithm_s(monkeypatch):
    """Every loss takes 0.05 s longer: a step of 2 minibatches (2 losses) reports at least 0.1 s more
    in perf/algorithm_s, which the run's stopwatch times inside the update."""
    cfg = RunConfig.model_validate(micro_run_config(algorithm={"minibatches": 2}, reward={"overlap": False}))
    slow = update_module.rows_loss

    def slower_loss(*args, **kwargs):
        time.sleep(0.05)
        return slow(*args, **kwargs)

    monkeypatch.setattr(update_module, "rows_loss", slower_loss)
    with open_run_parts(cfg, HealthMonitor.from_config(cfg.health)) as parts:
        metrics = rl_step(cfg, 0, parts)
    assert metrics["train/optimizer_steps"] == 2
    assert metrics["perf/algorithm_s"] >= 2 * 0.05
    assert metrics["perf/learn_s"] >= metrics["perf/algorithm_s"]  # learn holds the update's sections


def test_stopwatch_sections_add_up_and_nest():
    watch = Stopwatch()
    with watch("outer"):
        for _ in range(2):
            with watch("inner"):
                time.sleep(0.01)
    seconds = watch.lap()
    assert seconds["inner"] >= 0.02  # two entries add up (sleep sleeps at least as long as asked)
    assert seconds["outer"] >= seconds["inner"]  # the outer section holds the inner one


# What acceptance forbids in the loop and the update: multi-rank, fault-injection and timing code.
FORBIDDEN_NAMES = {
    "perf_counter",
    "time",
    "monotonic",
    "ranks",
    "multi_rank",
    "is_follower",
    "send",
    "announce_update",
    "inject_nonfinite_at_step",
    "poison_next_update",
    "Stopwatch",
    "watch",
    "hasattr",
    "partial",
}


@pytest.mark.parametrize("module", ["loop.py", "update.py"])
def test_loop_and_update_hold_no_multi_rank_fault_injection_or_timing_code(module):
    tree = ast.parse((TRAIN / module).read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {
        alias.name.split(".")[-1]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert used & FORBIDDEN_NAMES == set()
