"""How the user started ``workbench``, so the hints we print can be pasted back as they are.

A fresh clone runs ``.venv/bin/workbench run ...`` without activating the venv: a hint
saying ``workbench ui`` then fails with "command not found". :func:`workbench_command` is
``workbench`` when that name on PATH is the program running, else the path it was started
by (``.venv/bin/workbench``), else ``python -m workbench.cli.main`` with this interpreter.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["DEFAULT_UI_BASE", "ui_base_url", "workbench_command"]


def workbench_command(argv0: str | None = None, cwd: Path | None = None) -> str:
    """The command that starts this workbench again, for hints (``<it> ui``)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    program = Path(argv0)
    if program.name != "workbench":  # python -m workbench.cli.main (or a test runner)
        python = Path(sys.executable)
        on_path = shutil.which(python.name)
        same = on_path is not None and Path(on_path).resolve() == python.resolve()
        return f"{python.name if same else _shortest(python, cwd)} -m workbench.cli.main"
    on_path = shutil.which("workbench")
    if on_path and Path(on_path).resolve() == program.resolve():
        return "workbench"
    return _shortest(program, cwd)


def _shortest(path: Path, cwd: Path | None) -> str:
    """``path`` relative to ``cwd`` (``./`` or ``../``-led) when that is shorter, else absolute."""
    absolute = Path(os.path.abspath(path))  # not resolve(): a venv's python is a symlink to the base one
    relative = os.path.relpath(absolute, cwd or Path.cwd())
    relative = relative if relative.startswith("..") else "./" + relative
    return relative if len(relative) < len(str(absolute)) else str(absolute)


DEFAULT_UI_BASE = "http://127.0.0.1:5000"  # where `workbench ui` serves a local store by default


def ui_base_url(tracking_uri: str | None) -> str:
    """The UI address a printed link starts with: the tracking server itself for an http(s) store,
    else where ``workbench ui`` serves a local store by default (links are full URLs, never a bare
    ``#/experiments/...`` fragment)."""
    from urllib.parse import urlsplit

    if tracking_uri and tracking_uri.startswith(("http://", "https://")):
        parts = urlsplit(tracking_uri)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path.rstrip('/')}"
    return DEFAULT_UI_BASE
