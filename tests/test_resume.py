"""Checkpoint and resume with the torch learner (``learner.checkpoint_every``).

A run that crashes after step k and is executed again continues at step k+1 from its checkpoint
(weights, AdamW state, the loop's RNG states) and its metrics are those of a run never interrupted.
"""

from __future__ import annotations

import random

import torch

from tests.resume_helpers import check_resumed, interrupt_and_resume, resume_config
from workbench.tracking.store import checkpoint_root
from workbench.train.checkpoint import RunCheckpoints, capture


def test_crashed_run_resumes_at_the_next_step_with_identical_metrics(workdir):
    """Bitwise: the same fp32 weights and AdamW state (torch.save), the same RNG states, the same
    single-threaded kernels — nothing differs between going on and stopping then resuming."""
    record = interrupt_and_resume(resume_config({}), crash_after=1)
    check_resumed(record, crash_after=1, tolerance=0.0)


def test_checkpoint_root_follows_the_store(tmp_path, monkeypatch):
    """Next to a local sqlite store; an env override wins; a server store falls back to the working dir."""
    monkeypatch.delenv("WORKBENCH_CHECKPOINT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert checkpoint_root(f"sqlite:///{tmp_path}/db/mlflow.db") == tmp_path / "db" / "checkpoints"
    assert checkpoint_root("http://127.0.0.1:5000") == tmp_path / ".workbench" / "checkpoints"
    monkeypatch.setenv("WORKBENCH_CHECKPOINT_DIR", str(tmp_path / "shared"))
    assert checkpoint_root("http://127.0.0.1:5000") == tmp_path / "shared"


class NoLearner:
    def save_checkpoint(self, directory):
        (directory / "weights").write_text("w")

    def load_checkpoint(self, directory):
        assert (directory / "weights").read_text() == "w"


def test_only_the_latest_checkpoint_is_kept_and_restores_the_rngs(tmp_path):
    checkpoints = RunCheckpoints(tmp_path / "run", every=2)
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    for steps_done in (2, 4):
        rng.random(), torch.randperm(5, generator=gen)
        checkpoints.save(NoLearner(), capture(steps_done, rng, gen, [(0, {"m": 1.0})], []))
    assert checkpoints.latest_step() == 4
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["latest.json", "step-4"]
    expected = (rng.random(), torch.randperm(5, generator=gen).tolist(), torch.rand(1).item())
    state = checkpoints.restore(NoLearner(), rng, gen)  # rewinds the RNGs to the save
    assert (rng.random(), torch.randperm(5, generator=gen).tolist(), torch.rand(1).item()) == expected
    assert state.steps_done == 4 and state.history == [(0, {"m": 1.0})]
