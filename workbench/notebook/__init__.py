"""The notebook API: ``from workbench import load_study`` (docs/notebook.md)."""

from .study import Study, load_study

__all__ = ["Study", "load_study"]
