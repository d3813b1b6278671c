"""A real ``mlflow server`` stopped mid-run (issue #19, finding 3), and two ``workbench run`` of
one study at once (finding 4), all through the CLI in real subprocesses.

The server is started as ``workbench ui`` starts it (own process group, ``--workers 1``, job
execution off: ready in ~12 s on a quiet machine) on an sqlite backend in the test's folder, and
stopped by killing its process group: clients then get "connection refused", as in a real outage.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.execution_helpers import (
    child_runs,
    install_empty_mlflow_db,
    spawn,
    statuses_by_key,
    stop_group,
    wait_for,
    workbench_cmd,
    write_study,
)
from tests.postgres import _free_port
from workbench.study import expand, load_study

pytestmark = pytest.mark.slow

# How long the server stays down once the run has met the outage; its restart adds the server's
# start-up time (~12 s quiet, more on a loaded machine), so the run waits about 40 s, the issue's
# case. Any length below tracking.outage_deadline_s takes the same path (each failed call waits
# its backoff and tries again until one succeeds): a longer one only logs more retry lines.
OUTAGE_S = float(os.environ.get("WORKBENCH_TEST_OUTAGE_S", "25"))


class Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.backend = install_empty_mlflow_db(root)
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = (self.root / "server.log").open("a")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                self.backend,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            cwd=self.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def healthy() -> bool:
            try:
                return urllib.request.urlopen(f"{self.uri}/health", timeout=2).status == 200
            except OSError:
                return False

        wait_for(healthy, 180, interval=0.5, what="mlflow server ready")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the whole group: no orphaned workers
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture
def server(workdir):
    srv = Server(workdir)
    srv.start()
    yield srv
    srv.stop()


REPO = Path(__file__).resolve().parents[1]


def set_in_base(path: Path, section: str, values: dict) -> Path:
    data = yaml.safe_load(path.read_text())
    data["base"][section] = data["base"].get(section, {}) | values
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def outage_study(workdir: Path, name: str, *, steps: int, deadline_s: float, checkpoint_every: int | None = None):
    path = write_study(workdir / "study.yaml", name, steps=steps, seeds=[0])
    set_in_base(path, "tracking", {"outage_deadline_s": deadline_s})
    if checkpoint_every:
        set_in_base(path, "learner", {"checkpoint_every": checkpoint_every})
    return path


def cli(workdir: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        workbench_cmd(*args),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ
        | {"PYTHONPATH": os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH")] if p)}
        | (env or {}),
    )


def logged_steps(client: MlflowClient, run_id: str, key: str = "reward/mean") -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def first_flush_seen(client: MlflowClient, study: str):
    def seen():
        runs = [r for r in child_runs(client, study) if r.info.status == "RUNNING"]
        return runs and client.get_metric_history(runs[0].info.run_id, "reward/mean") and runs[0]

    return seen


def stop_server_mid_command(server: Server, args: list, workdir: Path, log_name: str, ready, env: dict):
    """Start ``workbench ARGS``, stop the server once ``ready()`` is truthy (something was sent),
    and wait for the command to end. Returns (what ready() returned, exit code, seconds from the
    stop to the exit, the command's log)."""
    proc = spawn(workbench_cmd(*args), workdir, workdir / log_name, env=env)
    try:
        seen = wait_for(ready, 300, interval=0.5, what="the first metrics sent")
        server.stop()
        stopped = time.monotonic()
        code = proc.wait(timeout=300)
        took = time.monotonic() - stopped
    finally:
        stop_group(proc)
    return seen, code, took, (workdir / log_name).read_text()


def test_a_server_outage_shorter_than_the_deadline_loses_nothing(workdir, server):
    path = outage_study(workdir, "outage-short", steps=40, deadline_s=300)
    client = MlflowClient(server.uri)
    env = {"MLFLOW_TRACKING_URI": server.uri}
    proc = spawn(workbench_cmd("run", path, "--quiet"), workdir, workdir / "run.log", env=env)
    try:
        run = wait_for(first_flush_seen(client, "outage-short"), 300, interval=0.5, what="the first 10 steps sent")
        server.stop()
        stopped = time.monotonic()
        # metrics go out every 10 steps: wait until the run has met the outage, then keep it down
        wait_for(lambda: "MLflow unreachable" in (workdir / "run.log").read_text(), 300, what="a retry line")
        met = time.monotonic()
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, (workdir / "run.log").read_text()  # still waiting for MLflow, not crashed
        server.start()
        print(
            f"short outage: the server was down {time.monotonic() - stopped:.1f} s, "
            f"{time.monotonic() - met:.1f} s of it with the run waiting"
        )
        assert proc.wait(timeout=600) == 0, (workdir / "run.log").read_text()
    finally:
        stop_group(proc)
    log = (workdir / "run.log").read_text()
    assert f"MLflow unreachable at {server.uri}, retrying in" in log
    assert "Traceback" not in log
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED"
    # every step's metrics present exactly once (steps 0..39 train; step 40 is the final eval)
    assert logged_steps(client, run.info.run_id) == list(range(40))
    assert logged_steps(client, run.info.run_id, "eval/accuracy") == [0, 40]


def test_a_permanent_outage_fails_the_run_within_the_deadline_and_resume_resends_the_spill(workdir, server):
    deadline = 20.0
    # checkpoints every 7 steps, metrics flushed every 10: a checkpoint (which uploads the rollout log)
    # never directly follows a flush, so whichever call meets the outage first, unsent metric points
    # are held (with checkpoint_every=5 the upload after step 9's flush could fail with none held)
    path = outage_study(workdir, "outage-long", steps=40, deadline_s=deadline, checkpoint_every=7)
    (key,) = [s.run_key for s in expand(load_study(path))]
    client = MlflowClient(server.uri)
    env = {"MLFLOW_TRACKING_URI": server.uri}
    run, code, took, log = stop_server_mid_command(
        server, ["run", path, "--quiet"], workdir, "run.log", first_flush_seen(client, "outage-long"), env
    )
    print(f"permanent outage: the study exited {took:.1f} s after the server stopped (deadline {deadline:g} s)")
    assert code == 1, log
    # the deadline counts from the first failed call: add training up to the next flush (<= 10 micro
    # steps, a few seconds) and one refused try for each close (MLflow's one bounded HTTP retry,
    # <= ~2 s each); 30 s covers those on a loaded 2-core machine
    assert took < deadline + 30, (took, log)
    assert "MLflow unreachable at" in log and "Traceback" not in log, log
    spills = list((workdir / ".workbench" / "checkpoints" / "unsent").glob(f"{key}.*.jsonl"))
    assert [p.name for p in spills] == [f"{key}.{run.info.run_id}.jsonl"], log
    spilled = [json.loads(line) for line in spills[0].read_text().splitlines()]
    assert {r["kind"] for r in spilled} == {"metric", "end"} and spilled[-1]["status"] == "FAILED"

    server.start()
    assert client.get_run(run.info.run_id).info.status == "RUNNING"  # MLflow never heard the end
    sent_before = logged_steps(client, run.info.run_id)
    spilled_steps = sorted({r["step"] for r in spilled if r["kind"] == "metric" and r["key"] == "reward/mean"})
    assert spilled_steps and not set(spilled_steps) & set(sent_before)

    again = cli(workdir, "run", path, "--quiet", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not spills[0].exists()
    old = client.get_run(run.info.run_id)
    assert old.info.status == "FAILED" and "TrackingOutage" in old.data.tags["workbench.error"]
    steps = logged_steps(client, run.info.run_id)
    assert steps == list(range(max(steps) + 1)) and max(steps) == max(spilled_steps)  # whole, each step once
    assert {k: sorted(v) for k, v in statuses_by_key(child_runs(client, "outage-long")).items()} == {
        key: ["FAILED", "FINISHED"]
    }
    (new,) = [r for r in child_runs(client, "outage-long") if r.info.status == "FINISHED"]
    assert logged_steps(client, new.info.run_id) == list(range(40))  # resumed from a checkpoint, replayed whole


def test_two_concurrent_runs_of_one_study_execute_each_run_once(workdir):
    path = write_study(workdir / "study.yaml", "twice", steps=3, seeds=[0, 1])
    keys = sorted(s.run_key for s in expand(load_study(path)))
    procs = [spawn(workbench_cmd("run", path, "--quiet"), workdir, workdir / f"run{i}.log") for i in range(2)]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            stop_group(p)
    logs = [(workdir / f"run{i}.log").read_text() for i in range(2)]
    assert sorted(codes) == [0, 2], logs
    refused = [
        line for line in logs[codes.index(2)].strip().splitlines() if not line.startswith("warning:")
    ]  # config lint lines (none for this study) are not the error
    assert len(refused) == 1 and "is being executed by workbench run on host" in refused[0], refused
    assert f"pid {procs[codes.index(0)].pid}" in refused[0]
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    assert statuses_by_key(child_runs(client, "twice")) == {k: ["FINISHED"] for k in keys}

    again = cli(workdir, "run", path, "--quiet")
    assert again.returncode == 0 and again.stdout.count("SKIPPED") == 2, again.stdout + again.stderr


def test_tracking_experiment_holds_the_parent_and_the_resume_lookup_and_plan(workdir):
    path = set_in_base(
        write_study(workdir / "study.yaml", "named-study", steps=1, seeds=[0]), "tracking", {"experiment": "custom-exp"}
    )
    first = cli(workdir, "run", path, "--quiet")
    assert first.returncode == 0, first.stdout + first.stderr
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    assert client.get_experiment_by_name("named-study") is None  # nothing went to the study's name
    exp = client.get_experiment_by_name("custom-exp")
    roles = sorted(r.data.tags["workbench.role"] for r in client.search_runs([exp.experiment_id]))
    assert roles == ["run", "study"]
    plan = json.loads(cli(workdir, "plan", path, "--format", "json").stdout)
    assert [r["status"] for r in plan["runs"]] == ["FINISHED"]
    again = cli(workdir, "run", path, "--quiet")
    assert again.returncode == 0 and "SKIPPED" in again.stdout, again.stdout + again.stderr
    assert len(client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")) == 1


def test_a_worker_stops_at_the_first_run_it_lost_mlflow_for_and_a_later_worker_resumes(workdir, server):
    """`workbench worker` under a permanent outage: the run it is executing fails at the outage
    deadline and the worker stops there, with one clear line, instead of taking the next run and
    waiting out the deadline again for each one. Once MLflow is back, a new worker finishes the study."""
    deadline = 15.0
    path = outage_study(workdir, "outage-worker", steps=40, deadline_s=deadline)
    data = yaml.safe_load(path.read_text())
    data["seeds"] = [0, 1]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    keys = sorted(s.run_key for s in expand(load_study(path)))
    client = MlflowClient(server.uri)
    env = {"MLFLOW_TRACKING_URI": server.uri}
    storage = f"sqlite:///{workdir / 'optuna.db'}"
    _, code, took, log = stop_server_mid_command(
        server,
        ["worker", path, "--storage", storage, "--heartbeat", "2"],
        workdir,
        "worker.log",
        first_flush_seen(client, "outage-worker"),
        env,
    )
    print(f"worker under a permanent outage: exited {took:.1f} s after the server stopped (deadline {deadline:g} s)")
    assert code == 1, log
    # one deadline, plus training to the next flush and a bounded try per close: 17 s quiet, 37 s
    # with a study on both cores. That no second run started is asserted by the lines below.
    assert took < deadline + 45, (took, log)
    assert "runs finished; this worker" in log and re.search(r"this worker \(\S+\) ran 1\b", log), log
    assert "worker stopped: MLflow unreachable" in log and "Traceback" not in log, log
    assert "internal error" not in log, log

    server.start()
    again = cli(workdir, "worker", path, "--storage", storage, "--heartbeat", "2", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    finished = {k: v for k, v in statuses_by_key(child_runs(client, "outage-worker")).items()}
    assert sorted(finished) == keys and all("FINISHED" in v for v in finished.values()), finished
    assert sum(v.count("FINISHED") for v in finished.values()) == 2  # each run finished exactly once


def test_a_search_stops_at_the_first_trial_that_lost_mlflow_and_retries_its_values_next_time(workdir, server):
    """`workbench tune` under a permanent outage: the trial running fails at the deadline and the
    worker stops, with its values enqueued again, rather than failing trial after trial (each one
    waiting out the deadline) until its failure limit. The next `tune` runs those values first."""
    from tests.search.helpers import load_spec, optuna_trials, search_run_config, write_search_study
    from workbench.search.objective import RETRY_OF

    deadline = 15.0
    base = search_run_config(steps=40, eval_every=10, tracking={"outage_deadline_s": deadline})
    search = {
        "metric": "reward/mean",
        "params": {"learner.lr": {"low": 1.0e-3, "high": 3.0e-2, "log": True}},
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "n_trials": 2,
        "seeds": [0],
    }
    path = write_search_study(workdir / "study.yaml", "outage-tune", search, base=base)
    journal = workdir / "journal.log"
    client = MlflowClient(server.uri)
    env = {"MLFLOW_TRACKING_URI": server.uri}

    def first_flush():
        exp = client.get_experiment_by_name("outage-tune")
        runs = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'trial'") if exp else []
        return runs and client.get_metric_history(runs[0].info.run_id, "reward/mean")

    _, code, took, log = stop_server_mid_command(
        server, ["tune", path, "--storage", journal], workdir, "tune.log", first_flush, env
    )
    print(f"search under a permanent outage: exited {took:.1f} s after the server stopped (deadline {deadline:g} s)")
    assert code == 1, log
    assert took < deadline + 45, (took, log)  # 25 s quiet; no next trial: the states below
    assert "stopping: MLflow unreachable" in log and "Traceback" not in log, log
    trials = optuna_trials(load_spec(path), str(journal))
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"], log
    assert trials[1].user_attrs[RETRY_OF] == 0  # the same values, run first next time

    server.start()
    again = cli(workdir, "tune", path, "--storage", journal, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna_trials(load_spec(path), str(journal))
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[1].params == trials[0].params
