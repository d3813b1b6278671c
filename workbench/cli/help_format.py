"""``--help`` for people: plain paragraphs that wrap at any width, words for metavars and ranges.

Typer's rich help draws options in a fixed-width table: at 80 columns it cuts option names
and defaults ("--include-unfinis…"), breaks sentences where the source had a newline and
shows Python types as metavars (``<list[str]>``, ``<int range> [x>=1]``). Plain click help
rewraps each paragraph to the terminal and never cuts. :class:`HelpGroup` switches every
command to it as the command is looked up, so commands registered by other modules (and
sub-apps such as ``algorithms``) get the same help without each declaring it:

* a value metavar from the value's type: ``N`` (integer), ``NUMBER``, ``TEXT``, ``PATH``,
  ``a|b`` (choices); an argument is its name in capitals (``STUDY``, ``[FILES]...``);
* a range in words inside the help's brackets: ``[at least 1]``, ``[1 to 65535]``;
* each command's line in its group's list is its first sentence, wrapped, not cut.

An option that declares ``metavar=`` keeps it.
"""

from __future__ import annotations

import re
from typing import Any

from workbench.cli.errors import GuardedGroup

__all__ = ["HelpGroup", "first_sentence", "humanize", "range_words", "value_metavar"]

_TYPE_WORDS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "bool": "BOOL"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def range_words(low: float | None, high: float | None) -> str | None:
    """``[at least 1]`` rather than ``[x>=1]``."""
    if low is None and high is None:
        return None
    if low is None:
        return f"at most {high}"
    if high is None:
        return f"at least {low}"
    return f"{low} to {high}"


def value_metavar(param: Any, ctx: Any) -> str | None:
    """A word for what the option takes, from typer's type label (``<int range>`` -> ``N``)."""
    label = param.display_type(ctx) if hasattr(param, "display_type") else param.make_metavar(ctx)
    label = label.strip("<>").removesuffix(" range")
    if label.startswith("list[") and label.endswith("]"):  # a repeatable option: one value per use
        label = label[5:-1]
    if "|" in label:  # choices are already words
        return label
    return _TYPE_WORDS.get(label, label.upper())


def first_sentence(text: str) -> str:
    """A command's line in its group's command list: the first sentence of its first paragraph."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, maxsplit=1)[0]


def humanize(command: Any, ctx: Any) -> Any:
    """Plain help, worded metavars and ranges on ``command`` (and, for a group, its subcommands).
    Idempotent: looking a command up twice changes nothing more. Duck-typed: typer 0.29 builds
    its commands from its own copy of click (``typer._click``), not from ``click``."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None  # typer: plain click help (wraps, never cuts)
    if command.help and not command.short_help:
        command.short_help = first_sentence(command.help)
    for param in command.params:
        if param.param_type_name == "argument":
            if param.metavar is None and param.name:
                param.metavar = param.name.upper()
            # the name says it: no "<path>" after it; usage "STUDY", not typer's "{STUDY}"
            param.display_type_rich = lambda ctx: None
            if param.required:
                param._usage_display_name = lambda p=param: p.metavar + ("..." if p.nargs != 1 else "")
            continue
        if param.param_type_name != "option" or param.is_flag or param.count:
            continue
        if param.metavar is None:
            param.metavar = value_metavar(param, ctx)
        low, high = getattr(param, "min", None), getattr(param, "max", None)
        if low is not None or high is not None:  # typer's "x>=1", as words (an instance attribute wins)
            param._get_number_range_help_str = lambda low=low, high=high: range_words(low, high)
    for sub in getattr(command, "commands", {}).values():
        humanize(sub, ctx)
    return command


class HelpGroup(GuardedGroup):
    """The root ``workbench`` group: every subcommand it hands out has human help (see module doc)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        return humanize(command, ctx) if command is not None else None
