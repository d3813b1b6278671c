"""Optuna hyperparameter search on the run machinery (``workbench tune``; the study's ``search:``).

* :mod:`workbench.search.schema` — the ``search:`` schema (pydantic models).
* :mod:`workbench.search.checks` — its checks against the study and the run config.
* :mod:`workbench.search.spec` — the validated search (``parse_search`` -> ``SearchSpec``).
* :mod:`workbench.search.samplers` — Optuna samplers, pruners and distributions.
* :mod:`workbench.search.objective` — one trial = one real run per seed; pruning on learning curves
  and on health failures.
* :mod:`workbench.search.worker` — shared Optuna storage, budget, heartbeats, local worker processes.
* :mod:`workbench.search.report` — best trials, HTML report, best configuration as a study variant.

Heavy modules (Optuna, MLflow, torch) are imported lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SearchSpec", "TuneOptions", "export_best", "open_search", "parse_search", "run_search", "write_report"]

_WHERE = {
    "SearchSpec": "spec",
    "parse_search": "spec",
    "TuneOptions": "worker",
    "run_search": "worker",
    "open_search": "report",
    "write_report": "report",
    "export_best": "report",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"workbench.search.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'workbench.search' has no attribute {name!r}")
