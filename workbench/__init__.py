"""rl-workbench.

The notebook API (docs/notebook.md)::

    from workbench import load_study
    study = load_study("my-study")        # frames: study.history, study.runs
    study.compare()                       # the ComparisonTable `workbench compare` prints
    study.health()                        # runs × health rules, as `workbench health` shows them

``import workbench`` stays light (numpy and pandas come only with what is used): the names below
load their module on first use (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.notebook import Study, load_study

__all__ = ["Study", "load_study"]

#: name -> the module that defines it, imported on first access
_LAZY = {"load_study": "workbench.notebook", "Study": "workbench.notebook"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)  # deferred: torch-free but heavy (scipy, mlflow)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
