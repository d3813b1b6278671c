"""``workbench export STUDY --to DIR``: a study's runs as a small directory to commit (docs/export.md).

Loading one back is ``workbench import workbench DIR`` (:mod:`workbench.cli.importers`). Registered on
the main app by :func:`register` (``workbench/cli/main.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.common import TrackingOpt, resolve_target
from workbench.cli.output import console, fail

__all__ = ["export", "register"]


def export(
    study: Annotated[str, typer.Argument(help="study YAML file or study name")],
    to: Annotated[
        Path,
        typer.Option(
            "--to",
            help="directory of this study's export (created if missing; "
            "its files are replaced), e.g. docs/findings/data/STUDY",
        ),
    ],
    rollouts: Annotated[
        bool,
        typer.Option(
            "--rollouts/--no-rollouts",
            help="keep the runs' stored completions (--no-rollouts leaves them out: no compare table reads "
            "them, and they are most of an export's bytes; the manifest says they were omitted)",
        ),
    ] = True,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Write a study's runs (params, tags, metric histories, per-problem tables, health) to DIR as
    compact parquet files, to commit beside the findings; `workbench import workbench DIR` loads
    them into any store (docs/export.md)."""
    from workbench.results.export import ExportError, export_study  # deferred: pyarrow

    if to.exists() and not to.is_dir():
        raise fail(f"--to {to}: not a directory")
    target = resolve_target(study, tracking_uri, allow_run=False, settings=False, cache_dir=False)
    try:
        summary = export_study(target.tracking_uri, target.study, to, reader=target.reader, rollouts=rollouts)
    except (ExportError, OSError) as e:
        raise fail(str(e)) from None
    console.print(summary.line(), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export)
