"""Self-contained HTML pages: plotly.js inlined once (opens offline, in the MLflow UI's artifact
view, and from a file), figures as divs, tables as plain HTML."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from .style import FONT, PLOT_CONFIG

__all__ = ["Section", "df_table_html", "html_page", "without_generated_time"]

#: The page's "generated <minute>" stamp, the one part of a page that changes when nothing else does.
_GENERATED_PREFIX, _GENERATED_SUFFIX = " · generated ", " by rl-workbench"
_GENERATED = re.compile(
    re.escape(_GENERATED_PREFIX) + r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC" + re.escape(_GENERATED_SUFFIX)
)


def without_generated_time(page: str) -> str:
    """``page`` (from :func:`html_page`) without the minute it was generated: the same report made
    again later compares equal (what ``workbench compare`` hashes to log a report once per content)."""
    return _GENERATED.sub(_GENERATED_PREFIX + _GENERATED_SUFFIX, page, count=1)


_CSS = f"""
body {{ font-family: {FONT}; margin: 24px auto; max-width: 1400px; color: #222; padding: 0 16px; }}
h1 {{ font-size: 22px; margin-bottom: 4px; }} h2 {{ font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; }}
.meta {{ color: #666; font-size: 13px; }} .note {{ color: #555; font-size: 12.5px; max-width: 1100px; }}
table.wb {{ border-collapse: collapse; font-size: 12.5px; margin: 8px 0 16px; }}
table.wb th, table.wb td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }}
table.wb th {{ background: #f5f5f5; }} table.wb td.l, table.wb th.l {{ text-align: left; }}
tr.baseline td {{ background: #f7f7f7; font-weight: 600; }}
td.better {{ background: #d9f2dd; }} td.worse {{ background: #f8d7da; }} td.nd {{ color: #777; }}
td.warn {{ background: #fff1cc; }} td.fail {{ background: #f8d7da; }} td.off {{ color: #bbb; }}
.plot {{ width: 100%; }}
.lead {{ border: 1px solid #ccd; background: #f7f8fc; padding: 6px 12px; margin: 0 0 12px; }}
.lead p.headline {{ font-size: 15px; margin: 4px 0; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
"""
# Fits MLflow's artifact viewer: the report opens there in an iframe about 800 px wide on a laptop
# screen (measured in tests/test_browser.py). The page never scrolls sideways: a table wider than the
# frame scrolls inside its own box, and the verdict sits next to the arm's name, in view.


@dataclass
class Section:
    """A page section: a heading and an optional note (plain text, escaped when the page is written: a
    dashboard spec's description is a user's string), and a figure and/or a body of HTML (its builder
    escapes what it puts in)."""

    title: str
    figure: go.Figure | None = None
    body_html: str = ""
    note: str = ""


def html_page(title: str, sections: Iterable[Section], *, subtitle: str = "", lead_html: str = "") -> str:
    """A complete HTML document with one inlined copy of plotly.js. ``title`` and each section's title
    and note are plain text (escaped here); ``subtitle``, ``lead_html`` and ``body_html`` are HTML their
    builders made, escaping every user string they put in. ``lead_html``: what the page says first,
    above its title (a comparison's headline)."""
    from plotly.offline import get_plotlyjs

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_CSS}</style>",
        '<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: "local"};</script>',
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        *([f'<div class="lead">{lead_html}</div>'] if lead_html else []),
        f"<h1>{html.escape(title)}</h1>",
    ]
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f'<div class="meta">{subtitle}{_GENERATED_PREFIX}{generated}{_GENERATED_SUFFIX}</div>')
    for i, s in enumerate(sections):
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.note:
            parts.append(f'<p class="note">{html.escape(s.note)}</p>')
        if s.body_html:
            parts.append(s.body_html)
        if s.figure is not None:
            parts.append(
                s.figure.to_html(
                    full_html=False,
                    include_plotlyjs=False,
                    div_id=f"wb-plot-{i}",
                    config=PLOT_CONFIG,
                    default_width="100%",
                )
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def _cell(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def df_table_html(
    df: pd.DataFrame, *, left: Sequence[str] = (), cell_class: dict[str, Any] | None = None, row_class: Any = None
) -> str:
    """A plain HTML table. ``left``: left-aligned columns; ``cell_class[col](value) -> css class``;
    ``row_class(record) -> css class``."""
    cell_class = cell_class or {}
    head = "".join(f'<th class="{"l" if c in left else ""}">{html.escape(str(c))}</th>' for c in df.columns)
    rows = []
    for rec in df.to_dict("records"):
        rc = row_class(rec) if row_class else ""
        tds = []
        for c in df.columns:
            cls = ["l"] if c in left else []
            if c in cell_class:
                extra = cell_class[c](rec[c])
                if extra:
                    cls.append(extra)
            tds.append(f'<td class="{" ".join(cls)}">{_cell(rec[c])}</td>')
        rows.append(f'<tr class="{rc}">{"".join(tds)}</tr>')
    table = f'<table class="wb"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="scroll">{table}</div>'
