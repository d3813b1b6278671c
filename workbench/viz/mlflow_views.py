"""The MLflow UI as the study's dashboard: saved views, descriptions and colours on its experiment.

Written when a study starts (so a running study is browsable) and refreshed by
``workbench dashboard``:
* one saved view per dashboard spec (``dashboards/*.yaml`` and ``./dashboards``), grouped by
  variant, plus a per-seed view of ``health`` (:mod:`workbench.viz.saved_view` compiles them);
* the experiment's description (``mlflow.note.content``): the study's question, its variants,
  the view links and how to compare;
* on each run, a one-line health summary (``mlflow.note.content``) and its variant's colour
  (``mlflow.runColor``), the same colour as in the HTML reports.

A description or note someone wrote by hand is left alone: only text that carries
:data:`NOTE_MARKER` (or none at all) is replaced. Everything goes through ``MlflowClient``, so
it works on a local store and on a tracking server alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.metrics import CATALOGUE
from workbench.viz.saved_view import (
    VIEW_TAG_PREFIX,
    decode_envelope,
    encode_envelope,
    search_views,
    view_link,
    views_for_specs,
)
from workbench.viz.spec_loader import list_specs, load_spec
from workbench.viz.style import variant_colors

__all__ = [
    "LAYOUT_TAG",
    "NOTE_MARKER",
    "StudyLayout",
    "ViewLink",
    "check_study_views",
    "experiment_note",
    "layout_of",
    "list_views",
    "load_view_specs",
    "publish_search_views",
    "publish_study_views",
    "read_layout",
    "refresh_run_notes",
    "run_note",
    "study_question",
]

NOTE_TAG = "mlflow.note.content"
COLOR_TAG = "mlflow.runColor"
KIND_TAG, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"  # not "genai_development"
LAYOUT_TAG = "workbench.layout"  # what `workbench dashboard` needs to rewrite the views without the YAML
ORDER_TAG = "workbench.views"  # our view ids, in the order the UI links are printed
NOTE_MARKER = "rl-workbench"  # notes carrying it are ours to rewrite
RUN_NOTE_PREFIX = "rl-workbench health: "


@dataclass
class StudyLayout:
    """What the experiment's views and notes are written from (kept as an experiment tag)."""

    study: str
    question: str = ""
    variants: list[str] = field(default_factory=list)
    baseline: str | None = None
    grid_params: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ViewLink:
    view_id: str
    name: str
    experiment_id: str

    def url(self, base_url: str = "") -> str:
        return view_link(self.experiment_id, self.view_id, base_url)


def study_question(study: Any) -> str:
    """The question a study asks: its ``description:``, else the leading comment of its file."""
    if getattr(study, "description", "").strip():
        return " ".join(study.description.split())
    source = getattr(study, "source", None)
    if not source or not Path(source).is_file():
        return ""
    lines = []
    for line in Path(source).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(x for x in lines if x)


def layout_of(study: Any) -> StudyLayout:
    """A :class:`workbench.study.Study` as the layout its views are written from."""
    grid = [*study.grid, *getattr(study, "zip", {})]
    return StudyLayout(
        study=study.name,
        question=study_question(study),
        variants=list(study.variants),
        baseline=(study.compare or {}).get("baseline"),
        grid_params=grid,
        seeds=list(study.seeds),
    )


def read_layout(client: Any, experiment_id: str) -> StudyLayout | None:
    """The layout stored on the experiment when the study started (None for older experiments)."""
    raw = client.get_experiment(experiment_id).tags.get(LAYOUT_TAG)
    if not raw:
        return None
    try:
        return StudyLayout(**json.loads(raw))
    except (ValueError, TypeError):
        return None


def load_view_specs() -> list[Any]:
    """Every dashboard spec (project's and ``./dashboards``), validated: a broken spec raises
    ``SpecError`` naming file, line and field before anything is written."""

    return [load_spec(path) for path in list_specs().values()]


def variant_colours(layout: StudyLayout, run_variants: Iterable[str] = ()) -> dict[str, str]:
    """``variant -> #RRGGBB`` by the variant's position in the study (baseline grey), as the
    HTML reports colour them; variants only seen on runs come after, in name order."""

    order = [*layout.variants, *sorted(set(run_variants) - set(layout.variants))]
    return variant_colors(order, layout.baseline)


def _child_runs(client: Any, experiment_id: str) -> list[Any]:
    return client.search_runs([experiment_id], "tags.`workbench.role` = 'run'", max_results=50000)


def _known_metrics(runs: Sequence[Any]) -> set[str]:
    """The canonical metrics and whatever the study's runs logged so far."""

    return {m.name for m in CATALOGUE} | {k for r in runs for k in r.data.metrics}


def _is_ours(text: str | None) -> bool:
    return not (text or "").strip() or NOTE_MARKER in text


def run_note(tags: dict[str, str], status: str) -> str:
    """One line: ``rl-workbench health: warn (length_blowup@12) · FINISHED``."""
    health = tags.get("workbench.health")
    if not health:
        return f"{RUN_NOTE_PREFIX}not judged yet · {status}"
    reasons = (tags.get("workbench.health_reasons") or "").strip()
    stopped = (tags.get("workbench.stop_reason") or "").strip()
    text = f"{RUN_NOTE_PREFIX}{health}" + (f" ({reasons})" if reasons else " (no rule fired)")
    return text + f" · {status}" + (f" · stopped: {stopped}" if stopped else "")


def refresh_run_notes(client: Any, runs: Sequence[Any], colours: dict[str, str]) -> int:
    """Set each run's colour and health line where they differ; returns how many runs changed."""
    changed = 0
    for run in runs:
        tags = run.data.tags
        want: dict[str, str] = {}
        colour = colours.get(tags.get("workbench.variant", ""))
        if colour and tags.get(COLOR_TAG) != colour:
            want[COLOR_TAG] = colour
        note = run_note(tags, run.info.status)
        if tags.get(NOTE_TAG) != note and _is_ours(tags.get(NOTE_TAG)):
            want[NOTE_TAG] = note
        for key, value in want.items():
            client.set_tag(run.info.run_id, key, value)
        changed += bool(want)
    return changed


def seeds_text(layout_seeds: Sequence[int], tracked: Iterable[int] = ()) -> str:
    """``seeds 0, 1, 2``; with only some of the study's seeds tracked (``run --only seed=0``),
    ``seeds 0 so far (the study has 0, 1, 2)``; empty when no seed is known."""
    have = sorted(set(tracked)) or list(layout_seeds)
    if not have:
        return ""
    text = f"seeds {', '.join(map(str, have))}"
    if layout_seeds and set(have) != set(layout_seeds):
        text += f" so far (the study has {', '.join(map(str, layout_seeds))})"
    return text


def experiment_note(layout: StudyLayout, links: Sequence[ViewLink], tracked_seeds: Iterable[int] = ()) -> str:
    """The experiment's description (markdown): question, variants, views, how to compare.
    ``tracked_seeds``: the seeds the experiment has runs of (or is starting now)."""
    lines = [f"**Study `{layout.study}`**" + (f": {layout.question}" if layout.question else ""), ""]
    seeds = seeds_text(layout.seeds, tracked_seeds)
    if layout.variants:
        base = f" (baseline: `{layout.baseline}`)" if layout.baseline else ""
        lines.append(
            f"Variants{base}: "
            + ", ".join(f"`{v}`" for v in layout.variants)
            + (f"; grid over {', '.join(f'`{p}`' for p in layout.grid_params)}" if layout.grid_params else "")
            + (f"; {seeds}" if seeds else "")
            + "."
        )
        lines.append("")
    lines.append("Saved views (charts of the study's runs, `workbench.role = run`):")
    lines += [f"- [{link.name}]({link.url()})" for link in links]
    lines += [
        "",
        "How to compare: the grouped views draw each variant's mean over seeds with a min–max band; "
        "the per-seed view draws every run in its variant's colour. For statistics "
        f"(paired differences with 95% CIs, a ranked verdict): `workbench compare {layout.study}`; "
        f"health rules per run: `workbench health {layout.study}`.",
        "",
        f"_Written by {NOTE_MARKER}; refreshed by `workbench dashboard {layout.study}`._",
    ]
    return "\n".join(lines)


def check_study_views(layout: StudyLayout, specs: Sequence[Any], metrics: Iterable[str]) -> None:
    """Raise ``ValueError`` (one line) if :func:`publish_study_views` would fail on a study whose runs log
    ``metrics``: a saved view, the layout or the description over MLflow's limits. Writes nothing: an
    import calls it before its first write, with the metrics it is about to log."""
    from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH  # deferred: mlflow

    known = {m.name for m in CATALOGUE} | set(metrics)
    views = views_for_specs(specs, known_metrics=known, grid_params=layout.grid_params)
    for view in views:
        encode_envelope(view, 0, 0)  # raises when even the deflated view is over the limit
    links = [ViewLink(v.view_id, v.name, "0" * 19) for v in views]
    for tag, value in (
        (ORDER_TAG, json.dumps([v.view_id for v in views])),
        (LAYOUT_TAG, json.dumps(asdict(layout))),
        (NOTE_TAG, experiment_note(layout, links, layout.seeds)),
    ):
        if len(value) > MAX_EXPERIMENT_TAG_VAL_LENGTH:
            raise ValueError(
                f"the study's {tag} would be {len(value):,} characters, over MLflow's {MAX_EXPERIMENT_TAG_VAL_LENGTH:,}"
            )


def publish_study_views(
    client: Any,
    experiment_id: str,
    layout: StudyLayout,
    specs: Sequence[Any],
    *,
    now_ms: int | None = None,
    starting_seeds: Iterable[int] = (),
) -> list[ViewLink]:
    """Write (or rewrite, under the same ids) every spec's saved view, the experiment's
    description and layout, and each existing run's colour and health line. Returns the links.
    ``starting_seeds``: seeds about to run (``run --only seed=0``: just 0), named in the description
    with those the experiment already has runs of."""
    runs = _child_runs(client, experiment_id)
    views = views_for_specs(specs, known_metrics=_known_metrics(runs), grid_params=layout.grid_params)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    tags = client.get_experiment(experiment_id).tags
    encoded = {v.view_id: encode_envelope(v, _created_at(tags.get(v.tag_key), now), now) for v in views}
    for view in views:  # everything encoded (and size-checked) before the first write
        client.set_experiment_tag(experiment_id, view.tag_key, encoded[view.view_id])
    client.set_experiment_tag(experiment_id, ORDER_TAG, json.dumps([v.view_id for v in views]))
    client.set_experiment_tag(experiment_id, LAYOUT_TAG, json.dumps(asdict(layout)))
    if KIND_TAG not in tags:  # MLflow 3's model-training layout where the UI goes by the experiment's kind
        client.set_experiment_tag(experiment_id, KIND_TAG, TRAINING_KIND)
    links = [ViewLink(v.view_id, v.name, experiment_id) for v in views]
    if _is_ours(tags.get(NOTE_TAG)):
        tracked = {
            *starting_seeds,
            *(
                int(r.data.tags["workbench.seed"])
                for r in runs
                if str(r.data.tags.get("workbench.seed", "")).lstrip("-").isdigit()
            ),
        }
        client.set_experiment_tag(experiment_id, NOTE_TAG, experiment_note(layout, links, tracked))
    refresh_run_notes(client, runs, variant_colours(layout, (r.data.tags.get("workbench.variant", "") for r in runs)))
    return links


def _created_at(existing: str | None, now: int) -> int:
    """Rewriting a view keeps its creation time."""
    if existing:
        try:
            return decode_envelope(existing)[1]
        except (ValueError, KeyError, TypeError):
            pass
    return now


def list_views(experiment_id: str, tags: dict[str, str]) -> list[ViewLink]:
    """The experiment's saved views: ours in the order written, then any saved in the UI by hand."""
    names: dict[str, tuple[str, int]] = {}
    for key, value in tags.items():
        if key.startswith(VIEW_TAG_PREFIX):
            try:
                name, created, _ = decode_envelope(value)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not an envelope this version reads; the UI shows it by its own rules
            names[key[len(VIEW_TAG_PREFIX) :]] = (name, created)
    try:
        ours = [v for v in json.loads(tags.get(ORDER_TAG) or "[]") if v in names]
    except ValueError:
        ours = []
    others = sorted((v for v in names if v not in ours), key=lambda v: (names[v][1], v))
    return [ViewLink(v, names[v][0], experiment_id) for v in [*ours, *others]]


def publish_search_views(
    client: Any,
    experiment_id: str,
    search: str,
    history_metrics: Sequence[str],
    trial_metrics: Sequence[str],
    *,
    hidden: Iterable[str] = (),
    now_ms: int | None = None,
) -> list[ViewLink]:
    """Write (or rewrite, under the same ids) the saved views of an Optuna search
    (:func:`workbench.viz.saved_view.search_views`) on its experiment; returns their links.
    ``hidden``: metrics the trials' runs (and their parent) may log that the views do not chart
    (the catalogue is always among them). The study's own views, order and description are left
    as they are: the search views are listed after them by :func:`list_views`."""
    views = search_views(
        search, history_metrics, trial_metrics, known_metrics={m.name for m in CATALOGUE} | set(hidden)
    )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    tags = client.get_experiment(experiment_id).tags
    encoded = {v.view_id: encode_envelope(v, _created_at(tags.get(v.tag_key), now), now) for v in views}
    for view in views:
        client.set_experiment_tag(experiment_id, view.tag_key, encoded[view.view_id])
    return [ViewLink(v.view_id, v.name, experiment_id) for v in views]
