"""A stop request cannot be lost: Python swallows a KeyboardInterrupt that lands in a finalizer
("Exception ignored in ..."), which is how a cancelled Ray task once trained on to FINISHED (the
interrupt landed in SQLAlchemy's class-registry weakref callback). The handler remembers the
request and the run stops at its next step boundary."""

from __future__ import annotations

import signal

import pytest

from tests.execution_helpers import fast_run_config
from workbench.execution.interrupts import raise_if_stop_requested, stop_requested, stopping_on

# the swallowed KeyboardInterrupts below are the point: pytest reports each as "unraisable"
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def default_sigint_handler():
    """Python's own SIGINT handler, whatever started pytest: a shell starts a background job (`cmd &`,
    nohup) with SIGINT ignored, and an ignored signal never reaches a handler to be swallowed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class SignalledWhileCollected:
    """Sends SIGINT from inside ``__del__``: the Python handler runs there, so its exception is ignored."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        sum(range(100))  # bytecode after the signal: the handler runs here, inside the finalizer


def test_python_swallows_a_keyboard_interrupt_raised_in_a_finalizer():
    """The failure this module exists for: with the default handler the Ctrl-C is simply gone."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    SignalledWhileCollected()  # dropped at once; no KeyboardInterrupt comes out
    assert not stop_requested()


def test_a_swallowed_stop_request_is_remembered_and_raised_at_the_next_check():
    with stopping_on(signal.SIGINT):
        raise_if_stop_requested()  # nothing requested yet
        SignalledWhileCollected()
        assert stop_requested()
        with pytest.raises(KeyboardInterrupt):
            raise_if_stop_requested()
        signal.raise_signal(signal.SIGINT)  # a second one is ignored: closing the run is not interrupted
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_each_job_starts_with_no_stop_requested():
    """A Ray worker process runs task after task: a cancel of one must not stop the next."""
    with stopping_on(signal.SIGINT):
        SignalledWhileCollected()
    with stopping_on(signal.SIGINT):
        assert not stop_requested()


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_a_run_whose_interrupt_was_swallowed_ends_killed_at_the_next_step(workdir):
    from mlflow import MlflowClient

    from workbench.config import RunConfig
    from workbench.execution.run import execute_run

    class SwallowedCtrlCAtStep:
        def __init__(self, step: int) -> None:
            self.step = step

        def __call__(self, step, metrics):
            if step == self.step:
                SignalledWhileCollected()  # as Ray's cancel landing in a weakref callback

    cfg = RunConfig.model_validate(fast_run_config(steps=6))
    with stopping_on(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        execute_run(cfg, study="swallowed", variant="base", label="base", on_step=SwallowedCtrlCAtStep(1))
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("swallowed").experiment_id])
    assert run.info.status == "KILLED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward/mean")]
    assert max(steps) == 2  # stopped after the step that followed the swallowed Ctrl-C, not at 5


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_workbench_run_remembers_a_ctrl_c_python_swallowed_and_stops_killed(workdir):
    """`workbench run` (in this process) once kept training after a Ctrl-C: its KeyboardInterrupt landed in
    a finalizer under Python's own SIGINT handler and was gone. Here the Ctrl-C is swallowed the same way
    (a finalizer, run from a profile hook when the first step's metrics are logged, so mid-run): the CLI
    still stops, exit 130, the run KILLED before its last step, and the study's second run never starts."""
    import sys

    from mlflow import MlflowClient
    from typer.testing import CliRunner

    from tests.execution_helpers import write_study
    from workbench.cli.main import app

    path = write_study(workdir / "study.yaml", "swallowed-cli", steps=6, seeds=[0, 1])
    fired = []

    def swallow_a_ctrl_c_once_mid_run(frame, event, arg):
        if event == "call" and not fired and frame.f_code.co_name == "log_metrics":
            fired.append(True)
            SignalledWhileCollected()

    sys.setprofile(swallow_a_ctrl_c_once_mid_run)
    try:
        result = CliRunner().invoke(app, ["run", str(path), "--quiet"])
    finally:
        sys.setprofile(None)
    assert fired and result.exit_code == 130, result.output
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    runs = client.search_runs(
        [client.get_experiment_by_name("swallowed-cli").experiment_id], "tags.`workbench.role` = 'run'"
    )
    assert [r.info.status for r in runs] == ["KILLED"]
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "reward/mean")]
    assert max(steps) < 5
