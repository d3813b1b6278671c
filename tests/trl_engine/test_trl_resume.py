"""engine: trl resumes from TRL's own checkpoints by run key, each step logged once (runs in .venv-trl)."""

from __future__ import annotations

import pytest

from tests.trl_engine.test_trl_engine import BASE  # skips this module too where TRL is not installed
from tests.trl_support import require_trl

require_trl("docs/trl-engine.md")

pytestmark = pytest.mark.slow

STEPS = 4
COMPARED = ("loss/policy", "grad/norm", "entropy/mean", "reward/mean", "length/mean", "accuracy/train", "health/status")


class Interrupt(RuntimeError):
    """Raised from on_step: the run crashes (FAILED) right after step k was logged."""


def test_a_failed_trl_run_executed_again_resumes_from_its_trl_checkpoint(tmp_path):
    from mlflow import MlflowClient

    from workbench.config import RunConfig, deep_merge
    from workbench.execution.run import execute_run
    from workbench.tracking.store import checkpoint_root

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = RunConfig.model_validate(
        deep_merge(
            BASE,
            {
                "learner": {"lr": 1e-3, "checkpoint_every": 1},
                "tracking": {"uri": uri},
                "rollout": {"prompts_per_step": 4, "group_size": 4, "steps": STEPS, "eval_every": 2, "log_samples": 2},
            },
        )
    )
    reference = execute_run(cfg, study="uninterrupted", variant="v", label="ref")
    assert reference.status == "FINISHED"

    def crash(step: int, metrics: dict) -> None:
        if step == 2:
            raise Interrupt(f"interrupted after step {step}")

    first = execute_run(cfg, study="resumed", variant="v", label="r", on_step=crash)
    assert first.status == "FAILED" and "interrupted after step 2" in first.error
    # TRL saves after logging, so the crash at step 2 left checkpoints after steps 0 and 1: step 2 runs again
    second = execute_run(cfg, study="resumed", variant="v", label="r")
    assert second.status == "FINISHED" and second.steps == STEPS
    client = MlflowClient(uri)
    run = client.get_run(second.run_id)
    assert run.data.tags["workbench.resumed_from_step"] == "2"
    for name in COMPARED:
        points = client.get_metric_history(second.run_id, name)
        steps = [m.step for m in points]
        want = list(range(STEPS)) + ([STEPS] if name == "health/status" else [])
        assert sorted(steps) == want, (name, steps)  # each step once: 0-1 replayed, 2.. trained
        ref = {m.step: m.value for m in client.get_metric_history(reference.run_id, name)}
        got = {m.step: m.value for m in points}
        # TRL restores weights, optimizer, every RNG and the data order from its checkpoint: the resumed run
        # retraces the uninterrupted one. 1e-6: float32 forward/backward sums of a few hundred terms (~1e-7
        # each) taken in another order after the reload are not bitwise the same
        assert got == pytest.approx(ref, rel=1e-6, abs=1e-6), name
    assert any(m.value > 0 for m in client.get_metric_history(reference.run_id, "grad/norm"))  # weights moved
    assert sorted(m.step for m in client.get_metric_history(second.run_id, "eval/accuracy")) == [0, 2, 4]
    assert not (checkpoint_root(uri) / cfg.run_key()).exists()  # a FINISHED run's checkpoints are removed
    # the stored completions too: steps 0-1 replayed from the failed attempt's chunks, each step's 16 once, the
    # same completions as the uninterrupted run's (TRL restored the RNG: it samples the same tokens)
    from workbench.analysis.rollouts import query_rollouts

    resumed = query_rollouts("resumed", tracking_uri=uri)
    resumed = resumed[resumed["run_id"] == second.run_id]
    train = resumed[resumed["split"] == "train"]
    assert train.groupby("step").size().to_dict() == dict.fromkeys(range(STEPS), 16)
    assert resumed[resumed["split"] == "eval"].groupby("step").size().to_dict() == {0: 10, 2: 10, 4: 10}
    ref = query_rollouts("uninterrupted", tracking_uri=uri, split="train")
    assert list(train["text"]) == list(ref["text"]) and list(train["reward"]) == list(ref["reward"])
