"""The TRL test modules run in `.venv-trl` (`make trl`); elsewhere they skip, unless CI requires TRL."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_trl(docs_page: str) -> None:
    """Skip the calling test module when TRL is not installed; with ``WORKBENCH_REQUIRE_TRL=1`` (`make test-trl`,
    CI) its absence is an error instead, so the TRL tests cannot silently not run."""
    if importlib.util.find_spec("trl") is not None:
        return
    if os.environ.get("WORKBENCH_REQUIRE_TRL") == "1":
        raise ImportError("WORKBENCH_REQUIRE_TRL=1 but TRL is not installed (`make trl` builds .venv-trl)")
    pytest.skip(f"TRL is not installed (`make trl` builds .venv-trl; see {docs_page})", allow_module_level=True)
