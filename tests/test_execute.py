"""Local study execution: `workbench run --parallel N` (a process per run), crash isolation,
Ctrl-C, SIGKILL of a run's process, resume. Real runs of the micro model, a real MLflow store."""

from __future__ import annotations

import os
import signal
import time

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.execution_helpers import (
    broken_model_dir,
    child_runs,
    children,
    cmdline,
    install_empty_mlflow_db,
    spawn,
    statuses_by_key,
    stop_group,
    wait_for,
    workbench_cmd,
    write_study,
)
from workbench.cli.main import app
from workbench.execution.interrupts import noting_ctrl_c
from workbench.execution.pool import _Pool, describe_exit
from workbench.execution.run import RunOutcome
from workbench.execution.study import seed_matrix
from workbench.execution.study_progress import StudyProgress
from workbench.study import expand, load_study


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def study_parent(client, name: str):
    exp = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    return parent


# ------------------------------------------------------------------------------------------ fast
def test_study_progress_counts_steps_of_running_runs_in_the_eta():
    bar = StudyProgress("s", total=4, enabled=False)
    bar.add_done(1)  # finished in an earlier session: not part of this session's work
    assert bar.fraction() == 0 and bar.eta_seconds() is None
    bar.run_started("a", steps=10)
    bar.run_step("a", 4, {"reward/mean": 0.5})  # 5 of 10 steps done
    assert bar.fraction() == pytest.approx(0.5 / 3)
    assert bar.eta_seconds() is None  # one report: no rate yet (what came before it was start-up)
    bar.run_ended("a", "FINISHED")
    bar.run_started("b", steps=10)
    assert bar.fraction() == pytest.approx(1 / 3)
    since, frac_then = bar._anchor
    bar._anchor = (since - 30, frac_then)  # 30 s from 1/6 to 1/3 of the work done: 2/3 left take 120 s
    assert bar.eta_seconds() == pytest.approx(120, rel=0.05)
    bar.run_ended("b", "FAILED")
    assert bar.failed == 1 and bar.finished == 2


def test_eta_leaves_out_the_start_up_before_the_first_step():
    # The demo's shape: 65 s of loading, cold start and step-0 eval, then 0.62 s per RL step.
    bar = StudyProgress("s", total=1, enabled=False)
    bar.run_started("a", steps=250)
    bar.started -= 65
    bar.run_step("a", 0, {})
    since, frac_then = bar._anchor
    bar._anchor = (since - 31, frac_then)  # steps 1..50 took 31 s
    bar.run_step("a", 50, {})
    # 199 steps left at 31 s / 50 steps; counting the start-up as work would say ~374 s
    assert bar.eta_seconds() == pytest.approx(199 * 31 / 50, rel=0.02)


def test_a_ctrl_c_swallowed_inside_a_store_call_still_stops_the_pool():
    # Seen in CI: Ctrl-C landed while the pool was marking a lost run in SQLite; the store's cleanup
    # turned the KeyboardInterrupt into "database is locked", a best-effort `except Exception`
    # swallowed it, and the study exited 1 (a run failed) instead of 130 (interrupted).
    pool = _Pool.__new__(_Pool)
    pool.interrupted = False
    before = signal.getsignal(signal.SIGINT)
    with noting_ctrl_c(pool):
        try:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler's KeyboardInterrupt ends this at once
            except KeyboardInterrupt:
                raise RuntimeError("(sqlite3.OperationalError) database is locked") from None
        except Exception:  # noqa: BLE001 - what the pool's best-effort MLflow updates do
            pass
    assert pool.interrupted  # so the loop raises KeyboardInterrupt itself and the CLI exits 130
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


def test_seed_matrix_groups_runs_by_label_without_the_seed():
    def outcome(label, seed, status="FINISHED", value=float("nan")):
        return RunOutcome(label, label.split("/")[0], seed, f"k-{label}", status, eval_final=value, health="ok")

    seeds, rows = seed_matrix(
        [
            outcome("a/lr=1e-4/seed=0", 0, value=0.2),
            outcome("a/lr=1e-4/seed=1", 1, value=0.4),
            outcome("b/seed=0", 0, "FAILED"),
            outcome("b/seed=1", 1, "SKIPPED", 0.5),
        ]
    )
    assert seeds == [0, 1]
    (a, by_seed_a, mean_a), (b, by_seed_b, mean_b) = rows
    assert (a, sorted(by_seed_a), mean_a) == ("a/lr=1e-4", [0, 1], pytest.approx(0.3))
    assert (b, by_seed_b[0].status, mean_b) == ("b", "FAILED", 0.5)


def test_the_summary_of_many_seeds_stays_readable_in_an_80_column_log():
    """Off a terminal (nohup, CI) rich lays tables out in 80 columns: 12 seeds of 3 arms once printed
    every value as "0.…". Labels fold instead of being cut, and the long side (seeds) runs down the rows."""
    from workbench.cli.main import print_summary
    from workbench.cli.output import console

    arms = ("none", "pass_rate_filter", "curriculum")
    outcomes = [
        RunOutcome(
            f"{arm}/seed={seed}",
            arm,
            seed,
            f"k-{arm}-{seed}",
            "FINISHED",
            eval_first=0.21,
            eval_final=0.25 + 0.001 * seed + 0.01 * i,
            health="ok",
            steps=100,
        )
        for i, arm in enumerate(arms)
        for seed in range(12)
    ]
    with console.capture() as captured:
        print_summary("many-seeds", outcomes, "sqlite:///mlflow.db")
    text = captured.get()
    assert console.width == 80 and "…" not in text, text
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│ "))
    assert "pass_rate_filter/seed=11" in first_column  # the label whole, folded over two lines
    assert "0.281 ok" in text  # curriculum (0.27) at seed 11: a whole value in the by-seed matrix
    assert "0.276" in text  # curriculum's mean over the seeds (0.27 + 0.0055)


def test_a_dead_run_process_is_described_by_its_exit_code():
    assert "SIGKILL" in describe_exit(-signal.SIGKILL) and "out of memory" in describe_exit(-9)
    assert "exit code 3" in describe_exit(3)


# ------------------------------------------------------------------------------------------ slow
@pytest.mark.slow
def test_parallel_runs_each_once_a_crash_stays_contained_and_rerun_skips_finished(workdir):
    uri = install_empty_mlflow_db(workdir)
    broken = broken_model_dir(workdir)
    path = write_study(
        workdir / "study.yaml",
        "parallel",
        variants={
            "a": {},
            "b": {"learner": {"lr": 3.0e-4}},
            "broken": {"model": {"path": str(broken), "builtin": None}},
        },
        seeds=[0, 1],
        exclude=[{"variant": "broken", "seed": 1}],
    )
    specs = expand(load_study(path))
    assert len(specs) == 5
    broken_key = next(s.run_key for s in specs if s.variant == "broken")

    result = invoke("run", path, "--parallel", 2, "--quiet")
    assert result.exit_code == 1, result.output  # one run failed; the four others finished
    assert "by seed" in result.output  # the variant x seed summary
    client = MlflowClient(uri)
    statuses = statuses_by_key(child_runs(client, "parallel"))
    assert statuses.pop(broken_key) == ["FAILED"]
    assert sorted(statuses) == sorted(s.run_key for s in specs if s.variant != "broken")
    assert all(seen == ["FINISHED"] for seen in statuses.values())
    assert study_parent(client, "parallel").info.status == "FINISHED"
    (crashed,) = [r for r in child_runs(client, "parallel") if r.info.status == "FAILED"]
    assert "workbench.error" in crashed.data.tags  # the run's own traceback, not a lost process

    again = invoke("run", path, "--quiet")  # resume (in this process): only the failed run runs again
    assert again.exit_code == 1
    assert again.output.count("SKIPPED") == 4
    statuses = statuses_by_key(child_runs(client, "parallel"))
    assert statuses.pop(broken_key) == ["FAILED", "FAILED"]
    assert all(seen == ["FINISHED"] for seen in statuses.values())


@pytest.mark.slow
def test_sigkill_of_a_run_process_and_ctrl_c_then_resume_finishes_every_run_once(workdir):
    uri = install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "interrupted", steps=80, seeds=[0, 1])
    keys = {s.run_key for s in expand(load_study(path))}
    client = MlflowClient(uri)
    proc = spawn(workbench_cmd("run", path, "--parallel", 2, "--quiet"), workdir, workdir / "run.log")
    try:

        def in_progress():
            return [r for r in child_runs(client, "interrupted") if r.info.status == "RUNNING"]

        wait_for(lambda: len(in_progress()) == 2, 120, what="two runs in progress")
        run_procs = [pid for pid in children(proc.pid) if "spawn_main" in cmdline(pid)]
        assert len(run_procs) == 2
        os.kill(run_procs[0], signal.SIGKILL)  # a run's process dies (think: the OOM killer) ...
        wait_for(
            lambda: any(r.info.status == "FAILED" for r in child_runs(client, "interrupted")),
            60,
            what="the killed run marked FAILED",
        )
        assert len(in_progress()) == 1  # ... and the other run goes on
        os.killpg(proc.pid, signal.SIGINT)  # then Ctrl-C in the terminal: the whole process group
        assert proc.wait(timeout=120) == 130, (workdir / "run.log").read_text()
    finally:
        stop_group(proc)

    log = (workdir / "run.log").read_text()
    runs = child_runs(client, "interrupted")
    assert sorted(r.info.status for r in runs) == ["FAILED", "KILLED"], log
    (killed,) = [r for r in runs if r.info.status == "FAILED"]
    assert "SIGKILL" in killed.data.tags["workbench.error"]
    assert study_parent(client, "interrupted").info.status == "KILLED"
    assert "race condition" not in log and "Traceback" not in log, log
    (stopped,) = [r for r in runs if r.info.status == "KILLED"]
    assert "grace period" not in stopped.data.tags.get("workbench.error", ""), stopped.data.tags  # it stopped itself

    # resume (in run processes: one torch thread each, where this process's default two threads
    # make the tiny model's steps several times slower on a busy 2-core machine)
    result = invoke("run", path, "--parallel", 2, "--quiet")
    assert result.exit_code == 0, result.output
    statuses = statuses_by_key(child_runs(client, "interrupted"))
    assert set(statuses) == keys
    for seen in statuses.values():  # exactly one FINISHED run per run_key; the others are history
        assert sorted(seen) in (["FAILED", "FINISHED"], ["FINISHED", "KILLED"])
    assert study_parent(client, "interrupted").info.status == "FINISHED"


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [1, 2])
def test_sigterm_stops_run_like_ctrl_c_releases_the_lock_and_resume_finishes_every_run_once(workdir, parallel):
    """`kill PID` of `workbench run` (SIGTERM to the CLI process alone, as a scheduler or systemd sends it):
    the running run and the study's parent run end KILLED, the lock file is gone, and a second `run`
    finishes every run once. In this process (parallel 1) and in run processes (parallel 2)."""
    uri = install_empty_mlflow_db(workdir)
    name = f"terminated-{parallel}"
    path = write_study(workdir / "study.yaml", name, steps=40, seeds=[0, 1])
    keys = {s.run_key for s in expand(load_study(path))}
    client = MlflowClient(uri)
    proc = spawn(workbench_cmd("run", path, "--parallel", parallel, "--quiet"), workdir, workdir / "run.log")
    try:
        wait_for(
            lambda: any(r.info.status == "RUNNING" for r in child_runs(client, name)), 120, what="a run in progress"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, (workdir / "run.log").read_text()
    finally:
        stop_group(proc)

    log = (workdir / "run.log").read_text()
    assert "Traceback" not in log and "interrupted: unfinished runs are marked KILLED" in log, log
    assert study_parent(client, name).info.status == "KILLED"
    statuses = [r.info.status for r in child_runs(client, name)]
    assert statuses and "RUNNING" not in statuses and "KILLED" in statuses, statuses
    assert list((workdir / "locks").glob("*.lock")) == []  # the study's lock file is gone with the lock

    result = invoke("run", path, "--parallel", 2, "--quiet")  # resume
    assert result.exit_code == 0, result.output
    by_key = statuses_by_key(child_runs(client, name))
    assert set(by_key) == keys
    for seen in by_key.values():  # exactly one FINISHED run per run_key; a KILLED one is history
        assert sorted(seen) in (["FINISHED"], ["FINISHED", "KILLED"])
    assert study_parent(client, name).info.status == "FINISHED"
    assert list((workdir / "locks").glob("*.lock")) == []
