"""Headless Chromium for the browser acceptance tests (Playwright driving the Debian ``chromium``).

``launch_chromium`` starts /usr/bin/chromium (or $WORKBENCH_CHROMIUM) with Playwright's Python
API, never a downloaded browser build. Missing package or browser: the test skips, unless
``WORKBENCH_REQUIRE_BROWSER=1`` (CI), where it fails.

``PageWatch`` records what "no JavaScript errors" and "self-contained" mean: uncaught exceptions,
``console.error`` lines, and every request that left ``file://``. ``plot_panels`` reads every
plotly graph on a page back from the browser: one entry per panel (cartesian subplot) with its
traces, finite points and SVG elements drawn, so a panel with no traces or only empty traces shows up.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))
# Without these, Chromium keeps trying to reach Google's services through the closed network.
# (headless=True adds --headless; each launch gets a fresh temporary --user-data-dir from Playwright.)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[1]


def artifacts_dir() -> Path:
    """Where screenshots go: $WORKBENCH_TEST_ARTIFACTS/browser, else .workbench/test-artifacts/browser."""
    root = Path(os.environ.get("WORKBENCH_TEST_ARTIFACTS") or REPO / ".workbench" / "test-artifacts")
    out = root / "browser"
    out.mkdir(parents=True, exist_ok=True)
    return out


def require_browser() -> None:
    """Skip (fail under WORKBENCH_REQUIRE_BROWSER=1) when playwright or chromium is missing."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the Python package playwright (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if missing:
        message = "browser test needs " + " and ".join(missing)
        (pytest.fail if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1" else pytest.skip)(message)


@contextmanager
def launch_chromium() -> Iterator[Any]:
    """A Playwright ``Browser`` on the Debian chromium (skips or fails first if it is missing)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class PageWatch:
    """JavaScript errors and network requests of one page (attach before navigating)."""

    errors: list[str] = field(default_factory=list)  # uncaught exceptions and console.error
    failed: list[str] = field(default_factory=list)  # HTTP status >= 400: "404 http://..."
    external: list[str] = field(default_factory=list)  # requests to anything but file://

    @classmethod
    def attach(cls, page: Any, *, offline: bool = False) -> PageWatch:
        """``offline``: abort every request that is not file:// (and record it): a self-contained
        page must render without them."""
        watch = cls()
        page.on("pageerror", lambda e: watch.errors.append(f"uncaught: {e}"))
        page.on("console", lambda m: m.type == "error" and watch.errors.append(f"console.error: {m.text}"))
        page.on("response", lambda r: r.status >= 400 and watch.failed.append(f"{r.status} {r.url}"))
        if offline:

            def block(route):
                watch.external.append(route.request.url)
                route.abort()

            page.route(
                "**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else block(route)
            )
        return watch


# Runs in the page: for each plotly graph div, its panels (cartesian subplots "xy", "x2y2", ...)
# with their title, the visible traces on them, the finite points of each (y for lines and bars, z
# for heatmaps, read from gd._fullData, where plotly has decoded the base64 arrays) and the trace
# groups plotly drew into the panel's SVG. A panel is a subplot with traces or with a subplot title
# (make_subplots puts each title at the top centre of its subplot); a grid cell with neither is
# blank space, not a panel. Axes come from the figure's own layout: plotly's _fullLayout keeps only
# the axes some trace uses, so an empty panel would vanish from it. Also returned: the "no data
# for ..." notes the dashboard renderer writes into empty panels.
_PANELS_JS = r"""
() => {
  const finite = v => v !== null && v !== undefined && v !== '' && Number.isFinite(Number(v));
  const points = t => {
    if (t.type === 'heatmap') {
      return Array.from(t.z || []).reduce((n, row) => n + Array.from(row || []).filter(finite).length, 0);
    }
    const xs = Array.from(t.x || []), ys = Array.from(t.y || []);
    return ys.filter((y, i) => finite(y) && xs[i] !== undefined && xs[i] !== null).length;
  };
  const near = (a, b) => Math.abs(a - b) < 1e-6;
  return Array.from(document.querySelectorAll('.plotly-graph-div')).map(gd => {
    const fl = gd._fullLayout;
    if (!fl) return {id: gd.id, drawn: false, panels: {}, notes: [], blank: 0};
    const texts = (fl.annotations || []).map(a => ({text: String(a.text || ''), x: a.x, y: a.y,
                                                    paper: a.xref === 'paper' && a.yref === 'paper'}));
    const cells = {};
    for (const [key, xa] of Object.entries(gd.layout)) {
      const m = /^xaxis(\d*)$/.exec(key);
      if (!m || !xa) continue;
      const anchor = xa.anchor || 'y';
      const ya = gd.layout['yaxis' + anchor.slice(1)] || {};
      const [x0, x1] = xa.domain || [0, 1], top = (ya.domain || [0, 1])[1];
      const title = texts.find(a => a.paper && near(a.x, (x0 + x1) / 2) && near(a.y, top));
      cells['x' + m[1] + anchor] = {title: title ? title.text.split('<br>')[0] : '', traces: [], svg: 0};
    }
    for (const t of gd._fullData) {
      if (t.visible !== true) continue;
      const id = (t.xaxis || 'x') + (t.yaxis || 'y');
      (cells[id] = cells[id] || {title: '', traces: [], svg: 0}).traces.push(
        {name: t.name || t.type, type: t.type, points: points(t)});
    }
    const panels = {};
    for (const [id, c] of Object.entries(cells)) {
      if (!c.traces.length && !c.title) continue;
      const layer = gd.querySelector(`.cartesianlayer .subplot.${id} .overplot .${id}`);
      c.svg = layer ? layer.querySelectorAll('.trace, .hm').length : 0;
      panels[id] = c;
    }
    return {id: gd.id, drawn: true, panels, blank: Object.keys(cells).length - Object.keys(panels).length,
            notes: texts.map(a => a.text).filter(s => s.startsWith('no data'))};
  });
}
"""


def plot_panels(frame: Any) -> list[dict[str, Any]]:
    """Every plotly graph of a page (or iframe): ``{id, drawn, panels: {subplot: {title, traces, svg}},
    notes, blank}`` (``blank``: grid cells without title or traces)."""
    frame.wait_for_function("() => document.readyState === 'complete'")
    return frame.evaluate(_PANELS_JS)


def panel_problems(graphs: list[dict[str, Any]]) -> list[str]:
    """Why a graph or panel does not show data; empty when every panel of every graph has some."""
    problems = []
    if not graphs:
        problems.append("no plotly graph on the page")
    for g in graphs:
        if not g["drawn"]:
            problems.append(f"{g['id']}: plotly did not draw the graph")
        for note in g["notes"]:
            problems.append(f"{g['id']}: the page says {note!r}")
        if g["drawn"] and not g["panels"]:
            problems.append(f"{g['id']}: no panels")
        for sub, p in g["panels"].items():
            where = f"{g['id']} panel {sub}" + (f" {p['title']!r}" if p["title"] else "")
            if not p["traces"]:
                problems.append(f"{where}: no traces")
            for t in p["traces"]:
                if t["points"] == 0:
                    problems.append(f"{where}: trace {t['name']!r} ({t['type']}) has no finite points")
            if p["traces"] and p["svg"] == 0:
                problems.append(f"{where}: nothing drawn in the SVG")
    return problems


def n_panels(graphs: list[dict[str, Any]]) -> int:
    return sum(len(g["panels"]) for g in graphs)
