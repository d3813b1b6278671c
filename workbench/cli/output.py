"""The command line's one pair of consoles (stdout, stderr), its notes and its one-line error exit, for
``workbench.cli.main`` and the command groups it registers (which cannot import ``workbench.cli.main``:
it imports them). Only ``workbench.cli`` prints; the layers below return values and raise."""

from __future__ import annotations

import typer
from rich.console import Console

from workbench.tracking.redact import redact_text

console = Console()
err_console = Console(stderr=True)


def note(message: str) -> None:
    """One line (rich markup allowed) on stderr: what the user should know besides the result."""
    err_console.print(message, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    from rich.markup import escape

    # escape(): messages quote user text and pip extras ("rl-workbench[gpu]"), not markup
    err_console.print(f"[red]error:[/red] {escape(redact_text(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)
