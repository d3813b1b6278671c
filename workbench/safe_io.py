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
* JSON nested deeper than Python's stack is an error, not a ``RecursionError``;
* parquet is decoded only within a row count and a decompressed size (:func:`read_parquet`), checked
  on the file's metadata before the first page is decompressed and again while decoding.

Each refusal is a :class:`workbench.errors.UserFileError`: one line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from workbench.errors import UserFileError, one_line

MAX_FILE_BYTES = 16 << 20  # 16 MiB: specs, manifests and stored records are KiB; a log file passes its own limit
MAX_ALIASES = 200  # `*anchor` references per document: anchors share settings; a bomb needs thousands
MAX_EXPANDED_NODES = 200_000  # YAML nodes once every alias is expanded (what later passes walk)
MAX_DEPTH = 100  # nested YAML collections: a study or a spec is a few levels deep
MAX_PARQUET_ROWS = 20_000_000  # an export's metrics: a large study has a few million points
MAX_PARQUET_DECODED_BYTES = 2 << 30  # a parquet file decompressed (Arrow's own buffers, before any copy)

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_EXPANDED_NODES",
    "MAX_FILE_BYTES",
    "MAX_PARQUET_DECODED_BYTES",
    "MAX_PARQUET_ROWS",
    "BoundedLoader",
    "YamlBudgetExceeded",
    "check_expansion",
    "load_yaml",
    "open_regular",
    "open_user_file",
    "parse_json",
    "read_bytes",
    "read_json",
    "read_limited",
    "read_parquet",
    "read_text",
    "read_yaml",
]


def open_regular(path: str | Path, *, what: str = "file", inside: str | Path | None = None) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (and, with ``inside``, resolves inside
    that directory). Opened non-blocking and checked on the open descriptor, so a FIFO (or a file
    swapped for one after a check) never blocks. Raises as :func:`read_limited` does; the caller
    bounds what it reads (a streaming reader counts its lines and bytes)."""
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
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file", inside: str | Path | None = None
) -> bytes:
    """A regular file's bytes, at most ``limit``. Raises ``FileNotFoundError``/``IsADirectoryError``/
    ``OSError``, or ``ValueError`` (not a regular file, outside ``inside``, over ``limit``); messages never
    quote the file's content and do not name it (the caller does: :func:`read_bytes`)."""
    with open_regular(path, what=what, inside=inside) as f:
        chunks, size = [], 0
        while size <= limit:  # never more than the budget, even if the file grows meanwhile
            chunk = f.read(min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size > limit:
        raise ValueError(f"larger than {_size(limit)}: too large for a {what}")
    return b"".join(chunks)


def _user_error(path: str | Path, what: str, error: OSError | ValueError) -> UserFileError:
    """The one line a failed open or read of a user's file becomes, naming the file."""
    if isinstance(error, FileNotFoundError):
        return UserFileError(f"{path}: no such {what}")
    if isinstance(error, ValueError):
        return UserFileError(f"{path}: {error}")
    return UserFileError(f"{path}: cannot read the {what}: {error.strerror or error}")


def open_user_file(path: str | Path, *, what: str = "file", inside: str | Path | None = None) -> BinaryIO:
    """:func:`open_regular`, every failure a :class:`UserFileError` naming the file."""
    try:
        return open_regular(path, what=what, inside=inside)
    except (OSError, ValueError) as error:
        raise _user_error(path, what, error) from None


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit // 1024} KiB"


def read_bytes(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file", inside: str | Path | None = None
) -> bytes:
    """:func:`read_limited`, every failure a :class:`UserFileError` naming the file."""
    try:
        return read_limited(path, limit=limit, what=what, inside=inside)
    except (OSError, ValueError) as error:
        raise _user_error(path, what, error) from None


def read_text(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file", inside: str | Path | None = None
) -> str:
    """A regular file's UTF-8 text (:func:`read_bytes`)."""
    data = read_bytes(path, limit=limit, what=what, inside=inside)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserFileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def parse_json(text: str | bytes, source: str, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """``json.loads`` (``parse_float`` as there); invalid or too deeply nested JSON is a
    :class:`UserFileError` naming ``source``."""
    try:
        return json.loads(text, parse_float=parse_float)
    except RecursionError:
        raise UserFileError(f"{source}: JSON nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, and bytes that are not UTF-8
        raise UserFileError(f"{source}: not valid JSON: {one_line(str(error))[:160]}") from None


def read_json(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "JSON file", inside: str | Path | None = None
) -> Any:
    return parse_json(read_text(path, limit=limit, what=what, inside=inside), str(path))


def _bytes(n: int) -> str:
    return (
        f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"
    )


def _decoded_nbytes(array: Any) -> int:
    """The bytes ``array`` takes once decoded: a dictionary-encoded column (kept as such when the file's
    stored schema says so) counts each row's value, as a cast to its value type would allocate."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(array.type):
        return int(array.nbytes)
    values = array.dictionary
    if (
        pa.types.is_binary(values.type)
        or pa.types.is_string(values.type)
        or pa.types.is_large_binary(values.type)
        or pa.types.is_large_string(values.type)
    ):
        lengths = pc.binary_length(values).fill_null(0)
        per_row = pc.take(lengths, array.indices.fill_null(0)) if len(values) else pa.array([0] * len(array))
        return int(pc.sum(per_row).as_py() or 0) + 8 * len(array)
    width = values.nbytes // max(len(values), 1)
    return width * len(array) + int(array.indices.nbytes)


def read_parquet(
    data: bytes,
    source: str,
    *,
    max_rows: int = MAX_PARQUET_ROWS,
    max_decoded_bytes: int = MAX_PARQUET_DECODED_BYTES,
    batch_rows: int = 1 << 16,
) -> Any:
    """A parquet file's table (``pyarrow.Table``) from its bytes, within the budgets.

    A few KB of zstd can hold hundreds of millions of identical rows: the row count and the
    decompressed size the file's metadata declares are checked before any page is decoded, and
    the decoding itself then goes a batch at a time, counting rows and decoded bytes, so a footer
    that understates them is caught at the budget too. Every failure (over a budget, not parquet)
    is a :class:`UserFileError` naming ``source``."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))  # reads the footer only
        meta = parquet.metadata
        declared = sum(
            meta.row_group(g).column(c).total_uncompressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        )
    except (pa.ArrowException, OSError, ValueError) as error:
        raise UserFileError(f"{source}: not a parquet file ({one_line(str(error))[:160]})") from None
    if meta.num_rows > max_rows:
        raise UserFileError(
            f"{source}: {meta.num_rows:,} rows, over the limit of {max_rows:,}: refused before decoding it"
        )
    if declared > max_decoded_bytes:
        raise UserFileError(
            f"{source}: {_bytes(declared)} once decompressed ({_bytes(len(data))} on disk), over "
            f"the limit of {_bytes(max_decoded_bytes)}: refused before decoding it"
        )
    batches, rows, decoded = [], 0, 0
    try:
        for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
            rows += batch.num_rows
            decoded += sum(_decoded_nbytes(column) for column in batch.columns)
            if rows > max_rows or decoded > max_decoded_bytes:
                raise UserFileError(
                    f"{source}: decodes to more than its metadata says (over {max_rows:,} rows or "
                    f"{_bytes(max_decoded_bytes)}): refused"
                )
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=parquet.schema_arrow)
    except (pa.ArrowException, OSError, ValueError) as error:
        if isinstance(error, UserFileError):
            raise
        raise UserFileError(f"{source}: not a readable parquet file ({one_line(str(error))[:160]})") from None
    if table.num_rows != meta.num_rows:
        raise UserFileError(f"{source}: {table.num_rows:,} rows decoded, its metadata says {meta.num_rows:,}")
    return table


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
                raise YamlBudgetExceeded(
                    f"more than {MAX_ALIASES} YAML aliases (*anchor references); write the values out",
                    self.peek_event().start_mark.line + 1,
                )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YamlBudgetExceeded(
                    f"YAML nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark.line + 1
                )
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
            raise YamlBudgetExceeded(f"YAML aliases expand to more than {budget:,} values", node.start_mark.line + 1)
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


def read_yaml(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "YAML file", inside: str | Path | None = None
) -> Any:
    """A regular file's YAML data, within the budgets; a syntax error is a :class:`UserFileError` too."""
    try:
        return load_yaml(read_text(path, limit=limit, what=what, inside=inside), str(path))[1]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise UserFileError(
            f"{where}: invalid YAML: {one_line(getattr(error, 'problem', None) or str(error))}"
        ) from None
