"""A standalone WorkbenchCallback run without ``GRPOConfig(log_completions=True)`` (runs in .venv-trl): TRL writes no
completions, and the run's tag says why it has no rollouts instead of saying nothing (issue #48). The run with them
is tests/trl_engine/test_trl_engine.py::test_workbench_callback_in_a_plain_trl_script."""

from __future__ import annotations

import pytest

from tests.importers.helpers import child_runs, sqlite_uri
from tests.trl_support import require_trl

require_trl("docs/trl-engine.md")

pytestmark = pytest.mark.slow  # importing TRL and MLflow: ~15 s on the 2-core machine


def test_without_log_completions_the_run_says_why_it_has_no_rollouts(tmp_path):
    from mlflow import MlflowClient
    from transformers import TrainerControl, TrainerState
    from trl import GRPOConfig

    from workbench.execution.trl_callback import WorkbenchCallback
    from workbench.execution.trl_completions import NO_LOG_COMPLETIONS

    uri = sqlite_uri(tmp_path / "mlflow.db")
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, bf16=False, use_cpu=True, report_to="none")
    assert args.log_completions is False  # TRL's default
    callback = WorkbenchCallback(study="mine", variant="dapo", seed=0, tracking_uri=uri)
    state, control = TrainerState(max_steps=2), TrainerControl()
    callback.on_train_begin(args, state, control)  # the events of a trainer that stopped before its first step
    callback.on_train_end(args, state, control)
    (run,) = child_runs(uri, "mine")
    assert run.info.status == "FINISHED"
    assert run.data.tags["workbench.rollouts"] == NO_LOG_COMPLETIONS
    assert "log_completions=True" in NO_LOG_COMPLETIONS
    assert "rollouts" not in {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
