"""``workbench algorithms`` (the presets as a table of resolved settings) and
``workbench algorithms show NAME`` (each setting with its paper and section)."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.cli.console import is_terminal, print_table
from workbench.cli.output import fail
from workbench.errors import suggest_and_list

FormatOpt = Annotated[
    str, typer.Option(help="auto (table on a terminal, tab-separated off one) | table | plain | markdown")
]

algorithms_app = typer.Typer(
    add_completion=False,
    invoke_without_command=True,
    help="Algorithm presets: resolved settings and the paper behind each value.",
)


def _plain(format: str) -> bool:
    """Tab-separated output? ``auto``: when stdout is not a terminal."""

    if format not in ("auto", "table", "plain"):
        raise fail(f"--format: expected auto, table, plain or markdown, got {format!r}")
    return not is_terminal() if format == "auto" else format == "plain"


@algorithms_app.callback()
def algorithms(ctx: typer.Context, format: FormatOpt = "auto") -> None:
    """The presets as a table of resolved settings (``show NAME`` for one preset's citations)."""
    if ctx.invoked_subcommand is not None:
        return
    from workbench.cli.preset_docs import PRESET_HEADERS, markdown_document, preset_rows  # deferred: pydantic, torch

    if format == "markdown":
        print(markdown_document(), end="")
        return
    plain = _plain(format)
    print_table(
        PRESET_HEADERS,
        preset_rows(),
        wrap=["other settings", "source"],
        plain=plain,
        title="algorithm presets (`algorithm: {preset: NAME}`; explicit fields win)",
    )


@algorithms_app.command("show")
def show(name: Annotated[str, typer.Argument(help="preset name, e.g. dapo")], format: FormatOpt = "auto") -> None:
    """Each setting of preset NAME as a run resolves it, with the paper and section it comes from."""
    from workbench.algorithms.presets import PRESET_INFO  # deferred: torch
    from workbench.cli.preset_docs import show_rows  # deferred: pydantic, torch

    if name not in PRESET_INFO:
        raise fail(f"unknown preset {name!r}{suggest_and_list(name, sorted(PRESET_INFO))}")
    preset = PRESET_INFO[name]
    plain = _plain(format)
    title = (
        f"{name}: {preset.summary}\n{preset.paper.authors}, {preset.paper.title}, {preset.paper.url}"
        if not plain
        else None
    )
    if title:
        print(title + "\n")
    print_table(["setting", "value", "source"], show_rows(name), wrap=["source"], plain=plain)
