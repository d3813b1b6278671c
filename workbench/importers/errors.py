"""The one error an import raises for bad input: its message is the one line the CLI prints."""

from __future__ import annotations


class ImportSourceError(ValueError):
    """Bad input to ``workbench import`` (unknown framework, missing experiment, a file that is
    not a metric log, a ``--variant-by`` key no run has, ...). Raised before anything is written."""
