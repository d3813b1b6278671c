"""`workbench export` and `workbench import workbench` (issue #37): a real micro study (tests/viz/micro_study.py)
exported, loaded into a fresh store, and read back the same: `compare --format md` prints the same table, every
run has the same params, tags, metric history, per-problem table and health report; `workbench run` on the loaded
store runs nothing; loading again adds nothing; exporting the loaded store gives the same bytes; bad exports are
refused with one line and nothing written; `workbench run --export` keeps the export up to date."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.viz.micro_study import STUDY, build_micro_study, uri_of
from workbench.cli.main import app
from workbench.results.export import FILES, MANIFEST, RUNS, read_export
from workbench.results.reader import StudyReader
from workbench.results.rollouts import read_rollouts

pytestmark = pytest.mark.slow


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def private_copy(study_dir: Path, dest: Path) -> Path:
    """The micro study's directory copied whole, its store pointing at its own artifacts (other tests
    of the session change the shared one: a compare logs reports, a recheck re-tags runs)."""
    shutil.copytree(study_dir, dest, ignore=shutil.ignore_patterns(".workbench", "checkpoints"))
    with sqlite3.connect(dest / "mlflow.db") as con:
        old, new = (d.resolve().as_uri() for d in (study_dir, dest))
        con.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
        con.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, new))
    return dest


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(study dir with the original store, the export directory, the fresh store's URI)."""
    root = tmp_path_factory.mktemp("export")
    study_dir = private_copy(build_micro_study(tmp_path_factory), root / "study")
    export_dir, fresh = root / "export", root / "fresh" / "mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(study_dir)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        wrote = invoke("export", "study.yaml", "--to", export_dir)
        assert wrote.exit_code == 0, wrote.output
        assert f"exported study {STUDY!r}" in wrote.stdout and " 4 runs, " in wrote.stdout
        loaded = invoke("import", "workbench", export_dir, "--tracking-uri", f"sqlite:///{fresh}")
        assert loaded.exit_code == 0, loaded.output
        assert "4 run(s) loaded" in loaded.stdout and "0 already there" in loaded.stdout
    return study_dir, export_dir, f"sqlite:///{fresh}"


@pytest.fixture
def in_study(stores, monkeypatch):
    monkeypatch.chdir(stores[0])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return stores


def test_loaded_store_prints_the_same_compare_table(in_study):
    study_dir, _, fresh = in_study
    tables = {}
    for uri in (uri_of(study_dir), fresh):
        for fmt in ("md", "json"):
            result = invoke("compare", "study.yaml", "--no-log", "--format", fmt, "--tracking-uri", uri)
            assert result.exit_code == 0, result.output
            tables[uri, fmt] = result.stdout
    for fmt in ("md", "json"):
        assert tables[uri_of(study_dir), fmt] == tables[fresh, fmt]
    assert "dr_grpo" in tables[fresh, "md"]


def by_key(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (with a run_id column) keyed by run_key instead, rows in a canonical order."""
    keyed = frame.assign(run_id=frame["run_id"].map(dict(zip(runs["run_id"], runs["run_key"], strict=True))))
    return keyed.sort_values(list(keyed.columns), kind="stable", ignore_index=True)


def test_every_run_reads_back_the_same(in_study):
    study_dir, _, fresh = in_study
    original, loaded = (StudyReader(uri, cache_dir=False) for uri in (uri_of(study_dir), fresh))
    a, b = original.load(STUDY), loaded.load(STUDY)
    assert len(a.runs) == len(b.runs) == 4
    drop = ["run_id", "artifact_uri"]
    pd.testing.assert_frame_equal(a.runs.drop(columns=drop), b.runs.drop(columns=drop))
    assert len(a.history) > 100
    pd.testing.assert_frame_equal(by_key(a.history, a.runs), by_key(b.history, b.runs))
    problems_a, problems_b = original.problem_results(a.runs), loaded.problem_results(b.runs)
    assert len(problems_a) > 0
    pd.testing.assert_frame_equal(by_key(problems_a, a.runs), by_key(problems_b, b.runs))
    rollouts_a, rollouts_b = read_rollouts(original, a.runs), read_rollouts(loaded, b.runs)  # every completion
    assert len(rollouts_a) > 0 and rollouts_a.attrs["manifests"]
    pd.testing.assert_frame_equal(by_key(rollouts_a, a.runs), by_key(rollouts_b, b.runs))
    health = [
        {k: r for k, r in zip(f.runs["run_key"], reader.health_reports(f.runs).values(), strict=True)}
        for reader, f in ((original, a), (loaded, b))
    ]
    assert health[0] == health[1] and all(health[0].values())
    for role in ("run", "study"):  # raw tags and params, MLflow's own tags aside
        raw = []
        for reader in (original, loaded):
            rows, tags, params = reader.backend.runs(reader.experiment_id(STUDY), role)
            raw.append(
                sorted(
                    (
                        row.status,
                        row.start_time,
                        row.end_time,
                        row.run_name,
                        {k: v for k, v in tags[row.run_id].items() if not k.startswith("mlflow.")},
                        params.get(row.run_id, {}),
                    )
                    for row in rows.itertuples()
                )
            )
        assert raw[0] == raw[1] and raw[0]


def test_exporting_the_loaded_store_gives_the_same_bytes(in_study, tmp_path):
    _, export_dir, fresh = in_study
    again = invoke("export", STUDY, "--to", tmp_path / "again", "--tracking-uri", fresh)
    assert again.exit_code == 0, again.output
    for name in (*FILES, MANIFEST):
        assert (tmp_path / "again" / name).read_bytes() == (export_dir / name).read_bytes(), name
    rewrite = invoke("export", STUDY, "--to", tmp_path / "again", "--tracking-uri", fresh)
    assert "(0 file(s) changed)" in rewrite.stdout  # nothing rewritten: a clean git diff


def test_an_export_without_rollouts_still_reproduces_the_compare_table(in_study, tmp_path):
    """--no-rollouts drops every stored completion (most of an export's bytes) and nothing compare reads."""
    study_dir, export_dir, _ = in_study
    lean, store = tmp_path / "lean", f"sqlite:///{tmp_path / 'lean-store' / 'mlflow.db'}"
    wrote = invoke("export", "study.yaml", "--to", lean, "--no-rollouts")
    assert wrote.exit_code == 0, wrote.output
    paths = pd.read_parquet(lean / "artifacts.parquet")["path"]
    full_paths = pd.read_parquet(export_dir / "artifacts.parquet")["path"]
    assert full_paths.str.startswith("rollouts/").any() and not paths.str.startswith("rollouts/").any()
    assert set(paths) == set(full_paths[~full_paths.str.startswith("rollouts/")])  # everything else kept
    assert json.loads((lean / MANIFEST).read_text())["rollouts"] == "omitted"
    assert "rollouts" not in json.loads((export_dir / MANIFEST).read_text())  # a full export's bytes unchanged
    assert (lean / "artifacts.parquet").stat().st_size < (export_dir / "artifacts.parquet").stat().st_size
    loaded = invoke("import", "workbench", lean, "--tracking-uri", store)
    assert loaded.exit_code == 0, loaded.output
    tables = [
        invoke("compare", "study.yaml", "--no-log", "--format", "md", "--tracking-uri", uri).stdout
        for uri in (uri_of(study_dir), store)
    ]
    assert tables[0] == tables[1] and "dr_grpo" in tables[1]
    reader = StudyReader(store, cache_dir=False)
    assert len(read_rollouts(reader, reader.load(STUDY).runs)) == 0


def test_loading_again_adds_nothing(in_study):
    _, export_dir, fresh = in_study
    db = fresh.removeprefix("sqlite:///")
    count = "SELECT COUNT(*) FROM runs"
    before = sqlite3.connect(db).execute(count).fetchone()[0]
    again = invoke("import", "workbench", export_dir, "--tracking-uri", fresh)
    assert again.exit_code == 0, again.output
    assert "0 run(s) loaded" in again.stdout and "4 already there (skipped)" in again.stdout
    assert sqlite3.connect(db).execute(count).fetchone()[0] == before


def test_run_on_the_loaded_store_runs_nothing_new(in_study, tmp_path, monkeypatch):
    """The study resumes on the loaded store: every run of the study file is skipped."""
    _, _, fresh = in_study
    db = tmp_path / "mlflow.db"
    shutil.copy(fresh.removeprefix("sqlite:///"), db)  # artifacts stay where the load wrote them
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    result = invoke("run", "study.yaml", "--quiet")
    assert result.exit_code == 0, result.output
    statuses = (
        sqlite3.connect(db)
        .execute(
            "SELECT r.status, COUNT(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "AND t.key = 'workbench.role' AND t.value = 'run' GROUP BY r.status"
        )
        .fetchall()
    )
    assert statuses == [("FINISHED", 4)]
    assert result.output.count("SKIPPED") >= 1


# ---- bad input: one line, exit 2, nothing written ----------------------------------------------


def broken_copy(export_dir: Path, tmp_path: Path, how: str) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(export_dir, out)
    manifest = json.loads((out / MANIFEST).read_text())
    if how == "missing file":
        (out / "metrics.parquet").unlink()
    elif how == "checksum":
        table = pq.read_table(out / RUNS)
        pq.write_table(
            table.set_column(table.schema.get_field_index("status"), "status", pa.array(["FAILED"] * table.num_rows)),
            out / RUNS,
        )
    elif how == "version":
        manifest["format_version"] = 99
    elif how == "not an export":
        (out / MANIFEST).unlink()
    elif how == "dangling run":
        table = pq.read_table(out / "problems.parquet")
        pq.write_table(
            table.set_column(0, "run", pa.array([99] * table.num_rows, pa.int32())), out / "problems.parquet"
        )
        manifest["files"]["problems.parquet"]["sha256"] = hashlib.sha256(
            (out / "problems.parquet").read_bytes()
        ).hexdigest()
    if how != "not an export":
        (out / MANIFEST).write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize(
    ("how", "names"),
    [
        ("not an export", "is not a workbench study export: no manifest.json"),
        ("missing file", "metrics.parquet: missing"),
        ("checksum", "runs.parquet: checksum mismatch"),
        ("version", "manifest.json: format version 99 is not one this workbench reads"),
        ("dangling run", "problems.parquet: row 0 names run 99"),
    ],
)
def test_a_bad_export_is_one_line_and_writes_nothing(in_study, tmp_path, how, names):
    _, export_dir, _ = in_study
    broken = broken_copy(export_dir, tmp_path, how)
    target = tmp_path / "target" / "mlflow.db"
    result = invoke("import", "workbench", broken, "--tracking-uri", f"sqlite:///{target}")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], result.output
    assert not target.exists() and not target.parent.exists()  # no store created, nothing written
    with pytest.raises(ValueError, match=names.split(":")[0]):
        read_export(broken)


def test_options_of_framework_imports_are_refused_for_an_export(in_study, tmp_path):
    _, export_dir, _ = in_study
    result = invoke(
        "import", "workbench", export_dir, "--study", "other", "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"
    )
    assert result.exit_code == 2 and "--study: not for a workbench export" in result.output
    assert not (tmp_path / "x.db").exists()


def test_an_experiment_that_is_not_a_study_is_refused_before_writing(in_study, tmp_path):
    from mlflow import MlflowClient

    _, export_dir, _ = in_study
    uri = f"sqlite:///{tmp_path / 'other.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(STUDY)
    client.create_run(exp)  # someone else's run, no workbench.role
    result = invoke("import", "workbench", export_dir, "--tracking-uri", uri)
    assert result.exit_code == 2 and "is not a workbench study" in result.output
    assert len(client.search_runs([exp])) == 1


# ---- workbench run --export ----------------------------------------------------------------------


def test_run_with_export_writes_it_after_each_run_and_at_the_end(in_study, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = invoke("run", "study.yaml", "--quiet", "--only", "seed=0", "--export", tmp_path / "export")
    assert result.exit_code == 0, result.output
    assert "exports this session: 3" in result.output  # one per run (2) and one at the end
    export = read_export(tmp_path / "export")
    assert sorted(r.tags["workbench.variant"] for r in export.runs if r.role == "run") == ["dr_grpo", "grpo"]
    parent = next(r for r in export.runs if r.role == "study")
    assert parent.status == "FINISHED" and "study.yaml" in parent.artifacts


def test_run_with_export_can_leave_the_rollouts_out(in_study, tmp_path, monkeypatch):
    """`run --export DIR --no-export-rollouts` writes what `export --no-rollouts` writes: no completions."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    lean = tmp_path / "lean"
    result = invoke("run", "study.yaml", "--quiet", "--only", "seed=0", "--export", lean, "--no-export-rollouts")
    assert result.exit_code == 0, result.output
    assert json.loads((lean / MANIFEST).read_text())["rollouts"] == "omitted"
    assert not pd.read_parquet(lean / "artifacts.parquet")["path"].str.startswith("rollouts/").any()
    full = invoke("export", "study.yaml", "--to", tmp_path / "full")  # the same store still has them
    assert full.exit_code == 0, full.output
    assert pd.read_parquet(tmp_path / "full" / "artifacts.parquet")["path"].str.startswith("rollouts/").any()


def test_leaving_rollouts_out_of_no_export_is_refused(in_study, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = invoke("run", "study.yaml", "--quiet", "--no-export-rollouts")
    assert result.exit_code == 2 and "--no-export-rollouts needs --export DIR" in result.output
    assert not (tmp_path / "mlflow.db").exists()  # nothing written


# ---- the exports committed with the findings (docs/findings/data/) ------------------------------

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for p in (ROOT / "docs" / "findings" / "data").glob(f"*/{MANIFEST}"))
MAX_COMMITTED_BYTES = 20 * 1024 * 1024  # issue #37: run data kept with the findings, 20 MB in all


def test_committed_exports_are_whole_and_within_budget():
    assert COMMITTED, "docs/findings/data/ holds the real studies' exports"
    for directory in COMMITTED:
        export = read_export(directory)  # every checksum, column and reference checked
        assert export.manifest["runs"] == sum(r.role == "run" for r in export.runs) > 0
    size = sum(p.stat().st_size for p in (ROOT / "docs" / "findings" / "data").rglob("*") if p.is_file())
    assert size <= MAX_COMMITTED_BYTES


def _reloads():
    """(study, export, runs) of every committed export (#52: all of them; #37 had priming and
    precision-mismatch, a sequential design), ~1 min each."""
    for directory in COMMITTED:
        runs = json.loads((directory / MANIFEST).read_text())["runs"]
        yield pytest.param(directory.name.replace("-", "_"), directory.name, runs, id=directory.name)


@pytest.mark.parametrize(("study", "export", "runs"), list(_reloads()))
def test_a_committed_export_loads_into_a_fresh_store_and_reproduces_its_table(
    tmp_path, monkeypatch, study, export, runs
):
    """The acceptance test of issue #37: `compare --format md` on the loaded store prints, byte for byte, the
    table `compare` printed on the study's original store (committed beside the export as compare.md). #52: the
    page re-derived from the export has no row whose printed interval contradicts its verdict, in its tables or
    its headlines (tests/compare/verdict_intervals.py)."""
    from tests.compare.verdict_intervals import interval_cells, page_contradictions, table_rows

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    directory = ROOT / "docs" / "findings" / "data" / export
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    loaded = invoke("import", "workbench", directory, "--tracking-uri", uri)
    assert loaded.exit_code == 0, loaded.output
    assert f"{runs} run(s) loaded" in loaded.stdout
    table = invoke("compare", ROOT / "studies" / f"{study}.yaml", "--no-log", "--format", "md", "--tracking-uri", uri)
    assert table.exit_code == 0, table.output
    assert len(table_rows(table.stdout)) == interval_cells(table.stdout)  # every interval read, then checked
    assert page_contradictions(table.stdout) == []
    assert table.stdout == (directory / "compare.md").read_text()
