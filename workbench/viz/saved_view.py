"""A dashboard spec as an MLflow saved view: pure spec → experiment-page state, no I/O.

MLflow 3.17 keeps saved views server-side as experiment tags ``mlflow.sharedViewState.<id>``
whose value is the envelope ``{"name", "createdAt": ms, "updatedAt": ms, "state"}``; ``state``
is the experiment page's state as a JSON string, or ``"deflate;" + base64(zlib(json))``, and the
whole value must fit in one tag (20,000 characters). The link
``#/experiments/<id>/runs?viewStateShareKey=<id>&compareRunsMode=CHART&workflowType=machine_learning``
opens it on the chart tab of the training layout. What the page reads from the state (read in
MLflow's frontend: ``savedViewEnvelope.ts``, ``ExperimentPageUIState.tsx``,
``runs-charts.types.ts``):
* search facets (``searchFilter``) and UI state (``groupBy``, ``useGroupedValuesInCharts``,
  ``runsHiddenMode``, ``selectedColumns``, ``compareRunSections``, ``compareRunCharts``,
  ``isAccordionReordered``, ``globalLineChartConfig``, ``hideEmptyCharts``); missing keys take
  the page's defaults;
* every logged metric that no chart card names as its ``metricKey`` is added back as a new
  chart (and its section) when the page loads, so metrics the spec does not show are listed as
  cards with ``"deleted": true``;
* a section's ``columns`` (default 3) and ``cardHeight`` (default 360 px) size its chart grid;
* sections are re-sorted alphabetically unless ``isAccordionReordered`` is true, and a new chart
  is inserted alphabetically unless its section ``isReordered``: both are set, so sections and
  charts keep the spec's order.

Panel kinds map to chart cards: ``curve`` → a line chart of its metrics (x = step), ``summary``
→ a bar chart of the last logged value of the metric each summary reads (MLflow shows no
bootstrap CIs: the HTML dashboard has those), ``health_matrix`` → a line chart of
``health/status`` (0 ok, 1 warn, 2 fail), ``mismatch_record`` → no card (its data is the runs'
``mismatch.json`` artifact, which MLflow charts cannot read; the view's notes say so). Grouped
views draw each group's average with a min–max band (MLflow's ``aggregateFunction: average``);
the per-seed view draws every run (a group per variant, grid point and seed).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.compare.summary import summary_name
from workbench.metrics.names import HEALTH_STATUS

from .spec import DashboardSpec

__all__ = [
    "MAX_TAG_CHARS",
    "RUN_FILTER",
    "VIEW_TAG_PREFIX",
    "SavedView",
    "card_grid",
    "compile_view",
    "decode_envelope",
    "encode_envelope",
    "group_by_keys",
    "search_views",
    "view_id",
    "view_link",
    "views_for_specs",
]

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
MAX_TAG_CHARS = 20_000  # MLflow's limit on one tag value (the envelope, state included)
DEFLATE_PREFIX = "deflate;"
RUN_FILTER = "tags.`workbench.role` = 'run'"  # the study's runs, not its parent run or search trials
PER_SEED_SUFFIX = "-per-seed"
SEED_KEY = {"mode": "tag", "groupByData": "workbench.seed"}
# MLflow tag keys and URL query values both take these characters unescaped.
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class SavedView:
    """One saved view: its stable id (the tag suffix and the link's share key), name and state."""

    view_id: str
    name: str
    state: dict[str, Any]
    spec_name: str
    grouped: bool
    notes: tuple[str, ...] = field(default=())  # what the MLflow chart cannot show as the spec asks

    @property
    def tag_key(self) -> str:
        return VIEW_TAG_PREFIX + self.view_id


def view_id(spec_name: str, *, grouped: bool = True) -> str:
    """Stable id of a spec's view: writing it again replaces it (``workbench-health``,
    ``workbench-health-per-seed``)."""
    base = "workbench-" + (_ID_UNSAFE.sub("-", spec_name).strip("-") or "dashboard")
    return base if grouped else base + PER_SEED_SUFFIX


def view_link(experiment_id: str, share_key: str, base_url: str = "") -> str:
    """The UI link that opens a saved view on the chart tab of the training ("machine learning")
    layout; without ``base_url`` a fragment (``#/experiments/...``) that works wherever the UI is served."""
    prefix = f"{base_url.rstrip('/')}/" if base_url else ""
    return (
        f"{prefix}#/experiments/{experiment_id}/runs?viewStateShareKey={share_key}"
        f"&compareRunsMode=CHART&workflowType=machine_learning"
    )


def group_by_keys(grid_params: Sequence[str] = ()) -> list[dict[str, str]]:
    """Group by the run's variant, and in a study with a grid also by each grid parameter (a
    variant at two learning rates is two arms, not four seeds of one)."""
    return [
        {"mode": "tag", "groupByData": "workbench.variant"},
        *({"mode": "param", "groupByData": p} for p in grid_params),
    ]


CARD_HEIGHT_PX = 480  # MLflow's default 360 leaves room for 2 legend lines: a card's title and legend got cut


def card_grid(cols: int) -> dict[str, int]:
    """The section's grid: the spec's columns (MLflow's default is 3, too narrow for the card
    titles "length/correct_mean vs length/incorrect_mean") and cards tall enough for a legend
    line per variant and metric (the legend is drawn below the chart)."""
    return {"columns": max(1, min(cols, 3)), "cardHeight": CARD_HEIGHT_PX}


def _line_card(
    uuid: str, section: str, metrics: Sequence[str], title: str, *, log_y: bool = False, deleted: bool = False
) -> dict[str, Any]:
    # The fields of RunsChartsLineCardConfig (runs-charts.types.ts) with their defaults, except:
    # not generated (the page must not regenerate it), several metrics, our title and y scale.
    return {
        "type": "LINE",
        "uuid": uuid,
        "metricSectionId": section,
        "isGenerated": False,
        "deleted": deleted,
        "runsCountToCompare": 100,
        "displayName": title,
        "metricKey": metrics[0],
        "selectedMetricKeys": list(metrics),
        "lineSmoothness": 0,
        "xAxisKey": "step",
        "xAxisScaleType": "linear",
        "scaleType": "log" if log_y else "linear",
        "selectedXAxisMetricKey": "",
        "range": {},
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "ignoreOutliers": False,
        "useGlobalXaxisKey": True,
        "useGlobalLineSmoothing": True,
    }


def _bar_card(uuid: str, section: str, metric: str, title: str) -> dict[str, Any]:
    return {
        "type": "BAR",
        "uuid": uuid,
        "metricSectionId": section,
        "isGenerated": False,
        "deleted": False,
        "runsCountToCompare": 100,
        "displayName": title,
        "metricKey": metric,
    }


def _hidden_card(uuid: str, section: str, metric: str) -> dict[str, Any]:
    """A metric the spec does not chart: listed, deleted, so the page does not add it back."""
    return {
        "type": "LINE",
        "uuid": uuid,
        "metricSectionId": section,
        "isGenerated": False,
        "deleted": True,
        "metricKey": metric,
        "selectedMetricKeys": [metric],
        "xAxisKey": "step",
    }


def _summary_source(metric: str) -> str:
    """The logged metric a summary-panel entry reads (``final_eval_accuracy`` → ``eval/accuracy``)."""
    from workbench.compare import resolve_summary  # deferred: scipy (drawing needs no statistics)

    name = summary_name(metric)
    if name.startswith("final:"):
        return name.removeprefix("final:")
    return resolve_summary(name).reads[0]


def compile_view(
    spec: DashboardSpec, *, grouped: bool = True, known_metrics: Iterable[str] = (), grid_params: Sequence[str] = ()
) -> SavedView:
    """The saved view of ``spec``: its panels as chart cards in order, in one section named after
    the spec, over the study's runs (``workbench.role=run``), grouped by variant (and grid point);
    with ``grouped`` false, by variant, grid point and seed (the per-seed view: one line per run). ``known_metrics``: metric
    names the study logs or may log; those not charted are listed as deleted cards."""
    vid = view_id(spec.name, grouped=grouped)
    title = spec.title or spec.name
    section = f"{vid}-section"
    cards: list[dict[str, Any]] = []
    notes: list[str] = []
    for i, panel in enumerate(spec.panels):
        p = panel.resolved(spec.defaults)
        name = p.title or ", ".join(p.metrics) or p.kind.replace("_", " ")
        uuid = f"{vid}-{i}"
        if p.kind == "curve":
            if p.x != "step":
                notes.append(f"panel {name!r}: x = {p.x} is drawn against step in MLflow")
            cards.append(_line_card(uuid, section, p.metrics, name, log_y=p.log_y))
        elif p.kind == "summary":
            for j, m in enumerate(p.metrics):
                source = _summary_source(m)
                cards.append(_bar_card(f"{uuid}-{j}", section, source, f"Last {source} (not {summary_name(m)})"))
            notes.append(f"panel {name!r}: MLflow draws the last logged value (no bootstrap CI)")
        elif p.kind == "health_matrix":  # the per-step worst health status is what MLflow can draw
            cards.append(_line_card(uuid, section, [HEALTH_STATUS], f"{name}: health/status (0 ok, 1 warn, 2 fail)"))
        else:  # mismatch_record: a run artifact (mismatch.json), which MLflow's charts cannot read
            notes.append(
                f"panel {name!r}: the mismatch record is a run artifact, not a metric: no MLflow chart "
                "(the HTML dashboard draws it)"
            )
    charted = {c["metricKey"] for c in cards}
    for k, m in enumerate(sorted(set(known_metrics) - charted)):
        cards.append(_hidden_card(f"{vid}-hidden-{k}", section, m))
    columns = [
        "tags.`workbench.variant`",
        "tags.`workbench.seed`",
        "tags.`workbench.health`",
        "metrics.`eval/accuracy`",
        "metrics.`reward/mean`",
    ]
    state = {
        "searchFilter": RUN_FILTER,
        "runsHiddenMode": "SHOW_ALL",
        "selectedColumns": columns,
        # per seed: grouped too, by variant, grid point and seed (one run per group). Ungrouped, the
        # page folds the study's runs under their parent run, whose expansion a saved view cannot
        # hold, and charts only the (metric-less) parent: "No charts in this section".
        "groupBy": {
            "aggregateFunction": "average",
            "groupByKeys": group_by_keys(grid_params) + ([] if grouped else [SEED_KEY]),
        },
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,  # optional panels (kl/ref, IS weights) vanish when never logged
        "compareRunSections": [
            {
                "uuid": section,
                "name": title,
                "display": True,
                "isReordered": True,
                "deleted": False,
                "isGenerated": False,
                **card_grid(spec.layout.cols),
            }
        ],
        "compareRunCharts": cards,
        "isAccordionReordered": True,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
    }
    name = f"{title} (by variant)" if grouped else f"{title} (per seed)"
    return SavedView(vid, name, state, spec.name, grouped, tuple(notes))


def views_for_specs(
    specs: Sequence[DashboardSpec],
    *,
    known_metrics: Iterable[str] = (),
    grid_params: Sequence[str] = (),
    per_seed: str = "health",
) -> list[SavedView]:
    """Every spec's grouped view, the ``health`` spec first, then the others in the given order;
    plus the per-seed view of the spec named ``per_seed`` (when there is one)."""
    known = list(known_metrics)
    ordered = sorted(specs, key=lambda s: s.name != "health")  # stable: health first, others as given
    views = [compile_view(s, known_metrics=known, grid_params=grid_params) for s in ordered]
    views += [
        compile_view(s, grouped=False, known_metrics=known, grid_params=grid_params)
        for s in ordered
        if s.name == per_seed
    ]
    return views


def search_views(
    search: str, history_metrics: Sequence[str], trial_metrics: Sequence[str], *, known_metrics: Iterable[str] = ()
) -> list[SavedView]:
    """The two saved views of an Optuna search ``search`` (its ``workbench.search`` tag, e.g.
    ``sanity_search:search``) in the search's experiment:

    * *optimisation history*: the search's own MLflow run (``workbench.role=search``) charting
      ``history_metrics`` (``trial_value``, ``best_value``) against step = trial number;
    * *trials*: the trials' runs (``workbench.role=trial``) grouped by trial (the mean over its
      seeds with a min–max band), charting ``trial_metrics`` (the objectives' step metrics)
      against the learner step; ``known_metrics`` not charted are listed as deleted cards.
    """
    base = "workbench-search-" + (_ID_UNSAFE.sub("-", search).strip("-") or "search")
    quoted = search.replace("'", "\\'")
    out = []
    for vid, role, metrics, title, grouped in (
        (base, "search", history_metrics, f"search {search}: optimisation history (x = trial number)", False),
        (f"{base}-trials", "trial", trial_metrics, f"search {search}: trials (x = learner step)", True),
    ):
        section = f"{vid}-section"
        cards = [_line_card(f"{vid}-{i}", section, [m], m) for i, m in enumerate(metrics)]
        hidden = sorted(set(known_metrics) - set(metrics)) if grouped else []
        cards += [_hidden_card(f"{vid}-hidden-{k}", section, m) for k, m in enumerate(hidden)]
        columns = (
            [
                "tags.`workbench.trial`",
                "tags.`workbench.trial_state`",
                "tags.`workbench.seed`",
                "tags.`workbench.search_params`",
                "tags.`workbench.prune_reason`",
                *(f"metrics.`{m}`" for m in metrics),
            ]
            if grouped
            else [f"metrics.`{m}`" for m in metrics]
        )
        state: dict[str, Any] = {
            "searchFilter": f"tags.`workbench.role` = '{role}' and tags.`workbench.search` = '{quoted}'",
            "runsHiddenMode": "SHOW_ALL",
            "selectedColumns": columns,
            "useGroupedValuesInCharts": grouped,
            "hideEmptyCharts": True,
            "compareRunSections": [
                {
                    "uuid": section,
                    "name": title,
                    "display": True,
                    "isReordered": True,
                    "deleted": False,
                    "isGenerated": False,
                }
            ],
            "compareRunCharts": cards,
            "isAccordionReordered": True,
            "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
        }
        if grouped:  # see compile_view: ungrouped, child runs fold under their parent; the search run
            # itself is a top-level run and charts as itself (no groupBy: the page's default)
            state["groupBy"] = {
                "aggregateFunction": "average",
                "groupByKeys": [{"mode": "tag", "groupByData": "workbench.trial"}],
            }
        out.append(SavedView(vid, title, state, f"search:{search}", grouped))
    return out


def encode_envelope(view: SavedView, created_at_ms: int, updated_at_ms: int | None = None) -> str:
    """The tag value: the envelope with the state as plain JSON when it fits, else deflated.

    Raises ``ValueError`` when even the deflated state exceeds :data:`MAX_TAG_CHARS`."""
    state = json.dumps(view.state, separators=(",", ":"))

    def envelope(text: str) -> str:
        return json.dumps(
            {
                "name": view.name,
                "createdAt": created_at_ms,
                "updatedAt": updated_at_ms if updated_at_ms is not None else created_at_ms,
                "state": text,
            },
            separators=(",", ":"),
        )

    value = envelope(state)
    if len(value) > MAX_TAG_CHARS:
        # zlib format (header + deflate + adler32): what the page's pako.inflate reads
        value = envelope(DEFLATE_PREFIX + base64.b64encode(zlib.compress(state.encode(), 9)).decode("ascii"))
    if len(value) > MAX_TAG_CHARS:
        raise ValueError(
            f"saved view {view.view_id!r}: {len(value)} characters even deflated "
            f"(MLflow's limit is {MAX_TAG_CHARS}): split the spec {view.spec_name!r}"
        )
    return value


def decode_envelope(value: str) -> tuple[str, int, dict[str, Any]]:
    """``(name, createdAt, state)`` of a tag value written by MLflow or :func:`encode_envelope`."""
    data = json.loads(value)
    state = data["state"]
    if state.startswith(DEFLATE_PREFIX):
        state = zlib.decompress(base64.b64decode(state[len(DEFLATE_PREFIX) :])).decode()
    return data["name"], int(data["createdAt"]), json.loads(state)
