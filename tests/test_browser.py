"""Browser acceptance test of comparisons and dashboards (issue #6), in headless Chromium.

On the real micro study (tests/viz/micro_study.py): the HTML report of ``workbench compare`` and
the ``health`` dashboard of ``workbench dashboard`` open from disk with the network cut off, raise
no JavaScript error, and every panel of every plotly graph has data; ``workbench ui`` serves the
store with a real ``mlflow server``, whose UI shows the study's parent run and its child runs, and
the report links ``workbench ui`` prints open the report inside the UI, and the study's saved
views (issue #15) open MLflow's own charts grouped by variant, with every health metric charted.

Screenshots: .workbench/test-artifacts/browser/*.png (or $WORKBENCH_TEST_ARTIFACTS/browser).
Needs the Debian ``chromium`` and the ``playwright`` package: skips without them, fails in CI
(``WORKBENCH_REQUIRE_BROWSER=1``, set by .ci/run).
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.browser import (
    PageWatch,
    artifacts_dir,
    launch_chromium,
    n_panels,
    panel_problems,
    plot_panels,
    require_browser,
)
from tests.postgres import _free_port
from tests.viz.micro_study import SEEDS, STUDY, VARIANTS, build_micro_study, copy_store
from workbench.cli.main import app
from workbench.compare import resolve_summary
from workbench.compare.summary import summary_name
from workbench.viz.spec_loader import find_spec, load_spec

pytestmark = pytest.mark.slow

CHILD_RUNS = [f"{v}/seed={s}" for v in VARIANTS for s in SEEDS]  # run names of the micro study's runs
PARENT_RUN = f"study:{STUDY}"
# The MLflow 3.17 UI asks for the signed-in user, which only the basic-auth server knows: a 404
# (and its console line) on every page, not an error of ours.
MLFLOW_UI_KNOWN_404 = "/ajax-api/2.0/mlflow/users/current"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@dataclass
class Served:
    """A study directory whose reports are logged, with ``workbench ui`` serving it."""

    home: Path  # holds mlflow.db: the default store of a user running commands there
    report: Path  # `workbench compare --out`
    dashboard: Path  # `workbench dashboard --spec health --out`
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text()

    def wait_ready(self, timeout: float = 120) -> str:
        """The UI's base URL once the server answers /health and `workbench ui` printed its links
        (≈10 s quiet, more under load)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"workbench ui exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as r:
                    # `workbench ui` prints its links once the server answers: wait for them too
                    if r.status == 200 and "MLflow UI at" in self.output():
                        return self.base
            except OSError:
                pass
            time.sleep(0.3)
        pytest.fail(f"mlflow server not answering after {timeout} s:\n{self.output()}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Log the compare report and the health dashboard, then start ``workbench ui STUDY`` (left
    starting while the file-based tests run). Stopped with SIGTERM, as `kill PID` would: its
    mlflow server must go with it."""
    require_browser()  # before building anything
    study = build_micro_study(tmp_path_factory)
    home = tmp_path_factory.mktemp("browser-home")
    copy_store(study, home)  # the UI's server gets a private copy of the store; artifacts are shared
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(home)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        result = invoke("compare", STUDY, "--out", home / "compare.html")
        assert result.exit_code == 0, result.output
        result = invoke("dashboard", STUDY, "--spec", "health", "--out", home / "health.html")
        assert result.exit_code == 0, result.output

    port = _free_port()
    log = home / "ui.log"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workbench.cli.main", "ui", STUDY, "--port", str(port)],
            cwd=home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    served = Served(home, home / "compare.html", home / "health.html", proc, port, log)
    yield served
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    with socket.socket() as s:
        still_up = s.connect_ex(("127.0.0.1", port)) == 0
    assert not still_up, f"workbench ui was stopped but its mlflow server still listens on port {port}"


@pytest.fixture(scope="module")
def chromium_browser():
    with launch_chromium() as browser:
        yield browser


def new_page(browser, width: int = 1400, height: int = 1000):
    return browser.new_page(viewport={"width": width, "height": height})


def shot(page, name: str, *, full_page: bool = True) -> Path:
    path = artifacts_dir() / name
    page.screenshot(path=str(path), full_page=full_page)
    return path


# ---- the HTML files, from disk and offline -------------------------------------------------------


def test_compare_report_renders_offline_without_errors_and_every_panel_has_data(served, chromium_browser):
    page = new_page(chromium_browser)
    watch = PageWatch.attach(page, offline=True)
    page.goto(served.report.as_uri())
    graphs = plot_panels(page)
    assert watch.errors == []
    assert watch.external == []  # plotly.js is inlined: nothing to fetch
    assert len(graphs) == served.report.read_text().count("Plotly.newPlot") == 3  # bars, curves, health
    assert panel_problems(graphs) == []
    spec = load_spec(find_spec("compare"))
    curves = sum(p.kind == "curve" for p in spec.panels)
    # one bar panel per compared metric (the study's compare.metrics), the spec's curve panels, the matrix
    assert n_panels(graphs) == 2 + curves + 1
    shot(page, "compare-report.png")
    page.close()


def test_health_dashboard_renders_offline_without_errors_and_every_panel_has_data(served, chromium_browser):
    page = new_page(chromium_browser)
    watch = PageWatch.attach(page, offline=True)
    page.goto(served.dashboard.as_uri())
    graphs = plot_panels(page)
    assert watch.errors == [] and watch.external == []
    assert panel_problems(graphs) == []
    # the micro study logs no importance weights and no reference KL: the two optional panels go
    spec = load_spec(find_spec("health"))
    assert n_panels(graphs) == sum(not p.optional for p in spec.panels) == len(spec.panels) - 2
    shot(page, "health-dashboard.png")
    page.close()


def test_the_checks_catch_an_empty_panel_a_script_error_and_a_fetch(served, chromium_browser, tmp_path, monkeypatch):
    """The same checks on a dashboard with a panel on a metric the study never logged: they fail."""
    monkeypatch.chdir(served.home)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = tmp_path / "gap.yaml"
    spec.write_text("panels:\n  - {title: Reward, metric: reward/mean}\n  - {title: KL to ref, metric: kl/ref}\n")
    result = invoke("dashboard", STUDY, "--spec", spec, "--no-log", "--out", tmp_path / "gap.html")
    assert result.exit_code == 0 and "1/2 panels with data" in result.output, result.output
    page = new_page(chromium_browser)
    watch = PageWatch.attach(page, offline=True)
    page.goto((tmp_path / "gap.html").as_uri())
    problems = panel_problems(plot_panels(page))
    assert problems == ["wb-plot-0: the page says 'no data for kl/ref'", "wb-plot-0 panel x2y2 'KL to ref': no traces"]
    page.evaluate("setTimeout(() => { throw new Error('boom') }, 0); fetch('https://cdn.plot.ly/x.js').catch(() => 0)")
    page.wait_for_timeout(300)
    assert any("boom" in e for e in watch.errors), watch.errors
    assert watch.external == ["https://cdn.plot.ly/x.js"]
    page.close()


# ---- workbench ui: the real MLflow UI ------------------------------------------------------------


def _ids(served: Served) -> tuple[str, str]:
    client = MlflowClient(f"sqlite:///{served.home / 'mlflow.db'}")
    exp = client.get_experiment_by_name(STUDY)
    (parent,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    return exp.experiment_id, parent.info.run_id


def _close_assistant(page) -> None:
    """The MLflow Assistant side panel opens by default; closed, the screenshot shows the table."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    close = page.get_by_role("button", name="Close", exact=True)
    if close.count() == 1 and close.is_visible():
        try:  # cosmetic (the screenshot): under load the panel may still be animating; never fail a test on it
            close.click(timeout=30_000, force=True)  # force: no wait for the panel's animation to settle
        except PlaywrightTimeout:
            pass


def test_compare_png_is_the_summary_and_curve_figures_as_chromium_draws_them(served, tmp_path):
    """`workbench compare --png` (the figures in docs/findings.md): a real PNG of the report's
    summary and curve sections, at the page width; run as a user would, in its own process."""
    png = tmp_path / "figure.png"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", "compare", STUDY, "--no-log", "--png", str(png)],
        cwd=served.home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"wrote {png} (summary metrics, curves)" in result.stdout + result.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width == 1280 and height > 900  # two sections of figures, not an empty page
    shutil.copy(png, artifacts_dir() / "compare-png.png")


def test_mlflow_ui_shows_the_parent_run_and_its_child_runs(served, chromium_browser):
    """Opened at the study link `workbench ui` printed."""
    from playwright.sync_api import expect

    base = served.wait_ready()
    experiment_id, parent_id = _ids(served)
    link = re.search(rf"^study {STUDY}: (\S+)  \(parent run {parent_id}\)$", served.output(), re.MULTILINE)
    assert link, served.output()
    # the runs table in the model-training layout, not the GenAI overview
    assert link[1] == f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    page = new_page(chromium_browser, 1600, 900)
    watch = PageWatch.attach(page)
    searches = []  # responses of the page's own POST /ajax-api/2.0/mlflow/runs/search
    page.on("response", lambda r: "/runs/search" in r.url and r.ok and searches.append(r))
    page.goto(link[1])
    parent_row = page.locator(".ag-row", has_text=PARENT_RUN)
    parent_row.wait_for(timeout=60_000)
    # MLflow nests child runs under their parent, collapsed: expand it with the row's +/- button
    if not page.get_by_text(CHILD_RUNS[0], exact=True).is_visible():
        parent_row.locator("[col-id='attributes.`Run Name`'] button").first.click()
    for name in [PARENT_RUN, *CHILD_RUNS]:
        expect(page.get_by_text(name, exact=True)).to_be_visible(timeout=15_000)

    # what the table was built from: the page's own REST calls
    runs = {r["info"]["run_id"]: r for response in searches for r in response.json().get("runs", [])}
    tags = {rid: {t["key"]: t["value"] for t in r["data"].get("tags", [])} for rid, r in runs.items()}
    children = sorted(
        r["info"]["run_name"] for rid, r in runs.items() if tags[rid].get("mlflow.parentRunId") == parent_id
    )
    assert children == sorted(CHILD_RUNS)
    assert runs[parent_id]["info"]["run_name"] == PARENT_RUN and tags[parent_id]["workbench.role"] == "study"

    assert [e for e in watch.errors if "Failed to load resource" not in e] == []
    assert [f for f in watch.failed if not f.endswith(MLFLOW_UI_KNOWN_404)] == []
    _close_assistant(page)
    shot(page, "mlflow-ui-runs.png", full_page=False)
    page.close()


def _printed_links(output: str) -> dict[str, tuple[str, str | None]]:
    """``artifact path -> (UI link, local file)`` from what `workbench ui` printed."""
    links: dict[str, tuple[str, str | None]] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^  (\S+\.html)\s+(http://\S+)$", line)
        if m:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            links[m[1]] = (m[2], nxt if nxt.startswith("/") else None)
    return links


def test_ui_prints_the_report_links_and_they_open_in_the_mlflow_ui(served, chromium_browser):
    base = served.wait_ready()
    experiment_id, parent_id = _ids(served)
    out = served.output()
    assert f"MLflow UI at {base}" in out
    links = _printed_links(out)
    assert {"reports/compare.html", "dashboards/health.html"} <= set(links), out
    url, local = links["reports/compare.html"]
    assert url == f"{base}/#/experiments/{experiment_id}/runs/{parent_id}/artifactPath/reports/compare.html"
    assert Path(local).read_text() == served.report.read_text()  # the logged report is the one from --out
    assert Path(links["dashboards/health.html"][1]).read_text() == served.dashboard.read_text()

    page = new_page(chromium_browser, 1600, 1000)
    watch = PageWatch.attach(page)
    page.goto(url)
    # the UI shows an HTML artifact in a sandboxed iframe (srcdoc/blob): the report's own scripts run there
    frame = page.locator("iframe").element_handle(timeout=60_000).content_frame()
    frame.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 3", timeout=60_000)
    assert panel_problems(plot_panels(frame)) == []
    assert [e for e in watch.errors if "Failed to load resource" not in e] == []
    assert [f for f in watch.failed if not f.endswith(MLFLOW_UI_KNOWN_404)] == []
    _close_assistant(page)
    frame.locator("h2", has_text="Curves").scroll_into_view_if_needed()  # a plot in the screenshot
    shot(page, "mlflow-ui-report.png", full_page=False)
    page.close()


# A laptop's browser window: MLflow's artifact viewer gives the report what its file tree leaves
_LAPTOP = (1280, 800)
# Where the report's first lines, its verdict column and its page width stand inside the viewer's frame
_REPORT_FIT_JS = r"""
() => {
  const verdict = Array.from(document.querySelectorAll('table.wb th')).find(th => th.textContent === 'verdict');
  return {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
          first: (document.querySelector('body > .lead p.headline') || {}).textContent || '',
          firstInBody: document.body.firstElementChild.className,
          verdictRight: verdict ? verdict.getBoundingClientRect().right : null};
}
"""


def test_the_report_fits_mlflows_artifact_viewer_with_the_headline_first(served, chromium_browser):
    """In the MLflow UI on a laptop-sized window, the report's first line is the headline, the page
    never scrolls sideways inside the viewer's frame, and the verdict column is in view (finding 2 of
    issue 32: the viewer cut the verdict columns)."""
    base = served.wait_ready()
    experiment_id, parent_id = _ids(served)
    page = new_page(chromium_browser, *_LAPTOP)
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{parent_id}/artifactPath/reports/compare.html")
    frame = page.locator("iframe").element_handle(timeout=60_000).content_frame()
    frame.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 3", timeout=60_000)
    headline = re.search(r"<p class='headline'>(.*?)</p>", served.report.read_text()).group(1)
    for panel in ("assistant open", "assistant closed"):  # the UI opens with its assistant panel beside the frame
        if panel == "assistant closed":
            _close_assistant(page)
            page.wait_for_timeout(500)  # the frame widens
        fit = frame.evaluate(_REPORT_FIT_JS)
        print(
            f"\nMLflow artifact viewer at {_LAPTOP[0]}x{_LAPTOP[1]}, {panel}: frame {fit['width']} px wide, "
            f"report {fit['scrollWidth']} px, verdict column ends at {fit['verdictRight']:.0f} px"
        )
        assert fit["firstInBody"] == "lead" and fit["first"] == html.unescape(headline)
        assert fit["scrollWidth"] <= fit["width"]  # nothing off to the side of the frame
        assert fit["verdictRight"] <= fit["width"]
    shot(page, "mlflow-ui-report-laptop.png", full_page=False)
    page.close()


# ---- the study's MLflow saved views (issue #15) --------------------------------------------------

VIEW_CARD = "[data-testid='experiment-view-compare-runs-card']"

# For every chart card on the page, in order: its title (MLflow names a card after its metrics,
# "a vs b" for several), its legend lines ("<group or run> (<metric>)") and its plotly traces: line
# traces (one per group or run and metric) and band traces (the min–max band of a group), each
# with its count of finite y values.
_CARDS_JS = r"""
(selector) => Array.from(document.querySelectorAll(selector)).map(card => {
  const lines = card.innerText.split('\n').map(s => s.trim()).filter(Boolean);
  const gd = card.querySelector('.js-plotly-plot');
  const count = vs => Array.from(vs || []).filter(v => v !== null && v !== '' && Number.isFinite(Number(v))).length;
  const finite = t => count(t.orientation === 'h' ? t.x : t.y);  // a horizontal bar's values are its x
  const traces = gd && gd.data ? gd.data.map(t => ({lines: String(t.mode || '').includes('lines'),
                                                    band: Boolean(t.fill), points: finite(t)})) : [];
  return {title: lines[0] || '', legend: lines.filter(l => /\(.+\)$/.test(l)), traces};
})
"""


def _printed_views(output: str) -> dict[str, str]:
    """``view name -> UI link`` from what `workbench ui` printed."""
    return dict(re.findall(r"^  view (.+): (http://\S+)$", output, re.MULTILINE))


def _chart_cards(page, expected: int) -> list[dict]:
    page.wait_for_function(f"() => document.querySelectorAll({VIEW_CARD!r}).length >= {expected}", timeout=90_000)
    # every card drawn by plotly with its data (cards render as they scroll into the tall viewport)
    page.wait_for_function(
        f"() => Array.from(document.querySelectorAll({VIEW_CARD!r})).every("
        "c => { const g = c.querySelector('.js-plotly-plot'); return g && g.data && g.data.length; })",
        timeout=90_000,
    )
    return page.evaluate(_CARDS_JS, VIEW_CARD)


def steps_logged(served: Served, metric: str) -> int:
    """How many steps the micro study's runs logged ``metric`` at (the same in every run)."""
    client = MlflowClient(f"sqlite:///{served.home / 'mlflow.db'}")
    experiment_id, _ = _ids(served)
    runs = client.search_runs([experiment_id], "tags.`workbench.role` = 'run'")
    counts = {len(client.get_metric_history(r.info.run_id, metric)) for r in runs}
    assert len(counts) == 1, (metric, counts)
    return counts.pop()


def _expected_cards(spec) -> list[tuple[str, list[str]]]:
    """``(card title, metrics)`` of each panel the micro study has data for, in the spec's order: MLflow
    hides the optional panels' charts (kl/ref, IS weights are never logged there) as empty."""
    out = []
    for p in spec.panels:
        if p.optional or p.kind == "mismatch_record":  # an artifact, not a metric: no MLflow chart
            continue
        if p.kind == "summary":  # one bar card per entry, of the logged metric the summary reads
            out += [(m, [m]) for m in (resolve_summary(summary_name(s)).reads[0] for s in p.metrics)]
            continue
        metrics = ["health/status"] if p.kind == "health_matrix" else list(p.metrics)
        out.append((" vs ".join(metrics), metrics))
    return out


def test_ui_prints_the_saved_view_links_before_the_artifact_links(served):
    base = served.wait_ready()
    experiment_id, _ = _ids(served)
    out = served.output()
    views = _printed_views(out)
    assert list(views)[:2] == ["Training health (by variant)", "Variant comparison (by variant)"], out
    assert "Training health (per seed)" in views
    assert views["Training health (by variant)"] == (
        f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey=workbench-health"
        "&compareRunsMode=CHART&workflowType=machine_learning"
    )
    assert out.index("  view Training health") < out.index("reports/compare.html")


def test_the_first_line_ui_prints_is_the_health_view_url(served):
    """Issue #32: `workbench ui` opens on the curves: its first line is the health view's full URL, alone."""
    base = served.wait_ready()
    first = served.output().splitlines()[0]
    assert first == _printed_views(served.output())["Training health (by variant)"]
    assert first.startswith(f"{base}/#/experiments/") and "workflowType=machine_learning" in first
    # quiet by default: no uvicorn access log ("GET /ajax-api/... 200") among the lines printed
    assert not re.search(r'"(GET|POST) /', served.output()), served.output()


def test_the_health_view_opens_grouped_by_variant_with_every_health_metric_charted(served, chromium_browser):
    """Acceptance (issues #15, #32): the first link `workbench ui` prints opens MLflow's chart view of the
    study's runs grouped by workbench.variant, the health spec's charts in its order, each with a line and
    a min–max band per variant, no "No charts" section, each legend naming every variant."""
    from playwright.sync_api import expect

    served.wait_ready()
    url = served.output().splitlines()[0]
    spec = load_spec(find_spec("health"))
    expected = _expected_cards(spec)
    page = new_page(chromium_browser, 1600, 4200)  # tall: every chart card is on screen, so all render
    watch = PageWatch.attach(page)
    page.goto(url)
    expect(page.get_by_role("button", name=re.compile("Group by: workbench.variant"))).to_be_visible(timeout=90_000)
    for variant in VARIANTS:  # the runs table folds the 4 runs into one group per variant
        expect(page.get_by_text(re.compile(rf"^Group: {variant}$"))).to_be_visible(timeout=30_000)
    cards = _chart_cards(page, len(expected))
    assert page.get_by_text("No charts in this section").count() == 0
    assert [c["title"] for c in cards] == [title for title, _ in expected]  # the spec's order
    for card, (title, metrics) in zip(cards, expected, strict=True):
        for variant in VARIANTS:
            for m in metrics:
                assert f"{variant} ({m})" in card["legend"], (title, card["legend"])
        lines = [t for t in card["traces"] if t["lines"] and t["points"] > 0]
        bands = [t for t in card["traces"] if t["band"] and t["points"] > 0]
        # each variant's mean over its 2 seeds is a line over every logged step, with a min–max band
        # (MLflow bands a card's first metric per group)
        steps = max(steps_logged(served, m) for m in metrics)
        assert len(lines) >= len(VARIANTS) * len(metrics) and all(t["points"] == steps for t in lines), (title, lines)
        assert len(bands) >= len(VARIANTS), (title, card["traces"])
    # Chromium reports a resize observer that fired during layout as a console error; MLflow's chart
    # grid resizes its cards while they render: browser noise, not a failure of the page
    assert [e for e in watch.errors if "Failed to load resource" not in e and "ResizeObserver loop" not in e] == []
    assert [f for f in watch.failed if not f.endswith(MLFLOW_UI_KNOWN_404)] == []
    _close_assistant(page)
    page.set_viewport_size({"width": 1600, "height": 1000})
    shot(page, "mlflow-health-view.png", full_page=False)
    page.close()


def _open_view(served, browser, view: str, spec: str):
    """Open the saved view `workbench ui` printed as ``view`` (tall: every card renders); its cards are
    the dashboard spec's, in order. Returns the page, the cards read off it and the expected cards."""
    served.wait_ready()
    url = _printed_views(served.output())[view]
    expected = _expected_cards(load_spec(find_spec(spec)))
    page = new_page(browser, 1600, 4200)
    page.goto(url)
    cards = _chart_cards(page, len(expected))
    assert [c["title"] for c in cards] == [title for title, _ in expected], cards
    return page, cards, expected


def test_the_comparison_view_charts_every_panel_for_every_variant(served, chromium_browser):
    """Issue #32: the second view `workbench ui` prints, the compare spec grouped by variant: its curves
    in the spec's order, each legend naming every variant, a bar per variant for each summary panel."""
    page, cards, expected = _open_view(served, chromium_browser, "Variant comparison (by variant)", "compare")
    assert page.get_by_text("No charts in this section").count() == 0
    for card, (title, metrics) in zip(cards, expected, strict=True):
        if card["traces"] and not any(t["lines"] for t in card["traces"]):  # a summary panel's bar card
            assert sum(t["points"] for t in card["traces"]) >= len(VARIANTS), (title, card)
            continue
        for variant in VARIANTS:
            for m in metrics:
                assert f"{variant} ({m})" in card["legend"], (title, card["legend"])
    _close_assistant(page)
    page.set_viewport_size({"width": 1600, "height": 1000})
    shot(page, "mlflow-compare-view.png", full_page=False)
    page.close()


def test_the_per_seed_view_draws_every_run(served, chromium_browser):
    page, cards, expected = _open_view(served, chromium_browser, "Training health (per seed)", "health")
    reward = cards[0]
    # one group per run: variant and seed (MLflow labels a group by its keys). The page also loads the
    # runs' parent run (to nest them), which has no variant tag: MLflow lists it as "Unassigned", no data.
    # A saved view cannot hide it (runsHidden/runsVisibilityMap with its id were tried: still listed)
    assert sorted(g for g in reward["legend"] if not g.startswith("Unassigned ")) == sorted(
        f"workbench.variant: {v}, workbench.seed: {s} (reward/mean)" for v in VARIANTS for s in SEEDS
    )
    steps = steps_logged(served, "reward/mean")
    assert sum(t["lines"] and t["points"] == steps for t in reward["traces"]) >= len(CHILD_RUNS)
    _close_assistant(page)
    page.set_viewport_size({"width": 1600, "height": 1000})
    shot(page, "mlflow-health-per-seed-view.png", full_page=False)
    page.close()


def test_ui_on_every_address_warns_names_the_machine_in_its_links_and_opens_the_first(served, tmp_path):
    """Issue #32: `--host 0.0.0.0` warns that MLflow has no authentication, every printed link names this
    machine's address (not 127.0.0.1), and `--open` hands the first line to the user's browser (the real
    `webbrowser` module, which runs $BROWSER; DISPLAY set, as on a desktop)."""
    from workbench.cli.main import _url_host

    served.wait_ready()  # the micro study's store is built and logged
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    port = _free_port()
    log = tmp_path / "ui.log"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {
        "DISPLAY": ":0",
        "BROWSER": str(browser),
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workbench.cli.main",
                "ui",
                STUDY,
                "--port",
                str(port),
                "--host",
                "0.0.0.0",
                "--open",
            ],
            cwd=served.home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while not opened.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
        output = log.read_text()
        assert opened.exists(), output
        first = output.splitlines()[0]
        base = f"http://{_url_host('0.0.0.0')}:{port}"
        assert first.startswith(f"{base}/#/experiments/") and "viewStateShareKey=workbench-health" in first, output
        assert opened.read_text().split() == [first]
        assert "anyone who can reach this machine can read and change the store" in output
        assert "no authentication" in output
        links = re.findall(r"https?://\S+", output)
        assert links and all(link.startswith(base) for link in links), links
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_ui_on_a_taken_port_exits_2_and_says_so_before_any_banner(tmp_path, monkeypatch):
    """mlflow server exits 0 when it cannot bind: `workbench ui` checks the port first (#31 class 7)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(app, ["ui", "--port", str(taken.getsockname()[1])])
    assert result.exit_code == 2, result.output
    assert "is already in use" in result.output and "MLflow UI" not in result.output
    assert not (tmp_path / "mlflow.db").exists()


def test_ui_of_an_unknown_study_exits_2_before_starting_a_server(tmp_path_factory, monkeypatch):
    monkeypatch.chdir(build_micro_study(tmp_path_factory))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(app, ["ui", "report-micr", "--port", str(_free_port())])
    assert result.exit_code == 2, result.output
    assert "no study 'report-micr'" in result.output and "did you mean 'report-micro'" in result.output


def test_ui_piped_to_head_keeps_serving_the_url_it_printed(served):
    """#53: `workbench ui | head -1` (the README's form for scripts) printed a URL and then died when head
    closed the pipe, taking the server with it. Here the test is head: it reads the first line from the
    pipe and closes it; the server keeps answering the URL, and `ui` keeps running."""
    served.wait_ready()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli.main", "ui", STUDY, "--port", str(port)],
        cwd=served.home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        first = proc.stdout.readline().strip()
        proc.stdout.close()  # as head does after its line: later writes meet a closed pipe
        assert first.startswith(f"http://127.0.0.1:{port}/#/experiments/"), first
        time.sleep(3)  # the links after the first line have hit the closed pipe by now
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            assert answer.status == 200
        assert proc.poll() is None  # `workbench ui` still runs
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_runs_page_shows_its_completions_as_a_table(served, chromium_browser):
    """Issue 51: ``completions.json`` (the last eval's and last train step's completions, logged with
    ``log_table``) opens in MLflow's artifact view as a table whose cells are the stored completions."""
    import json

    base = served.wait_ready()
    experiment_id, _ = _ids(served)
    client = MlflowClient(f"sqlite:///{served.home / 'mlflow.db'}")
    run = client.search_runs([experiment_id], "tags.`workbench.role` = 'run'", order_by=["attributes.start_time"])[0]
    table = json.loads(
        Path(
            client.download_artifacts(
                run.info.run_id,
                "completions.json",
                str(served.home / "dl"),
            )
        ).read_text()
    )
    texts = [row[table["columns"].index("text")] for row in table["data"]]
    page = new_page(chromium_browser, 1600, 1000)
    watch = PageWatch.attach(page)
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{run.info.run_id}/artifactPath/completions.json")
    header = page.get_by_role("columnheader", name="text")
    header.first.wait_for(timeout=60_000)
    assert page.get_by_role("columnheader").all_inner_texts() == table["columns"]
    assert table["columns"][:4] == ["split", "step", "prompt", "text"]  # what a reader looks at first, on the left
    first = next(t for t in texts if t.strip())
    assert page.get_by_role("cell").filter(has_text=first).count() >= 1  # the stored text, in a cell
    assert [e for e in watch.errors if "Failed to load resource" not in e] == []
    _close_assistant(page)
    shot(page, "mlflow-completions-table.png", full_page=False)
    page.close()
