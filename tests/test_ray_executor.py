"""``workbench run --executor ray``: a real local Ray cluster (tests/ray_cluster.py: a head and two
one-CPU nodes), real runs of the micro model, a real MLflow store. The study's runs become Ray
tasks; a node removed mid-run, a Ctrl-C on the driver, and the result against the local executor."""

from __future__ import annotations

import os
import signal

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.execution_helpers import (
    broken_model_dir,
    child_runs,
    fast_run_config,
    install_empty_mlflow_db,
    spawn,
    statuses_by_key,
    stop_group,
    wait_for,
    workbench_cmd,
    write_study,
)
from tests.ray_cluster import add_worker_node, ray_cluster, require_ray  # noqa: F401 - ray_cluster: a fixture
from workbench.cli.main import app
from workbench.config import RunConfig
from workbench.execution.ray_executor import RAY_NODE_TAG, RayOptions, run_resources
from workbench.metrics.catalogue import BY_NAME
from workbench.study import expand, load_study


def invoke(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False, env=env)


def study_parent(client, name: str):
    exp = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    return parent


# ------------------------------------------------------------------------------------------ fast
def test_resources_come_from_the_run_config():
    cpu = RunConfig.model_validate({"learner": {"device": "cpu"}})
    gpu = RunConfig.model_validate({"learner": {"device": "cuda:0"}})
    assert run_resources(cpu, RayOptions()) == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert run_resources(gpu, RayOptions(num_cpus=4, memory_gb=2)) == {
        "num_cpus": 4.0,
        "num_gpus": 1.0,
        "memory": 2 * 2**30,
    }
    assert run_resources(cpu, RayOptions(num_gpus=2))["num_gpus"] == 2.0  # execution.ray.num_gpus wins


def test_bad_execution_settings_are_one_line_errors_naming_the_field(workdir):
    path = write_study(workdir / "study.yaml", "bad", execution={"executor": "slurm", "ray": {"num_cpu": 2}})
    result = invoke("run", path, "--quiet")
    assert result.exit_code == 2
    assert "execution.executor" in result.output and "execution.ray.num_cpu" in result.output, result.output
    assert "num_cpus" in result.output  # did you mean
    path = write_study(workdir / "study.yaml", "bad", execution={"ray": {"max_retries": -1}})
    result = invoke("run", path, "--quiet")
    assert result.exit_code == 2 and "execution.ray.max_retries" in result.output, result.output
    assert not (workdir / "mlflow.db").exists()  # nothing written


def test_address_without_the_ray_executor_and_an_unreachable_cluster_exit_2(workdir):
    require_ray()
    path = write_study(workdir / "study.yaml", "noray", steps=1, seeds=[0])
    result = invoke("run", path, "--address", "auto", "--quiet")
    assert result.exit_code == 2 and "--address needs --executor ray" in result.output, result.output
    result = invoke("run", path, "--executor", "ray", "--address", "127.0.0.1:1", "--quiet")
    assert result.exit_code == 2 and "cannot connect to a Ray cluster at 127.0.0.1:1" in result.output, result.output
    assert not (workdir / "mlflow.db").exists()  # refused before MLflow is touched


# ------------------------------------------------------------------------------------------ slow
def deterministic_metrics(client, run) -> dict[str, list[tuple[int, float]]]:
    """Every metric's history, but for wall-clock measurements (perf/*_s, tokens per second)."""
    out = {}
    for name in run.data.metrics:
        spec = BY_NAME.get(name)
        if spec is not None and spec.unit in ("s", "tokens/s"):
            continue
        out[name] = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
    return out


@pytest.mark.slow
def test_a_study_on_a_two_node_cluster_runs_each_run_once_with_the_local_results(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    """The acceptance study: 2 variants x 3 seeds on the Ray cluster, then the same study locally
    (--parallel 2, one torch thread per run as on Ray): every logged metric equal, run by run."""
    uri = install_empty_mlflow_db(workdir)
    path = write_study(
        workdir / "study.yaml", "onray", steps=3, seeds=[0, 1, 2], variants={"a": {}, "b": {"learner": {"lr": 3.0e-4}}}
    )
    keys = {s.run_key for s in expand(load_study(path))}
    result = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address)
    assert result.exit_code == 0, result.output
    assert "by seed" in result.output and "Ray cluster: 3 node(s), 2 CPUs" in result.output, result.output
    client = MlflowClient(uri)
    runs = child_runs(client, "onray")
    assert statuses_by_key(runs) == {key: ["FINISHED"] for key in keys}
    assert len({r.data.tags[RAY_NODE_TAG] for r in runs}) == 2  # Ray used both nodes
    for run in runs:
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.yaml", "health.json", "samples.json"} <= names, names
    assert study_parent(client, "onray").info.status == "FINISHED"
    again = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address, "--quiet")
    assert again.exit_code == 0 and again.output.count("SKIPPED") == 6, again.output

    local_dir = workdir / "local"
    local_dir.mkdir()
    local_uri = install_empty_mlflow_db(local_dir)
    local = invoke("run", path, "--parallel", 2, "--quiet", env={"MLFLOW_TRACKING_URI": local_uri})
    assert local.exit_code == 0, local.output
    local_client = MlflowClient(local_uri)
    local_runs = {r.data.tags["workbench.run_key"]: r for r in child_runs(local_client, "onray")}
    compared = 0
    for run in runs:
        on_ray = deterministic_metrics(client, run)
        here = deterministic_metrics(local_client, local_runs[run.data.tags["workbench.run_key"]])
        assert on_ray == here  # exactly: the same function, the same threads, the same seed
        compared += sum(len(v) for v in on_ray.values())
    print(f"\n{compared} metric values compared exactly over 6 runs")
    assert compared > 6 * 20


@pytest.mark.slow
def test_a_node_killed_mid_run_the_run_finishes_once_elsewhere_from_its_checkpoint(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    uri = install_empty_mlflow_db(workdir)
    # checkpoints every 5 steps (the default place, beside the store: every node of this cluster sees it);
    # 300 steps so that the run is still training when the node dies after its first checkpoint
    path = write_study(
        workdir / "study.yaml",
        "nodekill",
        steps=300,
        seeds=[0],
        variants={"base": {"learner": {"checkpoint_every": 5}}},
    )
    (key,) = {s.run_key for s in expand(load_study(path))}
    client = MlflowClient(uri)
    proc = spawn(
        workbench_cmd("run", path, "--executor", "ray", "--address", ray_cluster.address), workdir, workdir / "run.log"
    )
    try:

        def running_past_a_checkpoint():
            runs = [r for r in child_runs(client, "nodekill") if r.info.status == "RUNNING"]
            return runs[0] if runs and len(client.get_metric_history(runs[0].info.run_id, "reward/mean")) > 6 else None

        first = wait_for(running_past_a_checkpoint, 400, what="the run past its first checkpoint")
        node_id = first.data.tags[RAY_NODE_TAG]
        (node,) = [n for n in ray_cluster.worker_nodes if n.node_id == node_id]
        ray_cluster.remove_node(node, allow_graceful=False)  # the node dies (think: a lost machine)
        assert proc.wait(timeout=300) == 0, (workdir / "run.log").read_text()
    finally:
        stop_group(proc)
        add_worker_node(ray_cluster)  # the next test gets two nodes again
    log = (workdir / "run.log").read_text()
    runs = child_runs(client, "nodekill")
    assert {k: sorted(v) for k, v in statuses_by_key(runs).items()} == {key: ["FAILED", "FINISHED"]}, log
    # (no RUNNING leftover, one FINISHED)
    lost = next(r for r in runs if r.info.status == "FAILED")
    done = next(r for r in runs if r.info.status == "FINISHED")
    assert "Ray worker was lost" in lost.data.tags["workbench.error"]
    assert done.data.tags[RAY_NODE_TAG] != node_id  # it ran elsewhere
    resumed = int(done.data.tags["workbench.resumed_from_step"])  # from the lost attempt's checkpoint
    assert resumed >= 5 and resumed % 5 == 0, resumed
    steps = [m.step for m in client.get_metric_history(done.info.run_id, "reward/mean")]
    assert steps == list(range(300)), steps[:5]  # whole and each step once: the checkpoint's steps replayed
    assert "RETRY" in log, log
    assert study_parent(client, "nodekill").info.status == "FINISHED"


@pytest.mark.slow
def test_a_run_that_fails_by_itself_is_failed_once_not_retried(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    """Ray retries a run whose worker was lost; a run that raises is a result (FAILED), as locally."""
    uri = install_empty_mlflow_db(workdir)
    broken = broken_model_dir(workdir)  # passes the preflight, fails when its weights load
    path = write_study(
        workdir / "study.yaml",
        "selffail",
        steps=3,
        seeds=[0],
        variants={"broken": {"model": {"path": str(broken), "builtin": None}}},
    )
    (key,) = {s.run_key for s in expand(load_study(path))}
    result = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address)
    assert result.exit_code == 1, result.output
    runs = child_runs(MlflowClient(uri), "selffail")
    assert statuses_by_key(runs) == {key: ["FAILED"]}, result.output  # one attempt
    assert "RETRY" not in result.output and runs[0].data.tags["workbench.error"], result.output


@pytest.mark.slow
def test_ctrl_c_on_the_driver_kills_the_runs_and_running_again_resumes(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    uri = install_empty_mlflow_db(workdir)
    # 200 steps: both runs must still be training when Ctrl-C lands. At 60, on a quiet machine one run
    # finished between "both RUNNING" (the second Ray task starts seconds after the first) and the cancel.
    path = write_study(workdir / "study.yaml", "ctrlc", steps=200, seeds=[0, 1])
    keys = {s.run_key for s in expand(load_study(path))}
    client = MlflowClient(uri)
    proc = spawn(
        workbench_cmd("run", path, "--executor", "ray", "--address", ray_cluster.address, "--quiet"),
        workdir,
        workdir / "run.log",
    )
    try:
        wait_for(
            lambda: len([r for r in child_runs(client, "ctrlc") if r.info.status == "RUNNING"]) == 2,
            400,
            what="two runs in progress",
        )
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the driver's terminal
        assert proc.wait(timeout=120) == 130, (workdir / "run.log").read_text()
    finally:
        stop_group(proc)
    log = (workdir / "run.log").read_text()
    assert statuses_by_key(child_runs(client, "ctrlc")) == {key: ["KILLED"] for key in keys}, log
    assert study_parent(client, "ctrlc").info.status == "KILLED"
    assert "Traceback" not in log, log

    result = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address, "--quiet")
    assert result.exit_code == 0, result.output
    for seen in statuses_by_key(child_runs(client, "ctrlc")).values():  # one FINISHED each; the KILLED stay
        assert sorted(seen) == ["FINISHED", "KILLED"]
    assert study_parent(client, "ctrlc").info.status == "FINISHED"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_search_on_ray_prunes_as_it_does_locally(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    """tests/search/test_search_runs.py's pruning search, its trials as Ray tasks: the same two
    COMPLETE and two PRUNED trials (one by the median pruner at step 1, one by a failing health rule)."""
    from optuna.trial import TrialState

    from tests.search.helpers import STRICT_HEALTH, load_spec, optuna_trials, write_search_study
    from tests.search.test_search_runs import PRUNING_SEARCH
    from workbench.search.objective import PRUNE_REASON, PRUNED_BY
    from workbench.search.ray_trials import trials_on_ray
    from workbench.search.worker import TuneOptions, default_storage, run_search

    install_empty_mlflow_db(workdir)
    path = write_search_study(workdir / "study.yaml", "rayprune", PRUNING_SEARCH, health=STRICT_HEALTH)
    spec = load_spec(path)
    lines: list[str] = []
    result = run_search(
        spec,
        options=TuneOptions(log=lines.append),
        run_trials=trials_on_ray(RayOptions(address=ray_cluster.address), workers=1),
    )
    assert result.stopped == "budget" and result.counts["COMPLETE"] == 2 and result.counts["PRUNED"] == 2, lines
    trials = {t.params["learner.lr"]: t for t in optuna_trials(spec, default_storage())}
    assert trials[0.01].state == trials[0.02].state == TrialState.COMPLETE, lines
    assert trials[1.0].state == trials[1.0e-4].state == TrialState.PRUNED
    assert trials[1.0e-4].user_attrs[PRUNE_REASON] == "pruned by optuna at step 1"
    assert trials[1.0].user_attrs[PRUNED_BY] == "health"
    assert sum(" PRUNED after " in line for line in lines) == 2, lines  # the tasks' log lines reached the driver


@pytest.mark.slow
def test_a_run_needing_two_gpus_gets_a_placement_group_on_the_node_that_has_them(workdir, ray_cluster):  # noqa: F811 - ray_cluster: the fixture imported above
    """Ray's GPUs are a resource count: a node declaring two (fake) GPUs is the only place for a run
    with ``execution.ray.num_gpus: 2`` (its learner stays on the CPU: this machine has no CUDA)."""
    import ray

    from workbench.config import deep_merge

    uri = install_empty_mlflow_db(workdir)
    gpu_node = add_worker_node(ray_cluster, num_gpus=2)
    try:
        ray_cluster.wait_for_nodes()
        path = write_study(
            workdir / "study.yaml",
            "twogpus",
            seeds=[0],
            base=deep_merge(fast_run_config(1), {"learner": {"device": "cpu"}}),
            execution={"executor": "ray", "ray": {"address": ray_cluster.address, "num_gpus": 2}},
        )
        result = invoke("run", path, "--quiet")  # the executor and the address from the study's execution:
        assert result.exit_code == 0, result.output
        (run,) = child_runs(MlflowClient(uri), "twogpus")
        assert run.info.status == "FINISHED" and run.data.tags[RAY_NODE_TAG] == gpu_node.node_id
        groups = [g for g in ray.util.placement_group_table().values() if g["bundles"].get(0, {}).get("GPU") == 2]
        assert [g["state"] for g in groups] == ["REMOVED"], groups  # one group made for the run, removed after it
    finally:
        ray_cluster.remove_node(gpu_node)
