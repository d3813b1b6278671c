"""A PNG of chosen sections of a self-contained report page, drawn by a headless Chromium.

Plotly draws in the browser, so a faithful image of a report is a browser's screenshot (plotly's
own static export needs kaleido, which the workbench does not depend on). Used for the figures
in docs/ (``workbench compare --png``). Needs the Python package ``playwright`` (the ``dev``
extra) and a Chromium: /usr/bin/chromium (Debian's ``chromium``) or $WORKBENCH_CHROMIUM.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

# Without these, Chromium keeps trying to reach Google's services through a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Runs in the page: keep the title, the subtitle and the sections (an <h2> and what follows it up
# to the next <h2>) whose heading is one of `keep`; remove the rest. Returns the headings kept.
_KEEP_SECTIONS_JS = r"""
(keep) => {
  const kept = [];
  let inside = true;  // the title and the subtitle before the first section
  for (const node of Array.from(document.body.children)) {
    if (node.tagName === 'H2') {
      inside = keep.includes(node.textContent.trim());
      if (inside) kept.push(node.textContent.trim());
    }
    if (!inside) node.remove();
  }
  window.dispatchEvent(new Event('resize'));
  return kept;
}
"""


class SnapshotError(RuntimeError):
    """The screenshot cannot be taken here (no playwright, no Chromium, a section missing)."""


def chromium_path() -> Path:
    return Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))


def missing_requirement() -> str | None:
    """What this machine lacks to take a screenshot, in one sentence; ``None`` when nothing."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the Python package playwright (pip install -e '.[dev]')")
    if not chromium_path().exists():
        missing.append(f"a Chromium at {chromium_path()} (apt-get install chromium, or set WORKBENCH_CHROMIUM)")
    return "a PNG of the report needs " + " and ".join(missing) if missing else None


def save_sections_png(html_file: Path, png_file: Path, sections: Sequence[str], *, width: int = 1280) -> None:
    """Write a PNG of ``sections`` (their ``<h2>`` titles) of the page ``html_file``."""
    lacking = missing_requirement()
    if lacking:
        raise SnapshotError(lacking)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium_path()), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
            page.goto(Path(html_file).resolve().as_uri(), wait_until="load")
            kept = page.evaluate(_KEEP_SECTIONS_JS, list(sections))
            absent = [s for s in sections if s not in kept]
            if absent:
                raise SnapshotError(f"the report has no section {', '.join(map(repr, absent))}")
            # every remaining plot drawn (plotly adds its SVG once it has laid the figure out)
            page.wait_for_function(
                "Array.from(document.querySelectorAll('.plotly-graph-div')).every(gd => gd.querySelector('.main-svg'))",
                timeout=30_000,
            )
            page.wait_for_timeout(300)  # the resize relayout
            png_file.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png_file), full_page=True)
        finally:
            browser.close()
