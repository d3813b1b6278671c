"""One way to open a user's file: a regular file, bounded, parsed with budgets.

Every file the workbench reads on a user's behalf (a study, a dashboard spec, an export's manifest, an
importer's JSON, a stored ``study.yaml``/``sequential.json``/``health.json``) goes through here:

* only a regular file is opened: a FIFO (which would block ``open`` forever), a device (``/dev/zero``
  never ends) or a socket is refused; it is opened non-blocking and checked on the open descriptor, so
  a file swapped for a FIFO after a check cannot block either; symlinks are resolved and, with
  ``inside=``, must stay inside that directory;
* at most ``limit`` bytes are read (one more tells a file over the cap, even one growing meanwhile);
* YAML is composed by :class:`BoundedLoader` (safe tags only, at most :data:`MAX_ALIASES` alias
  references, :data:`MAX_DEPTH` levels of nesting, :data:`MAX_EXPANDED_NODES` nodes once aliases are
  expanded): a billion-laughs document is refused in milliseconds instead of exhausting memory;
* JSON nested deeper than Python's stack is an error, not a ``RecursionError``.

Each refusal is a :class:`workbench.errors.UserFileError`: one line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import UserFileError, one_line

MAX_FILE_BYTES = 16 << 20  # 16 MiB: specs, manifests and stored records are KiB; a log file passes its own limit
MAX_ALIASES = 200  # `*anchor` references per document: anchors share settings; a bomb needs thousands
MAX_EXPANDED_NODES = 200_000  # YAML nodes once every alias is expanded (what later passes walk)
MAX_DEPTH = 100  # nested YAML collections: a study or a spec is a few levels deep

__all__ = ["MAX_ALIASES", "MAX_DEPTH", "MAX_EXPANDED_NODES", "MAX_FILE_BYTES", "BoundedLoader",
           "YamlBudgetExceeded", "check_expansion", "load_yaml", "parse_json", "read_bytes", "read_json",
           "read_limited", "read_text", "read_yaml"]


def read_limited(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file",
                 inside: str | Path | None = None) -> bytes:
    """A regular file's bytes, at most ``limit``. Raises ``FileNotFoundError``/``IsADirectoryError``/
    ``OSError``, or ``ValueError`` (not a regular file, outside ``inside``, over ``limit``); messages never
    quote the file's content and do not name it (the caller does: :func:`read_bytes`)."""
    path = Path(path)
    real = path.resolve(strict=True)  # follows symlinks; FileNotFoundError for a dangling one
    if inside is not None and not real.is_relative_to(Path(inside).resolve()):
        raise ValueError(f"resolves to {real}, outside {Path(inside)}: refused")
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO: no wait for a writer
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(f"is a directory, not a {what}")
        if not stat.S_ISREG(info.st_mode):  # /dev/zero, /dev/urandom, a FIFO, a socket: reading would never end
            raise ValueError(f"not a regular file (a device, pipe or socket), not a {what}")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:  # never more than the budget, even if the file grows meanwhile
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"larger than {_size(limit)}: too large for a {what}")
    return b"".join(chunks)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit // 1024} KiB"


def read_bytes(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file",
               inside: str | Path | None = None) -> bytes:
    """:func:`read_limited`, every failure a :class:`UserFileError` naming the file."""
    try:
        return read_limited(path, limit=limit, what=what, inside=inside)
    except FileNotFoundError:
        raise UserFileError(f"{path}: no such {what}") from None
    except ValueError as error:
        raise UserFileError(f"{path}: {error}") from None
    except OSError as error:
        raise UserFileError(f"{path}: cannot read the {what}: {error.strerror or error}") from None


def read_text(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file",
              inside: str | Path | None = None) -> str:
    """A regular file's UTF-8 text (:func:`read_bytes`)."""
    data = read_bytes(path, limit=limit, what=what, inside=inside)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserFileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def parse_json(text: str | bytes, source: str) -> Any:
    """``json.loads``; invalid or too deeply nested JSON is a :class:`UserFileError` naming ``source``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserFileError(f"{source}: JSON nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, and bytes that are not UTF-8
        raise UserFileError(f"{source}: not valid JSON: {one_line(str(error))[:160]}") from None


def read_json(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "JSON file",
              inside: str | Path | None = None) -> Any:
    return parse_json(read_text(path, limit=limit, what=what, inside=inside), str(path))


class YamlBudgetExceeded(yaml.YAMLError):
    """A YAML document over the alias, depth or expansion budget (message, 1-based line)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with budgets counted while composing: each ``*anchor`` reference (a billion-laughs
    file is a few hundred bytes of aliases whose expansion exhausts memory) and the nesting depth."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.aliases_seen = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                raise YamlBudgetExceeded(f"more than {MAX_ALIASES} YAML aliases (*anchor references); "
                                         "write the values out", self.peek_event().start_mark.line + 1)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YamlBudgetExceeded(f"YAML nested more than {MAX_DEPTH} levels deep",
                                         self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def check_expansion(root: yaml.Node, budget: int = MAX_EXPANDED_NODES) -> None:
    """Refuse a node graph whose alias expansion exceeds ``budget`` nodes or is recursive.

    Counted on the shared graph, once per distinct node (memoised), so the check itself stays
    linear in the file size however large the expansion would be."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise YamlBudgetExceeded("recursive YAML alias (a node that contains itself)", node.start_mark.line + 1)
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        active.discard(key)
        if total > budget:
            raise YamlBudgetExceeded(f"YAML aliases expand to more than {budget:,} values",
                                     node.start_mark.line + 1)
        sizes[key] = total
        return total

    size(root)


def load_yaml(text: str, source: str, loader: type[BoundedLoader] = BoundedLoader) -> tuple[yaml.Node | None, Any]:
    """``(root node, data)`` of one YAML document, within the budgets. A budget exceeded is a
    :class:`UserFileError` naming ``source`` and the line; a syntax error stays a ``yaml.YAMLError``
    (with its mark) for the caller to place."""
    bounded = loader(text)
    try:
        node = bounded.get_single_node()
        if node is None:
            return None, None
        check_expansion(node)  # before anything walks the expansion
        return node, bounded.construct_document(node)
    except YamlBudgetExceeded as error:
        raise UserFileError(f"{source}{'' if error.line is None else f':{error.line}'}: {error}") from None
    except RecursionError:
        raise UserFileError(f"{source}: YAML nested too deeply") from None
    finally:
        bounded.dispose()


def read_yaml(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "YAML file",
              inside: str | Path | None = None) -> Any:
    """A regular file's YAML data, within the budgets; a syntax error is a :class:`UserFileError` too."""
    try:
        return load_yaml(read_text(path, limit=limit, what=what, inside=inside), str(path))[1]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise UserFileError(f"{where}: invalid YAML: {one_line(getattr(error, 'problem', None) or str(error))}") from None
