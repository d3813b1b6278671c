"""The command line's last line of defence: an exception nobody handled becomes one line.

Input errors (a study, config or data file that cannot run) exit 2, and so does a tracking store
that cannot be used (workbench/tracking/check.py: a corrupt file, a wrong password, an unreachable
server); anything else is an internal error and exits 1. Either way the user sees one line and
``run with --debug for the traceback``; ``workbench --debug ...`` (or ``WORKBENCH_DEBUG=1``)
lets the traceback through.
"""

from __future__ import annotations

import click
import typer
from typer.core import TyperGroup

from workbench.cli.output import err_console
from workbench.errors import ModelDirectoryError, UserFileError, debug_enabled
from workbench.tracking.check import StoreError, describe_store_failure
from workbench.tracking.redact import redact_text
from workbench.tracking.writer import TrackingOutage

HINT = "run with --debug for the traceback (workbench --debug COMMAND ...)"


def is_input_error(error: BaseException) -> bool:
    """Errors that mean the user's input cannot run, not that the workbench broke."""
    import yaml
    from pydantic import ValidationError

    from workbench.execution.run import PreflightError  # deferred: pydantic, torch, transformers
    from workbench.study import StudyError  # deferred: pydantic

    return isinstance(
        error,
        (
            StudyError,
            PreflightError,
            ModelDirectoryError,
            UserFileError,
            ValidationError,
            yaml.YAMLError,
            StoreError,
            FileNotFoundError,
            IsADirectoryError,
            NotADirectoryError,
            UnicodeDecodeError,
        ),
    )


def one_line(error: BaseException, limit: int = 300) -> str:
    """The error's first line, credentials redacted, shortened."""

    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = redact_text(f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GuardedGroup(TyperGroup):
    """A typer group whose subcommands cannot end in a traceback unless ``--debug`` is on."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (
            typer.Exit,
            typer.Abort,
            click.exceptions.Exit,
            click.exceptions.Abort,
            click.ClickException,
            typer.TyperException,
            KeyboardInterrupt,
            SystemExit,
        ):
            # deliberate exits, and usage errors (unknown command or option, missing argument, bad
            # value): the framework prints its usage line and exits 2. Typer 0.29 vendors click, so
            # its UsageError derives from typer.TyperException, not from click.ClickException.
            raise
        except Exception as error:
            if debug_enabled():
                raise
            from rich.markup import escape

            store = None if isinstance(error, StoreError) else describe_store_failure(error)
            if store is not None or isinstance(error, (StoreError, TrackingOutage)):
                # the store (its path, server or credentials) is wrong or down: the user's to fix, exit 2
                text = redact_text(store or str(error).splitlines()[0])
                err_console.print(f"[red]error:[/red] {escape(text[:500])}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            code = 2 if is_input_error(error) else 1
            kind = "error" if code == 2 else "internal error"
            err_console.print(f"[red]{kind}:[/red] {escape(one_line(error))}; {HINT}", highlight=False, soft_wrap=True)
            raise typer.Exit(code) from None
