"""A study's child runs in MLflow: which run_keys finished (here or in another study of the store),
and closing runs whose process died.

Shared by the in-process executor (:mod:`workbench.execution.study`), the process pool
(:mod:`workbench.execution.pool`) and ``workbench worker`` (:mod:`workbench.execution.worker`); it lives here,
below all three, so none of them imports another for it.
"""

from __future__ import annotations

import time

ORPHAN_ERROR = "its process is gone: the run was left RUNNING (killed worker or machine)"


def _child_runs(client, experiment_id: str, extra_filter: str = ""):
    query = "tags.`workbench.role` = 'run'" + (f" and {extra_filter}" if extra_filter else "")
    return client.search_runs([experiment_id], query, max_results=50000)


def run_statuses(client, experiment_id: str) -> dict[str, str]:
    """run_key -> best known status (FINISHED beats RUNNING beats FAILED/KILLED)."""
    rank = {"FINISHED": 3, "RUNNING": 2, "FAILED": 1, "KILLED": 1}
    out: dict[str, str] = {}
    for run in _child_runs(client, experiment_id):
        key = run.data.tags.get("workbench.run_key")
        if key and rank.get(run.info.status, 0) > rank.get(out.get(key, ""), 0):
            out[key] = run.info.status
    return out


def finished_runs(client, experiment_id: str) -> dict:
    """run_key -> its FINISHED MLflow run (the latest if, against the rules, there are several)."""
    out: dict = {}
    for run in _child_runs(client, experiment_id, "attributes.status = 'FINISHED'"):
        key = run.data.tags.get("workbench.run_key")
        if key and (key not in out or run.info.start_time > out[key].info.start_time):
            out[key] = run
    return out


def finished_elsewhere(client, experiment_id: str, run_keys) -> dict[str, list]:
    """run_key -> its FINISHED child runs in the store's other (active) experiments, best first: runs
    computed there before runs copied there (tag ``workbench.reused_from``), then the latest."""
    others = [e.experiment_id for e in client.search_experiments() if e.experiment_id != experiment_id]
    out: dict[str, list] = {}
    for key in run_keys if others else ():  # one query per key: MLflow's filter has no IN for tags
        query = (
            f"tags.`workbench.role` = 'run' and tags.`workbench.run_key` = '{key}' and attributes.status = 'FINISHED'"
        )
        found = client.search_runs(others, query, max_results=1000)
        if found:
            out[key] = sorted(found, key=lambda r: ("workbench.reused_from" in r.data.tags, -r.info.start_time))
    return out


LOCKED_RETRY_S = 30.0  # beyond MLflow's own 20 s SQLite busy_timeout: a Ctrl-C of `--parallel N` has N run processes
# closing their runs in one file at once, and one interrupted inside a transaction holds it until it exits


def mark_orphaned_runs(
    client, experiment_id: str, run_keys, *, reason: str = ORPHAN_ERROR, status: str = "FAILED"
) -> list[str]:
    """Close the MLflow runs of ``run_keys`` still RUNNING (their process died without closing them).
    A SQLite store locked by the study's other processes (all closing their runs after a Ctrl-C) is
    waited for up to ``LOCKED_RETRY_S``; any other error is raised at once."""
    keys = set(run_keys)
    closed: list[str] = []
    deadline = time.monotonic() + LOCKED_RETRY_S
    while True:
        try:
            for run in _child_runs(client, experiment_id, "attributes.status = 'RUNNING'"):
                if run.data.tags.get("workbench.run_key") in keys and run.info.run_id not in closed:
                    client.set_tag(run.info.run_id, "workbench.error", reason[:500])
                    client.set_terminated(run.info.run_id, status=status)
                    closed.append(run.info.run_id)
            return closed
        except Exception as error:  # only the lock is retried; the rest re-raised
            if "database is locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
