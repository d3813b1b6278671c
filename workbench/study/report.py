"""Where a study's problems are: the issue type, the line each YAML path was written at, the collector.

Every problem is a ``StudyError`` line ``FILE:LINE YAML.PATH: what is wrong`` (the issue type
itself is :class:`workbench.errors.Issue`, shared with every other input checker).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workbench.errors import Issue, IssueError, format_path

__all__ = ["Loc", "Origin", "Path_", "Reporter", "StudyError", "StudyIssue"]

Path_ = tuple[Any, ...]  # a YAML path: mapping keys (str) and list indices (int)

StudyIssue = Issue
"""One problem of a study: where (file, line, column, YAML path) and what."""


class StudyError(IssueError):
    """A study that cannot run. ``str(err)`` has one line per problem; ``err.issues`` the parts."""


@dataclasses.dataclass(frozen=True)
class Loc:
    file: str | None
    line: int | None


class Origin:
    """Where each YAML path of a study was written: path tuple -> (file, line)."""

    def __init__(self, locs: dict[Path_, Loc] | None = None, file: str | None = None) -> None:
        self.locs: dict[Path_, Loc] = dict(locs or {})
        self.file = file  # the top-level file

    def locate(self, path: Path_) -> Loc:
        """The line of ``path`` or, if it was not written, of its nearest written ancestor."""
        path = tuple(path)
        while True:
            if path in self.locs:
                return self.locs[path]
            if not path:
                return Loc(self.file, None)
            path = path[:-1]

    def copy(self) -> Origin:
        return Origin(self.locs, self.file)


class Reporter:
    """Collects issues, attaching file and line from an ``Origin``."""

    def __init__(self, origin: Origin | None) -> None:
        self.origin = origin or Origin()
        self.issues: list[StudyIssue] = []

    def add(self, path: Path_, message: str, *, line_path: Path_ | None = None) -> None:
        loc = self.origin.locate(path if line_path is None else line_path)
        self.issues.append(StudyIssue(message, format_path(path), loc.file, loc.line))

    def raise_if_any(self) -> None:
        if self.issues:
            raise StudyError(self.issues)
