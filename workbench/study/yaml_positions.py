"""Study YAML with line numbers: a bounded read, a YAML 1.2-like parse, the line of every path.

The dialect is YAML 1.2-like where YAML 1.1 surprises: only ``true``/``false`` are booleans
(``preset: off`` is the string ``"off"``) and ``1e-4`` is a float, as ``1.0e-4`` is. Duplicate
keys in a mapping are an error. A file is read only if it is a regular file under
``MAX_STUDY_BYTES``, and its aliases are budgeted (``MAX_ALIASES``, ``MAX_EXPANDED_NODES``), so a
device, a huge file or a billion-laughs document is refused instead of exhausting memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import format_path, one_line
from workbench.safe_io import (
    MAX_ALIASES,
    MAX_EXPANDED_NODES,
    BoundedLoader,
    YamlBudgetExceeded,
    check_expansion,
    read_limited,
)
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


class _Loader(BoundedLoader):
    """The bounded loader (aliases counted, depth capped: workbench/safe_io.py) with YAML 1.2 booleans
    (``true``/``false`` only) and exponent floats (``1e-4``)."""


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
        check_expansion(node)  # before anything walks the expansion (the indexer, construction, merging)
        locs[()] = Loc(file, node.start_mark.line + 1)
        _index_node(loader, node, (), locs, dups, file)
        data = loader.construct_document(node)
    except YamlBudgetExceeded as err:
        raise StudyError([StudyIssue(str(err), "", file, err.line)]) from None
    except yaml.YAMLError as err:
        raise StudyError([yaml_issue(err, file)]) from None
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
        check_expansion(node)  # a budget exceeded is a yaml.YAMLError
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_bounded_text(path: Path, what: str = "file", limit: int = MAX_STUDY_BYTES) -> str:
    """A regular file's UTF-8 text, refusing devices, FIFOs and anything over ``limit`` bytes
    (:func:`workbench.safe_io.read_limited`). Errors are ``OSError``/``ValueError`` whose message never
    quotes the file's content."""
    return read_limited(path, limit=limit, what=what).decode("utf-8")
