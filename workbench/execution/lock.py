"""One execution of a study at a time: a lease held while ``workbench run`` executes it.

The lease is an advisory ``flock`` on ``<study>.lock`` in a lock folder of the MLflow store
(:func:`lock_dir`). The kernel drops the lock when its holder exits, however it exits (a
``kill -9`` or a crash included), so a dead holder never keeps it: there is nothing to expire.
The last holder to leave removes the file (a file left by a killed holder is simply locked again).
The file records who holds it (host, pid, since) for the message a second process prints.

``workbench run`` takes it exclusively and ``workbench worker`` shared: a second ``run`` of a
running study, or a ``run`` while workers on this machine execute it (and a worker while a
``run`` does), exits with code 2 and one line naming the holder. Workers coordinate among
themselves through their Optuna storage, on any number of machines. The lock binds the
processes of one machine (one filesystem): ``workbench run`` on two machines against one
tracking server is not prevented; use ``workbench worker`` to execute a study on several
machines (docs/distributed.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.tracking.store import sqlite_file

LOCKS_ENV = "WORKBENCH_LOCK_DIR"


class StudyBusy(Exception):
    """Another process executes the study (the CLI exits 2 with this message)."""


def lock_dir(tracking_uri: str) -> Path:
    """``$WORKBENCH_LOCK_DIR``; else ``locks/`` next to a local sqlite store; else a per-store
    folder under ``~/.cache/rl-workbench/locks`` (a server or a database: this machine only)."""
    if os.environ.get(LOCKS_ENV):
        return Path(os.environ[LOCKS_ENV]).expanduser().resolve()
    if tracking_uri.startswith("sqlite:///"):
        return sqlite_file(tracking_uri).resolve().parent / "locks"
    digest = hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]  # the URI may hold a password: hashed
    return Path("~/.cache/rl-workbench/locks").expanduser() / digest


def lock_path(tracking_uri: str, experiment: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", experiment)[:80]
    digest = hashlib.sha256(experiment.encode()).hexdigest()[:8]  # distinct names stay distinct after `safe`
    return lock_dir(tracking_uri) / f"{safe}-{digest}.lock"


def _holder(path: Path, wait_s: float = 0.0) -> str:
    """Who holds the lock, from the line it wrote. A holder writes it just after taking the lock,
    so a refused process reads for up to ``wait_s`` before settling for "starting up"."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = json.loads(path.read_text())
            return f"{info['command']} on host {info['host']}, pid {info['pid']}, since {info['since']}"
        except (OSError, ValueError, KeyError):
            if time.monotonic() >= deadline:
                return "another process (starting up)"
            time.sleep(0.05)


@contextmanager
def study_lock(
    tracking_uri: str, experiment: str, *, shared: bool = False, command: str = "workbench run"
) -> Iterator[Path]:
    """Hold the study's lease for the ``with`` block, or raise :class:`StudyBusy` at once."""
    path = lock_path(tracking_uri, experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StudyBusy(
                f"study {experiment!r} is being executed by {_holder(path, wait_s=2.0)}: wait for it to end, "
                f"or stop it (lock {path})"
            ) from None
        if _is_current(fd, path):
            break
        os.close(fd)  # locked a file its last holder removed meanwhile: lock the one at the path now
    try:
        # Shared holders (workers) keep the line of whoever wrote it while holding the lock: one
        # live worker named is enough for the message; an exclusive holder always writes its own.
        if not shared or _holder(path).startswith(("workbench run", "another")):
            os.ftruncate(fd, 0)
            os.pwrite(
                fd,
                json.dumps(
                    {
                        "command": command,
                        "host": socket.gethostname(),
                        "pid": os.getpid(),
                        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    }
                ).encode(),
                0,
            )
        yield path
    finally:
        _remove_if_last(fd, path)
        os.close(fd)  # releases the lock


def _is_current(fd: int, path: Path) -> bool:
    """``fd`` is the file at ``path`` (not one a releasing holder has just removed)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_if_last(fd: int, path: Path) -> None:
    """The last holder removes the lock file (a run leaves no file behind): only when no other process holds
    it (an exclusive lock can be had at once), and only the file it holds. A process that opened the file
    before it was removed sees, once it has the lock, that it is no longer the file at the path
    (:func:`_is_current`) and locks the new one."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a worker still holds it shared: it stays
        return
    if _is_current(fd, path):
        path.unlink(missing_ok=True)
