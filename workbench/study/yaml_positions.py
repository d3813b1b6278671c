"""Study YAML with line numbers: a bounded read, a YAML 1.2-like parse, the line of every path.

The dialect is YAML 1.2-like where YAML 1.1 surprises: only ``true``/``false`` are booleans
(``preset: off`` is the string ``"off"``) and ``1e-4`` is a float, as ``1.0e-4`` is. Duplicate
keys in a mapping are an error. A file is read only if it is a regular file under
``MAX_STUDY_BYTES``, and its aliases are budgeted (``MAX_ALIASES``, ``MAX_EXPANDED_NODES``), so a
device, a huge file or a billion-laughs document is refused instead of exhausting memory.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import format_path, one_line
from workbench.study.report import Loc, Path_, StudyError, StudyIssue

__all__ = [
    "MAX_ALIASES",
    "MAX_EXPANDED_NODES",
    "MAX_STUDY_BYTES",
    "parse_value",
    "parse_yaml",
    "read_bounded_text",
    "yaml_issue",
]

MAX_STUDY_BYTES = 1 << 20  # 1 MiB: the largest study here is a few KiB; /dev/zero would be read forever
MAX_ALIASES = 200  # `*anchor` references per file: anchors share settings; a bomb needs thousands
MAX_EXPANDED_NODES = 200_000  # YAML nodes once every alias is expanded (what later passes walk)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (``true``/``false`` only) and exponent floats (``1e-4``),
    and a budget on aliases: each ``*anchor`` is counted while composing (a billion-laughs file
    is a few hundred bytes of aliases whose expansion exhausts memory)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.aliases_seen = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise _BudgetExceeded(f"more than {MAX_ALIASES} YAML aliases (*anchor references); "
                                      "write the values out or use include:", mark.line + 1)
        return super().compose_node(parent, index)


class _BudgetExceeded(Exception):
    """A YAML document over the alias/expansion budget (message, 1-based line)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose alias expansion exceeds ``MAX_EXPANDED_NODES`` or is recursive.

    Counted on the shared graph, once per distinct node (memoised), so the check itself stays
    linear in the file size however large the expansion would be."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _BudgetExceeded("recursive YAML alias (a node that contains itself)", node.start_mark.line + 1)
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        active.discard(key)
        if total > MAX_EXPANDED_NODES:
            raise _BudgetExceeded(f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} values; "
                                  "a study needs far fewer", node.start_mark.line + 1)
        sizes[key] = total
        return total

    size(root)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _index_node(
    loader: _Loader,
    node: yaml.Node,
    path: Path_,
    locs: dict[Path_, Loc],
    dups: list[StudyIssue],
    file: str | None,
    stack: frozenset[int] = frozenset(),
    inherited: bool = False,
) -> None:
    """Record the line of every mapping key and list item under ``node`` (and duplicate keys)."""
    if id(node) in stack:  # a recursive alias
        return
    stack = stack | {id(node)}
    if isinstance(node, yaml.MappingNode):
        first_line: dict[Any, int] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                continue  # construction reports unhashable keys
            key = loader.construct_object(knode, deep=True)
            line = knode.start_mark.line + 1
            try:
                hash(key)
            except TypeError:
                continue
            if key in first_line and not inherited:
                dups.append(
                    StudyIssue(
                        f"duplicate key {key!r} (first written at line {first_line[key]}); "
                        "a mapping's keys must be unique",
                        format_path(path + (key,)),
                        file,
                        line,
                    )
                )
            first_line.setdefault(key, line)
            if inherited:
                locs.setdefault(path + (key,), Loc(file, line))
            else:
                locs[path + (key,)] = Loc(file, line)
            _index_node(loader, vnode, path + (key,), locs, dups, file, stack, inherited)
        for merged in merges:  # `<<: *anchor` keys: explicit keys win
            sources = merged.value if isinstance(merged, yaml.SequenceNode) else [merged]
            for src in sources:
                _index_node(loader, src, path, locs, dups, file, stack, inherited=True)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if inherited:
                locs.setdefault(path + (i,), Loc(file, item.start_mark.line + 1))
            else:
                locs[path + (i,)] = Loc(file, item.start_mark.line + 1)
            _index_node(loader, item, path + (i,), locs, dups, file, stack, inherited)


def yaml_issue(err: yaml.YAMLError, file: str | None, what: str = "invalid YAML") -> StudyIssue:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    text = one_line(problem)
    if context:
        text = f"{text} ({one_line(context)})"
    if mark is not None:
        return StudyIssue(f"{what}: {text}", "", file, mark.line + 1, mark.column + 1)
    return StudyIssue(f"{what}: {text}", "", file)


def parse_yaml(text: str, file: str | None) -> tuple[Any, dict[Path_, Loc], list[StudyIssue]]:
    """(data, path -> line, duplicate-key issues); ``StudyError`` on a syntax error."""
    loader = _Loader(text)
    locs: dict[Path_, Loc] = {}
    dups: list[StudyIssue] = []
    try:
        node = loader.get_single_node()
        if node is None:
            return None, locs, dups
        _check_expansion(node)  # before anything walks the expansion (the indexer, construction, merging)
        locs[()] = Loc(file, node.start_mark.line + 1)
        _index_node(loader, node, (), locs, dups, file)
        data = loader.construct_document(node)
    except yaml.YAMLError as err:
        raise StudyError([yaml_issue(err, file)]) from None
    except _BudgetExceeded as err:
        raise StudyError([StudyIssue(str(err), "", file, err.line)]) from None
    except RecursionError:  # nesting deeper than Python's stack (e.g. 10,000 '[')
        raise StudyError([StudyIssue("YAML nested too deeply", "", file)]) from None
    finally:
        loader.dispose()
    return data, locs, dups


def parse_value(text: str) -> Any:
    """A YAML scalar/flow value as in a study file (``3e-4`` -> float, ``[1, 2]`` -> list)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _BudgetExceeded as err:
        raise yaml.YAMLError(str(err)) from None
    finally:
        loader.dispose()


def read_bounded_text(path: Path, what: str = "file", limit: int = MAX_STUDY_BYTES) -> str:
    """A regular file's UTF-8 text, refusing devices, FIFOs and anything over ``limit`` bytes.

    Errors are ``OSError``/``ValueError`` whose message never quotes the file's content."""

    info = path.stat()  # follows symlinks: a link to a regular file is fine
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(f"is a directory, not a {what}")
    if not stat.S_ISREG(info.st_mode):  # /dev/zero, /dev/urandom, a FIFO: reading would never end
        raise ValueError(f"not a regular file (a device, pipe or socket), not a {what}")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)  # never more than the budget, even if the file grows meanwhile
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 1024} KiB: too large for a {what}")
    return data.decode("utf-8")
