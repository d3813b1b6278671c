"""The health dashboard's mismatch record panel (issue #33) on a real MLflow store: two real micro runs, one
recording its sampler/learner mismatch every step (``health.mismatch_record_every: 1``, 3 steps: records
at steps 0, 1 and 2), one with the record off. The panel's figure holds the artifact's exact counts at the
first and the last recorded step, its worst-token table is the artifact's last record, and the run
without a record is named with a note, never dropped; the reader caches the artifact like health.json."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.compare.mismatch_panel import NO_RECORD
from workbench.models.tokenizer import token_decoder
from workbench.results.reader import StudyReader
from workbench.tracking.artifacts import MISMATCH_ARTIFACT
from workbench.viz import DashboardData, find_spec, load_spec, render_dashboard

pytestmark = pytest.mark.slow

STUDY = "mismatch-panel"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(root, tracking uri)`` of the study, run once with `workbench run` as a user would."""
    from workbench.cli.main import app

    root = tmp_path_factory.mktemp("mismatch-study")
    study = {
        "name": STUDY,
        "base": micro_run_config(health={"mismatch_record_every": 1}),
        "variants": {"recorded": {}, "unrecorded": {"health": {"mismatch_record_every": 0}}},
        "seeds": [0],
    }
    (root / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        result = CliRunner().invoke(app, ["run", "study.yaml", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return root, f"sqlite:///{root / 'mlflow.db'}"


@pytest.fixture(scope="module")
def loaded(store, tmp_path_factory):
    """The study's frames, its runs by variant, and the records the reader returns (cache in a temp dir)."""
    _, uri = store
    reader = StudyReader(uri, cache_dir=tmp_path_factory.mktemp("cache"))
    frames = reader.load(STUDY)
    by_variant = dict(zip(frames.runs["variant"], frames.runs["run_id"], strict=True))
    return frames, by_variant, reader.mismatch_records(frames.runs)


def artifact_path(runs, run_id: str) -> Path:
    uri = runs.set_index("run_id").at[run_id, "artifact_uri"]
    return Path(unquote(urlparse(uri).path)) / MISMATCH_ARTIFACT


def test_the_reader_returns_the_artifact_and_only_for_the_run_that_recorded(loaded):
    frames, by_variant, records = loaded
    logged = json.loads(artifact_path(frames.runs, by_variant["recorded"]).read_text())
    assert [r["step"] for r in logged] == [0, 1, 2]  # every step of the 3, as configured
    assert records.records == {by_variant["recorded"]: logged} and records.unreadable == {}
    assert not artifact_path(frames.runs, by_variant["unrecorded"]).exists()


def test_the_panel_holds_the_artifacts_counts_and_worst_tokens_and_names_the_run_without(loaded):
    frames, by_variant, records = loaded
    rec, off = by_variant["recorded"], by_variant["unrecorded"]
    logged = json.loads(artifact_path(frames.runs, rec).read_text())
    decode = token_decoder("tiny", None)  # the micro runs use the built-in tiny model
    data = DashboardData(frames.history, frames.runs, mismatch_records=records, token_decoders={rec: decode})
    spec = load_spec(find_spec("health"))
    rendered = render_dashboard(spec, data)

    # the histogram: the first (step 0, dotted) and the last (step 2, solid) recorded steps, not step 1
    lines = {t.line.dash: t for t in rendered.figure.data if t.meta == "mismatch-histogram"}
    assert set(lines) == {"dot", "solid"}
    for dash, record in (("dot", logged[0]), ("solid", logged[-1])):
        line = lines[dash]
        assert [int(c[0]) for c in line.customdata] == record["counts"]  # the exact counts, bin by bin
        assert list(line.x) == list(range(len(record["counts"])))
        assert list(line.y) == [c / record["tokens"] for c in record["counts"]]
        assert f"step {record['step']} " in line.hovertemplate
        # every response token of the step in some bin: 4 prompts x 4 samples, 1 to 8 new tokens each
        assert sum(record["counts"]) == record["tokens"] and 16 <= record["tokens"] <= 128

    # the run without a record: named in the panel, in the warnings and below the table
    label = data.labels[off]
    note = f"{label}: {NO_RECORD}"
    assert any(note == a.text for a in rendered.figure.layout.annotations), rendered.figure.layout.annotations
    assert any(NO_RECORD in w and label in w for w in rendered.warnings), rendered.warnings
    (section,) = rendered.sections
    assert html.escape(note) in section.body_html

    # the worst-token table: the last record's tokens, in its order, with the text the tiny tokenizer gives
    rows = table_rows(section.body_html)
    last = logged[-1]
    assert len(rows) == len(last["worst_tokens"]) == 10
    for k, (row, w) in enumerate(zip(rows, last["worst_tokens"], strict=True), start=1):
        assert row == [
            data.labels[rec],
            "2",
            str(k),
            str(w["sequence"]),
            str(w["position"]),
            html.escape(repr(decode(w["token_id"]))),
            str(w["token_id"]),
            f"{w['learner_logp']:.4g}",
            f"{w['sampler_logp']:.4g}",
            f"{w['log_ratio']:.4g}",
        ]
    assert abs(last["worst_tokens"][0]["log_ratio"]) == max(abs(w["log_ratio"]) for w in last["worst_tokens"])


def test_the_dashboard_command_shows_the_note_and_the_table(store, tmp_path, monkeypatch):
    from workbench.cli.main import app

    root, _ = store
    monkeypatch.chdir(root)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    page = tmp_path / "health.html"
    result = CliRunner().invoke(
        app, ["dashboard", STUDY, "--spec", "health", "--no-log", "--out", str(page)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "worst tokens at the last recorded step" in text
    assert html.escape(f"unrecorded/seed=0: {NO_RECORD}") in text
    assert "Traceback" not in result.output


def test_a_terminal_runs_record_is_read_from_the_cache_the_second_time(store, tmp_path):
    """The health.json convention: a finished run's artifact is read from the store once."""
    _, uri = store
    first = StudyReader(uri, cache_dir=tmp_path)
    runs = first.load_runs(STUDY)[1]
    records = first.mismatch_records(runs).records
    (rec,) = records
    path = artifact_path(runs, rec)
    moved = path.with_suffix(".away")
    path.rename(moved)  # the store no longer has it: only the cache can answer
    try:
        assert StudyReader(uri, cache_dir=tmp_path).mismatch_records(runs).records == records
        assert StudyReader(uri, cache_dir=False).mismatch_records(runs).records == {}
    finally:
        moved.rename(path)


def table_rows(body: str) -> list[list[str]]:
    """The cells of each body row of the first HTML table in ``body`` (as written by df_table_html)."""
    tbody = re.search(r"<tbody>(.*?)</tbody>", body, flags=re.S).group(1)
    return [re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", tbody)]
