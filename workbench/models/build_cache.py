"""Models built once and cached on disk under ``cache_root()``: one process builds, parallel ones wait."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "rl-workbench"))


def cached_build(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, after ``build(tmp)`` wrote it into a temporary directory renamed into place (so a
    half-built model is never seen) unless it already holds a ``config.json``. Parallel runs asking for
    the same target wait on a lock while one builds."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").exists():
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
            try:
                build(tmp)
                tmp.rename(target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target
