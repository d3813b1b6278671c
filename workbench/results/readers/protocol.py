"""The one protocol every backend of the study reader implements: where runs and metric
histories come from. :class:`~workbench.results.reader.StudyReader` adds the cache and the frame
assembly on top, the same for every backend.

Backends: :class:`~.sql.SqlRunReader` (MLflow's SQL tables read directly) and
:class:`~.rest.RestRunReader` (a tracking server: ``search_runs`` and the bulk history endpoint).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import pandas as pd

__all__ = ["ROLE_TAG", "TERMINAL_STATUSES", "RunReader", "StudyNotFound"]

TERMINAL_STATUSES: frozenset[str] = frozenset({"FINISHED", "FAILED", "KILLED"})
ROLE_TAG = "workbench.role"


class StudyNotFound(LookupError):
    """No experiment (or run) of that name in the store; the message says what exists."""


@runtime_checkable
class RunReader(Protocol):
    """Runs and metric histories of one MLflow store, in plain frames (no cache, no assembly).

    Everything that reads a study (``compare``, ``report``, ``health --recheck``, dashboards,
    ``import`` checks) goes through :class:`~workbench.results.reader.StudyReader`, which holds
    one of these.
    """

    name: str
    """``"sql"`` or ``"rest"``: named in load statistics."""
    requests: int
    """Store round trips so far (SQL queries or HTTP requests)."""

    def experiment_names(self) -> list[str]:
        """Names of the active experiments (studies)."""
        ...

    def experiment_id(self, name: str) -> str | None:
        """The active experiment called ``name``, or None."""
        ...

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        """``{run_id, experiment_id, experiment, role, artifact_uri}`` of any run, or None."""
        ...

    def runs(
        self, experiment_id: str, role: str
    ) -> tuple[pd.DataFrame, dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """The experiment's active runs tagged ``workbench.role=<role>``: rows (``run_id, run_name,
        status, start_time, end_time, artifact_uri``), then tags and params by run id."""
        ...

    def metric_keys(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        """``run_id -> metric keys it logged``."""
        ...

    def history(self, run_ids: Sequence[str], keys: Iterable[str] | None, *, frozen: bool = False) -> pd.DataFrame:
        """Every point of ``keys`` (None: all) of ``run_ids``, as ``run_id, metric, step, value,
        timestamp`` in any order, in bulk (never one request per run and metric). ``frozen``: the
        runs are terminal, so a backend may read faster assuming nothing changes meanwhile."""
        ...

    def parent_run_id(self, experiment_id: str) -> str | None:
        """The study's parent run (tag ``workbench.role=study``), or None."""
        ...
