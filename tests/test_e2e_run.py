"""End to end: `workbench run` on the micro model, read back from a real MLflow store.

One workflow per test: a tracked run with every canonical metric, resume, bad input, crash.
"""

from __future__ import annotations

import json

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.invocation import workbench_command
from workbench.cli.main import app

pytestmark = pytest.mark.slow

STEP_METRICS = [
    "reward/mean",
    "reward/std",
    "accuracy/train",
    "entropy/mean",
    "length/mean",
    "length/max",
    "length/truncated_frac",
    "clip/frac",
    "clip/frac_low",
    "clip/frac_high",
    "mismatch/prob_abs_diff_mean",
    "mismatch/prob_abs_diff_max",
    "mismatch/kl",
    "loss/policy",
    "grad/norm",
    "batch/zero_std_frac",
    "perf/step_s",
    "perf/sample_tokens_per_s",
    "perf/learn_tokens_per_s",
    "health/status",
]


def write_study(path, name="e2e", **overrides):
    path.write_text(yaml.safe_dump({"name": name, "base": micro_run_config(**overrides)}))
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def client_for(workdir):
    return MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")


def read_artifact(client, run_id, path, workdir) -> str:
    local = client.download_artifacts(run_id, path, str(workdir / "downloads"))
    return open(local).read()


def test_run_tracks_every_canonical_metric_and_resumes(workdir):
    study = write_study(workdir / "study.yaml")
    result = invoke("run", study, "--quiet")
    assert result.exit_code == 0, result.output
    # the hint names the command as it was started (here pytest's interpreter: `python -m workbench.cli.main ui`)
    assert "FINISHED" in result.output and f"Open the UI with: {workbench_command()} ui" in " ".join(
        result.output.split()
    )

    client = client_for(workdir)
    exp = client.get_experiment_by_name("e2e")
    parents = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    runs = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    assert len(parents) == 1 and len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
    for tag in [
        "workbench.study",
        "workbench.variant",
        "workbench.seed",
        "workbench.run_key",
        "workbench.health",
        "workbench.health_reasons",
    ]:
        assert tag in run.data.tags
    assert run.data.params["learner.lr"] == "0.0001" and run.data.params["algorithm.estimator"] == "grpo"
    assert run.data.tags["workbench.arm"] == run.info.run_name.rsplit("/seed=", 1)[0]  # compare's grouping

    steps = 3
    for key in STEP_METRICS:  # every training step carries every canonical metric
        logged = {m.step for m in client.get_metric_history(run.info.run_id, key)}
        assert set(range(steps)) <= logged, key
    evals = client.get_metric_history(run.info.run_id, "eval/accuracy")
    assert sorted(m.step for m in evals) == [0, 2, 3]  # every eval_every=2, and after the last update
    assert all(0.0 <= m.value <= 1.0 for m in evals)

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "samples.json", "health.json"} <= artifacts
    samples = json.loads(read_artifact(client, run.info.run_id, "samples.json", workdir))
    assert set(samples["columns"]) >= {"prompt", "completion", "reward", "correct", "length"}

    again = invoke("run", study, "--quiet")  # resume: the finished run is skipped, not duplicated
    assert again.exit_code == 0 and "SKIPPED" in again.output
    assert len(client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such study file"),
        ("name: x\nbase: {learner: {lr: 1e-4}\n", "YAML"),
        ("name: x\nbase:\n  learner: {lrr: 1.0e-4}\n", "lrr"),
        ("name: x\nbase:\n  model: {path: /does/not/exist}\n", "model.path does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(workdir, content, message):
    path = workdir / "bad.yaml"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, ["run", str(path), "--quiet"])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (workdir / "mlflow.db").exists()


def test_crash_mid_run_is_marked_failed_with_traceback(workdir):
    from tests.execution_helpers import broken_model_dir

    cfg = micro_run_config()
    cfg["model"] = {"path": str(broken_model_dir(workdir))}  # preflight passes; loading the weights fails
    study = workdir / "crash.yaml"
    study.write_text(yaml.safe_dump({"name": "crash", "base": cfg}))
    result = invoke("run", study, "--quiet")
    assert result.exit_code == 1
    client = client_for(workdir)
    exp = client.get_experiment_by_name("crash")
    (run,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    assert run.info.status == "FAILED"
    assert "workbench.error" in run.data.tags
    text = read_artifact(client, run.info.run_id, "error.txt", workdir)
    assert "Traceback" in text


def test_failing_health_rule_stops_the_run_early_and_says_why(workdir):
    """With max_new_tokens=8 the micro model cannot finish '\\boxed{..}': every completion truncates."""
    rules = {"length_blowup": {"max_truncated_frac": 0.5, "patience": 2, "severity": "fail"}}
    study = write_study(
        workdir / "stop.yaml",
        name="stop",
        rollout={"steps": 6},
        health={"preset": "default", "rules": rules, "on_fail": "stop"},
    )
    result = invoke("run", study, "--quiet")
    assert result.exit_code == 0, result.output
    client = client_for(workdir)
    (run,) = client.search_runs([client.get_experiment_by_name("stop").experiment_id], "tags.`workbench.role` = 'run'")
    assert run.info.status == "FINISHED"  # a health stop is a verdict, not a crash
    assert run.data.tags["workbench.health"] == "fail"
    assert run.data.tags["workbench.health_reasons"] == "length_blowup@1"
    assert run.data.tags["workbench.stopped_early"] == "true"
    steps = {m.step for m in client.get_metric_history(run.info.run_id, "reward/mean")}
    assert steps == {0, 1}  # stopped right after the rule fired at step 1
    report = json.loads(read_artifact(client, run.info.run_id, "health.json", workdir))
    assert report["rules"]["length_blowup"]["first_trigger"]["step"] == 1


def test_stop_run_from_a_step_callback_is_a_deliberate_stop(workdir):
    """The hook Optuna pruning uses: raising StopRun ends the run FINISHED with the reason."""
    from workbench.config import RunConfig
    from workbench.execution.run import StopRun, execute_run

    def prune_at_step_1(step, metrics):
        if step == 1:
            raise StopRun("pruned by optuna at step 1")

    cfg = RunConfig.model_validate(micro_run_config(rollout={"steps": 5}))
    outcome = execute_run(cfg, study="hook", variant="base", label="hook", on_step=prune_at_step_1)
    assert outcome.status == "FINISHED" and outcome.steps == 2
    run = client_for(workdir).get_run(outcome.run_id)
    assert run.data.tags["workbench.stopped_early"] == "true"
    assert run.data.tags["workbench.stop_reason"] == "pruned by optuna at step 1"


@pytest.mark.parametrize(
    ("setting", "engine"), [("sampler.backend=vllm", "vllm"), ("learner.backend=deepspeed", "deepspeed")]
)
def test_a_missing_engine_is_one_line_exit_2_before_any_model_or_store(workdir, setting, engine):
    """The engines live in their own venv (`make engines`); from the main one, asking for them
    fails at once, naming the extra, instead of after the tiny model is built and warmed up."""
    import importlib.util

    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed in this environment")
    study = write_study(workdir / "s.yaml")
    result = CliRunner().invoke(app, ["run", str(study), "--set", setting])
    assert result.exit_code == 2
    assert f"{setting} needs {engine}" in result.output and "rl-workbench[gpu]" in result.output
    assert not (workdir / "mlflow.db").exists()
