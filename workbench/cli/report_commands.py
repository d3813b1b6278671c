"""Report commands of the ``workbench`` CLI: ``health``, ``compare``, ``dashboard``.

Registered on the main Typer app by :func:`register` (``workbench/cli/main.py``). Heavy imports
(MLflow, plotly, scipy) happen inside the commands, so ``workbench --help`` stays fast.
"""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``health``, ``compare`` and ``dashboard`` to ``app``."""
    from workbench.cli.health import health  # deferred: pydantic
    from workbench.cli.report import compare, dashboard  # deferred: pydantic

    app.command("health")(health)
    app.command("compare")(compare)
    app.command("dashboard")(dashboard)
