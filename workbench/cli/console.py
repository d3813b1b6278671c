"""Width-safe tables for the terminal: names and numbers are never cut.

``render_table`` picks the first layout that fits the width:
1. **columns**: every cell on one line, columns aligned;
2. **wrapped**: the columns marked ``wrap`` (free text such as a meaning) are word-wrapped inside their
   column, the others stay whole;
3. **stacked**: one block per row, the first cell as its heading and ``header: value`` lines below,
   for widths where no column layout fits.

A cell is only ever broken at spaces; a single word longer than the width (a metric name at 20
columns) is printed whole on a line of its own, overflowing rather than truncated.

Off a terminal (a pipe, a file, CI logs) ``plain`` output is one line per row, cells separated by a
tab, no wrapping at all: ``workbench metrics | cut -f1`` gives the names.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

GAP = "  "  # between aligned columns
MIN_WRAP_WIDTH = 16  # a wrapped column narrower than this reads worse than the stacked layout


def terminal_width(default: int = 80) -> int:
    """``COLUMNS`` when set (as shells and CI set it), else the terminal's size, else ``default``."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size((default, 24)).columns


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Tab-separated, one line per row, a header line first: for pipes and logs."""

    def clean(cell: object) -> str:  # a tab or newline inside a cell would break the row structure
        return " ".join(str(cell).split())

    lines = ["\t".join(clean(h) for h in headers)]
    lines += ["\t".join(clean(c) for c in row) for row in rows]
    return "\n".join(lines) + "\n"


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` wrapped at spaces to ``width``; a word longer than ``width`` stays whole on its line."""
    if not text:
        return [""]
    return textwrap.wrap(text, width=max(width, 1), break_long_words=False, break_on_hyphens=False) or [""]


def _columns_layout(headers: list[str], rows: list[list[str]], widths: list[int], wrap: set[int]) -> str:
    def block(cells: list[str]) -> list[str]:
        parts = [wrap_words(c, widths[i]) if i in wrap else [c] for i, c in enumerate(cells)]
        height = max(len(p) for p in parts)
        out = []
        for line in range(height):
            pieces = [(p[line] if line < len(p) else "").ljust(widths[i]) for i, p in enumerate(parts)]
            out.append(GAP.join(pieces).rstrip())
        return out

    lines = block(headers)
    lines.append(GAP.join("-" * w for w in widths))
    for row in rows:
        lines += block(row)
    return "\n".join(lines) + "\n"


def _stacked_layout(headers: list[str], rows: list[list[str]], width: int) -> str:
    label_width = max(len(h) for h in headers[1:]) if len(headers) > 1 else 0
    lines: list[str] = []
    for row in rows:
        lines += wrap_words(row[0], width)  # the row's name as its heading
        for header, cell in zip(headers[1:], row[1:], strict=True):
            label = f"  {header}:".ljust(label_width + 4)
            room = width - len(label)
            if room >= MIN_WRAP_WIDTH:
                wrapped = wrap_words(cell, room)
                lines.append(label + wrapped[0])
                lines += [" " * len(label) + piece for piece in wrapped[1:]]
            else:  # too narrow for label and value side by side: value on its own indented lines
                lines.append(label.rstrip())
                lines += ["    " + piece for piece in wrap_words(cell, width - 4)]
        lines.append("")
    return "\n".join(lines)


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    width: int | None = None,
    wrap: Sequence[str] = (),
    plain: bool = False,
    title: str | None = None,
) -> str:
    """The table as text that fits ``width`` (default: the terminal's) without cutting a cell.

    ``wrap`` names the columns whose text may be word-wrapped inside the column; ``plain`` gives the
    tab-separated form for pipes (no title, no wrapping).
    """
    headers = [str(h) for h in headers]
    cells = [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"row {row[:1]} has {len(row)} cells for {len(headers)} headers")
    if plain:
        return plain_table(headers, cells)
    width = width or terminal_width()
    heading = "\n".join(wrap_words(title, width)) + "\n\n" if title else ""

    natural = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if sum(natural) + len(GAP) * (len(headers) - 1) <= width:
        return heading + _columns_layout(headers, cells, natural, set())

    wrap_idx = {headers.index(name) for name in wrap if name in headers}
    if wrap_idx:
        # Fixed columns keep their natural width; the wrapped ones share what is left, each no
        # narrower than its longest word (words are never broken).
        fixed = sum(natural[i] for i in range(len(headers)) if i not in wrap_idx)
        room = width - fixed - len(GAP) * (len(headers) - 1)
        share = room // len(wrap_idx)
        longest_word = max((len(w) for i in wrap_idx for r in cells for w in r[i].split()), default=0)
        if share >= max(MIN_WRAP_WIDTH, longest_word):
            widths = [min(natural[i], share) if i in wrap_idx else natural[i] for i in range(len(headers))]
            return heading + _columns_layout(headers, cells, widths, wrap_idx)

    return heading + _stacked_layout(headers, cells, width)


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    wrap: Sequence[str] = (),
    title: str | None = None,
    plain: bool | None = None,
    stream: TextIO | None = None,
) -> None:
    """Print ``render_table``: the width-adapted layout on a terminal, plain tab-separated rows otherwise."""
    stream = stream or sys.stdout
    plain = not is_terminal(stream) if plain is None else plain
    stream.write(render_table(headers, rows, wrap=wrap, plain=plain, title=title))
