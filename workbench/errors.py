"""How the workbench reports bad input: one definition of each piece, shared by every checker.

A study, a search space, a dashboard spec, a health config, a preset, a unit's parameters and a
registry lookup all reject input the same way:

* :class:`Issue`: one problem, printed as one line ``FILE:LINE dotted.path: what is wrong``;
  :class:`IssueError` carries all of them (deduplicated, in reading order);
* :func:`show_value`: a value as the user wrote it (YAML-ish: ``null``, ``true``), shortened;
* "did you mean": one definition of "close" (difflib's ratio ≥ 0.6, the nearest one) and one
  wording (:func:`did_you_mean`, :func:`suggest_or_list`, :func:`suggest_and_list`);
* :func:`explain_pydantic_error` / :func:`pydantic_issues`: a pydantic ``ValidationError`` as
  teaching messages (``expected a number, got 'abc'``, ``must be > 0, got -1``, an unknown key
  with its did-you-mean), for any root model.

This module imports nothing from the workbench, so every checker can use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

DEBUG_ENV = "WORKBENCH_DEBUG"  # `workbench --debug`; inherited by the processes a study starts


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


class _DebugLogHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record comes (a test runner swaps it per command)."""

    workbench_debug = True  # how a later command finds it

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def show_debug_logs() -> None:
    """With --debug, the workbench's own log records go to stderr at DEBUG and above: among them the
    tracebacks kept off the terminal otherwise (MLflow's SQL store errors, tracking/writer.py). Records
    pass the redaction's record factory first (tracking/redact.py). Called by every command: without
    --debug it removes the handler an earlier in-process command (a test's, a notebook's) installed."""
    logger = logging.getLogger("workbench")
    installed = [handler for handler in logger.handlers if isinstance(handler, _DebugLogHandler)]
    if debug_enabled() and not installed:
        handler = _DebugLogHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    elif not debug_enabled() and installed:
        for handler in installed:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


__all__ = [
    "CLOSE_RATIO",
    "AnalysisError",
    "Issue",
    "IssueError",
    "ModelDirectoryError",
    "UserFileError",
    "closest_match",
    "did_you_mean",
    "explain_pydantic_error",
    "format_path",
    "one_line",
    "pydantic_issues",
    "show_value",
    "suggest_and_list",
    "suggest_or_list",
    "suggestion_hint",
    "unknown_message",
]

# --------------------------------------------------------------------------------------------
# The issue type
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Issue:
    """One problem: where (file, line, column, dotted path) and what."""

    message: str
    path: str = ""  # dotted path, e.g. "variants.dapo.algorithm.clip_hi"
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based; only for YAML syntax errors

    def __str__(self) -> str:
        where = self.file or ""
        if where and self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.path:
            head = f"{where} {self.path}" if where else self.path
        else:
            head = where
        return f"{head}: {self.message}" if head else self.message


class IssueError(ValueError):
    """Input that cannot be used. ``str(err)`` has one line per problem; ``err.issues`` the parts.

    The same line shows once (a base-config error is not repeated once per run), and the lines
    are in reading order: by file (first mentioned first), then by line.
    """

    def __init__(self, issues: Iterable[Issue | str]) -> None:
        seen: set[str] = set()
        unique: list[Issue] = []
        for issue in issues:
            issue = issue if isinstance(issue, Issue) else Issue(str(issue))
            if str(issue) not in seen:
                seen.add(str(issue))
                unique.append(issue)
        files: dict[str | None, int] = {}
        for issue in unique:
            files.setdefault(issue.file, len(files))
        self.issues: list[Issue] = sorted(
            unique, key=lambda i: (files[i.file], i.line if i.line is not None else float("inf"))
        )
        super().__init__("\n".join(str(i) for i in self.issues))

    @property
    def lines(self) -> list[str]:
        return [str(i) for i in self.issues]


class AnalysisError(ValueError):
    """An analysis that cannot be done on what it was given (an unknown study, metric or baseline, a bad
    ``compare:`` setting, a store that cannot be read): one line, which ``workbench`` prints as ``error: ...``
    with exit code 2 and the notebook API raises as it is (workbench/analysis/)."""


class ModelDirectoryError(ValueError):
    """A local model directory the workbench will not load as it is (it asks to run its own code, or its
    tokenizer cannot be loaded as itself): one line naming the file."""


class UserFileError(ValueError):
    """A user's file that is not read (not a regular file, outside its directory, too large, an alias bomb,
    nested too deeply, not JSON/YAML): one line naming the file (workbench/safe_io.py)."""


class QueryError(ValueError):
    """A query of a study's stored results (``workbench rollouts``: :mod:`workbench.analysis.rollouts`) that
    cannot be answered: an unknown variant, a step range with no stored step, ... ``field`` names the query's
    parameter (``variant``, ``seed``, ``steps``, ...); ``str(err)`` is one line saying what is wrong and what
    exists."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def format_path(path: Iterable[Any]) -> str:
    """A path as written in messages: ``("variants", "dapo", "shaping", 0)`` -> ``variants.dapo.shaping[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------

SHOW_LIMIT = 60  # characters: a value in a one-line message, not a dump of it


def show_value(value: Any, limit: int = SHOW_LIMIT) -> str:
    """A value as the user wrote it (YAML-ish: ``null``, ``true``, ``'text'``), shortened to ``limit``."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (str, int, float)):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, default=str, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str | None) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(text or "").split())


# --------------------------------------------------------------------------------------------
# Did you mean
# --------------------------------------------------------------------------------------------

CLOSE_RATIO = 0.6  # difflib's default: below it a suggestion is more often wrong than helpful


def closest_match(word: Any, choices: Iterable[str]) -> str | None:
    """The choice nearest to ``word``, or ``None`` when none is close enough."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=CLOSE_RATIO)
    return close[0] if close else None


def suggestion_hint(suggestion: str | None) -> str:
    """``; did you mean 'x'?`` (to append to a message), or ``""`` without a suggestion."""
    return f"; did you mean {suggestion!r}?" if suggestion else ""


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """The hint for the choice nearest to ``word``: ``; did you mean 'x'?``, or ``""``."""
    return suggestion_hint(closest_match(word, choices))


def suggest_or_list(word: Any, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` when a choice is close, else `` (valid: a, b)``; ``""`` without choices.

    For long lists (every field of a section): the list is shown only when no hint is."""
    choices = list(choices)
    hint = did_you_mean(word, choices)
    if hint or not choices:
        return hint
    return f" (valid: {', '.join(choices)})"


def suggest_and_list(word: Any, choices: Iterable[str], *, none: str = "none") -> str:
    """``; did you mean 'x'? (valid: a, b)``: the hint (if any) and always the choices (``none`` if empty).

    For short lists (presets, a registry's names, a unit's parameters)."""
    choices = list(choices)
    return f"{did_you_mean(word, choices)} (valid: {', '.join(choices) or none})"


def unknown_message(word: Any, choices: Iterable[str], what: str = "field") -> str:
    """``unknown field; did you mean 'x'?`` or ``unknown field (valid: a, b)`` (choices sorted)."""
    return f"unknown {what}{suggest_or_list(word, sorted(choices))}"


# --------------------------------------------------------------------------------------------
# pydantic errors -> teaching messages
# --------------------------------------------------------------------------------------------

_EXPECTED = {  # pydantic error type -> what the value should have been
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing_size": "an integer",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
    "iterable_type": "a list",
    "set_type": "a list",
}
_BOUNDS = {  # pydantic error type -> (its ctx key, the operator to print)
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def explain_pydantic_error(
    err: dict[str, Any], valid_fields: Iterable[str] | None = None, hints: dict[str, str] | None = None
) -> str:
    """One entry of ``ValidationError.errors()`` as a message (without its location).

    ``valid_fields``: the fields of the mapping that holds the error, for the did-you-mean of an
    unknown key; ``hints``: top-level field -> what it is, added to "missing required field".
    """
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    loc = err["loc"]
    if kind == "extra_forbidden":
        return unknown_message(loc[-1] if loc else "?", valid_fields or [])
    if kind == "missing":
        hint = (hints or {}).get(str(loc[-1])) if len(loc) == 1 else None
        return "missing required field" + (f" ({hint})" if hint else "")
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {show_value(value)}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}, got {show_value(value)}"
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound}, got {show_value(value)}"
    if kind in ("value_error", "assertion_error"):
        return one_line(str(ctx.get("error") or err["msg"]))
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    msg = one_line(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]}, got {show_value(value)}"


_UNKNOWN_NAME = re.compile(r"^unknown [\w /-]+? '([^']*)'")


def _refine_loc(err: dict[str, Any]) -> tuple[Any, ...]:
    """Point an ``unknown X 'name'`` error raised by a section's validator at the key holding it."""
    loc = tuple(err["loc"])
    if err["type"] != "value_error":
        return loc
    found = _UNKNOWN_NAME.match(str((err.get("ctx") or {}).get("error") or ""))
    value = err.get("input")
    if not found or not isinstance(value, dict):
        return loc
    name = found.group(1)
    hits: list[tuple[Any, ...]] = []

    def search(tree: Any, path: tuple[Any, ...]) -> None:
        if isinstance(tree, dict):
            for key, sub in tree.items():
                if key == name or (isinstance(sub, str) and sub == name):
                    hits.append(path + (key,))
                search(sub, path + (key,))

    search(value, ())
    return loc + hits[0] if len(hits) == 1 else loc


def pydantic_issues(
    error: ValidationError,
    fields_at: Callable[[tuple[Any, ...]], Iterable[str] | None] = lambda loc: None,
    hints: dict[str, str] | None = None,
) -> list[tuple[tuple[Any, ...], str]]:
    """Every error of ``error`` as (location, message), for any root model.

    ``fields_at(loc)``: the valid keys of the mapping at ``loc`` of the root model (``None`` if
    unknown), for the did-you-mean of an unknown key. A validator's ``unknown X 'name'`` error
    is pointed at the key that holds the name.
    """
    out = []
    for err in error.errors():
        loc = _refine_loc(err)
        if loc and loc[-1] == "[key]":  # a mapping key of the wrong type
            out.append((loc[:-2] if len(loc) > 1 else (), f"keys must be strings, got {show_value(loc[-2])}"))
            continue
        out.append((loc, explain_pydantic_error(err, fields_at(loc[:-1]), hints)))
    return out
