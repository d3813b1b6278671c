"""workbench.results.reader on a real micro study: frames equal what MlflowClient returns, the
server path uses bulk requests, the cache reads a finished run once."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.viz.micro_study import SEEDS, STUDY, VARIANTS, build_micro_study, copy_store, uri_of
from workbench.results.reader import (
    HISTORY_COLUMNS,
    RUN_COLUMNS,
    StudyNotFound,
    StudyReader,
    load_study_frames,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    return build_micro_study(tmp_path_factory)


@pytest.fixture(scope="module")
def client(study_dir):
    return MlflowClient(uri_of(study_dir))


@pytest.fixture(scope="module")
def frames(study_dir):
    return load_study_frames(STUDY, uri_of(study_dir), cache_dir=False)


def child_runs(client):
    exp = client.get_experiment_by_name(STUDY)
    return client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")


def test_runs_frame_matches_mlflow(frames, client):
    history, runs = frames
    assert list(runs.columns[: len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    expected = {r.info.run_id: r for r in child_runs(client)}
    assert set(runs["run_id"]) == set(expected) and len(runs) == len(VARIANTS) * len(SEEDS)
    exp = client.get_experiment_by_name(STUDY)
    (parent,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    assert parent.info.run_id not in set(runs["run_id"])  # only workbench.role=run children
    assert sorted(runs["variant"].unique()) == sorted(VARIANTS)
    assert runs["seed"].dtype == "Int64" and set(runs["seed"]) == set(SEEDS)
    for row in runs.to_dict("records"):
        run = expected[row["run_id"]]
        assert row["status"] == run.info.status == "FINISHED"
        assert row["variant"] == run.data.tags["workbench.variant"]
        assert row["health"] == run.data.tags["workbench.health"]
        assert row["health_reasons"] == run.data.tags["workbench.health_reasons"]
        assert row["run_name"] == run.info.run_name
        assert row["end_time"].value // 1_000_000 == run.info.end_time
        assert row["learner.lr"] == pytest.approx(float(run.data.params["learner.lr"]))  # numeric param
        assert row["algorithm.estimator"] == run.data.params["algorithm.estimator"]
        assert row["rollout.eval_size"] is None or pd.isna(row["rollout.eval_size"])  # "None" -> missing
    # variants grouped, seeds ascending within a variant
    for _, g in runs.groupby("variant", sort=False):
        assert list(g["seed"]) == sorted(g["seed"])


def test_history_matches_get_metric_history(frames, client):
    history, runs = frames
    assert list(history.columns) == list(HISTORY_COLUMNS)
    assert history["step"].dtype == "int64" and history["value"].dtype == "float64"
    assert not history.duplicated(["run_id", "metric", "step"]).any()
    for run in child_runs(client):
        rid = run.info.run_id
        mine = history[history["run_id"] == rid]
        assert set(mine["metric"]) == set(run.data.metrics)
        assert (mine["variant"] == run.data.tags["workbench.variant"]).all()
        for key in run.data.metrics:
            ref = sorted((m.step, m.value) for m in client.get_metric_history(rid, key))
            got = mine[mine["metric"] == key].sort_values("step")
            assert list(got["step"]) == [s for s, _ in ref], key
            np.testing.assert_array_equal(got["value"].to_numpy(), [v for _, v in ref])
    steps = history[history["metric"] == "reward/mean"].groupby("run_id")["step"].apply(list)
    assert all(s == [0, 1, 2] for s in steps)


def test_metric_filter_is_a_subset_of_the_full_load(frames, study_dir):
    history, _ = frames
    only, runs = load_study_frames(STUDY, uri_of(study_dir), metrics=["eval/accuracy", "reward/mean"], cache_dir=False)
    assert set(only["metric"]) == {"eval/accuracy", "reward/mean"}
    full = history[history["metric"].isin(["eval/accuracy", "reward/mean"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(only.reset_index(drop=True), full)


def test_cache_reads_a_finished_run_once(study_dir, tmp_path, monkeypatch):
    reader = StudyReader(uri_of(study_dir), cache_dir=tmp_path / "cache")
    first = reader.load(STUDY)
    assert len(first.stats.fetched_runs) == 4 and first.stats.cached_runs == []
    assert len(list((tmp_path / "cache").rglob("*.parquet"))) == 4

    second = StudyReader(uri_of(study_dir), cache_dir=tmp_path / "cache")  # a later session
    calls = []
    real = second.backend.history
    monkeypatch.setattr(second.backend, "history", lambda ids, keys, **kw: calls.append(ids) or real(ids, keys, **kw))
    again = second.load(STUDY)
    assert calls == [] and again.stats.fetched_runs == [] and len(again.stats.cached_runs) == 4
    pd.testing.assert_frame_equal(again.history, first.history)


def test_cache_fetches_only_missing_metric_keys(study_dir, tmp_path):
    reader = StudyReader(uri_of(study_dir), cache_dir=tmp_path / "cache")
    calls = []
    real = reader.backend.history
    reader.backend.history = lambda ids, keys, **kw: calls.append(keys) or real(ids, keys, **kw)
    reader.load(STUDY, ["eval/accuracy"])
    reader.load(STUDY, ["eval/accuracy"])
    assert calls == [{"eval/accuracy"}]  # the second load is served by the cache
    both = reader.load(STUDY, ["eval/accuracy", "reward/mean"])
    assert len(calls) == 2 and set(both.history["metric"]) == {"eval/accuracy", "reward/mean"}
    assert reader.load(STUDY, ["reward/mean"]).stats.fetched_runs == []


def test_cache_rereads_changed_and_running_runs(study_dir, tmp_path):
    uri = copy_store(study_dir, tmp_path / "store")
    client = MlflowClient(uri)
    runs = child_runs(client)
    changed, running = runs[0].info.run_id, runs[1].info.run_id
    reader = StudyReader(uri, cache_dir=tmp_path / "cache")
    reader.load(STUDY)

    client.log_metric(changed, "test/extra", 1.5, step=7)
    client.set_terminated(changed, "FINISHED", end_time=runs[0].info.end_time + 1000)  # resumed and re-finished
    client.update_run(running, "RUNNING")
    again = reader.load(STUDY)
    assert set(again.stats.fetched_runs) == {changed, running}
    extra = again.history[again.history["metric"] == "test/extra"]
    assert extra[["run_id", "step", "value"]].values.tolist() == [[changed, 7, 1.5]]
    assert set(reader.load(STUDY).stats.fetched_runs) == {running}  # RUNNING: never cached


def test_nan_and_inf_points_round_trip(study_dir, tmp_path):
    uri = copy_store(study_dir, tmp_path / "store")
    from workbench.tracking.writer import RunTracker

    client = MlflowClient(uri)
    rid = child_runs(client)[0].info.run_id
    tracker = RunTracker(uri, STUDY, "x", {})
    tracker.client, tracker.run_id = client, rid
    tracker.log_metrics({"test/bad": math.nan}, step=0)
    tracker.log_metrics({"test/bad": math.inf}, step=1)
    tracker.log_metrics({"test/bad": -math.inf}, step=2)
    tracker.flush()
    h, _ = load_study_frames(STUDY, uri, metrics=["test/bad"], cache_dir=False)
    v = h.sort_values("step")["value"].to_numpy()
    assert math.isnan(v[0]) and v[1] == math.inf and v[2] == -math.inf
    reader = StudyReader(uri, cache_dir=tmp_path / "cache")  # and through the cache's parquet files, unchanged
    fresh = reader.load(STUDY, ["test/bad"])
    cached = reader.load(STUDY, ["test/bad"])
    assert cached.stats.fetched_runs == [] and len(cached.stats.cached_runs) == len(SEEDS) * len(VARIANTS)
    pd.testing.assert_frame_equal(cached.history, fresh.history)
    pd.testing.assert_frame_equal(fresh.history.reset_index(drop=True), h.reset_index(drop=True))


def test_server_path_uses_bulk_requests_and_matches_sql(study_dir, frames, monkeypatch):
    """The REST backend against MLflow's real request handlers (Flask test client, no server process)."""
    from mlflow.server import app, handlers
    from mlflow.tracking._tracking_service import utils as tracking_utils

    from workbench.results.readers.rest import RestRunReader

    monkeypatch.setattr(handlers, "_tracking_store", None)
    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)  # the handler sets it
    handlers._get_tracking_store(uri_of(study_dir), str(study_dir / "mlartifacts"))
    http = app.test_client()
    endpoints = []

    def transport(endpoint, params):
        endpoints.append((endpoint, params["metric_key"], len(params["run_id"])))
        response = http.get(endpoint, query_string=params)
        assert response.status_code == 200, response.data[:300]
        return response.get_json()

    reader = StudyReader(
        "http://mlflow.test", cache_dir=False, client=MlflowClient(uri_of(study_dir)), transport=transport
    )
    got = reader.load(STUDY)
    history, runs = frames
    pd.testing.assert_frame_equal(got.history, history)
    assert list(got.runs["run_id"]) == list(runs["run_id"])
    keys = set(history["metric"])
    assert len(endpoints) == len(keys) and all(n == 4 for _, _, n in endpoints)  # one request per key, all runs
    assert got.stats.requests == len(keys)

    # responses cut at the server's point limit: complete runs kept, the rest asked again, and a
    # run longer than the limit paged through get_metric_history
    monkeypatch.setattr(RestRunReader, "MAX_POINTS_PER_REQUEST", 2)
    endpoints.clear()
    small = reader.load(STUDY)
    pd.testing.assert_frame_equal(small.history, history)
    assert len(endpoints) > len(keys)


def test_unknown_study_names_the_studies(study_dir):
    with pytest.raises(StudyNotFound, match=r"no study 'report-micr'.*did you mean 'report-micro'"):
        load_study_frames("report-micr", uri_of(study_dir), cache_dir=False)
    with pytest.raises(StudyNotFound, match="no MLflow store"):
        load_study_frames(STUDY, f"sqlite:///{study_dir / 'missing.db'}", cache_dir=False)
    assert not (study_dir / "missing.db").exists()  # looking never creates a store


def test_health_reports_are_read_and_cached(study_dir, frames, tmp_path, client):
    _, runs = frames
    reader = StudyReader(uri_of(study_dir), cache_dir=tmp_path / "cache")
    reports = reader.health_reports(runs)
    assert set(reports) == set(runs["run_id"])
    for row in runs.to_dict("records"):
        rep = reports[row["run_id"]]
        assert rep["status"] == row["health"] and rep["reasons"] == row["health_reasons"]
    reader.read_artifact_text = lambda *a, **k: pytest.fail("cached health.json read again")
    assert reader.health_reports(runs) == reports


def test_numeric_fast_path_equals_the_plain_query_and_falls_back_on_mismatch(study_dir, frames):
    reader = StudyReader(uri_of(study_dir), cache_dir=False)
    backend = reader.backend
    ids = list(frames[1]["run_id"])
    from workbench.results.readers.frames import clean_points, split_runs

    fast = clean_points(backend.history(ids, None, frozen=True))
    plain = clean_points(backend.history(ids, None, frozen=False))
    assert isinstance(fast["run_id"].dtype, pd.CategoricalDtype)  # no 32-character string per point
    pd.testing.assert_frame_equal(fast.astype({"run_id": plain["run_id"].dtype}), plain)
    assert {r: f.to_dict("list") for r, f in split_runs(fast).items()} == {
        r: f.to_dict("list") for r, f in split_runs(plain).items()
    }

    real = backend._query

    def inflate(sql, params=None, expanding=()):  # a point appears between the two queries
        df = real(sql, params, expanding)
        if "COUNT(*)" in sql and len(df):
            df.loc[0, "n"] += 1
        return df

    backend._query = inflate
    assert backend._numeric_history(ids, "WHERE run_uuid IN :ids", {}, ()) is None
    pd.testing.assert_frame_equal(clean_points(backend.history(ids, None, frozen=True)), plain)  # the plain query


def test_a_step_logged_twice_keeps_the_latest_value(study_dir, tmp_path):
    uri = copy_store(study_dir, tmp_path / "store")
    client = MlflowClient(uri)
    rid = child_runs(client)[0].info.run_id
    client.log_metric(rid, "test/dup", 2.0, timestamp=2000, step=5)
    client.log_metric(rid, "test/dup", 1.0, timestamp=1000, step=5)  # logged later, but older timestamp
    client.log_metric(rid, "test/dup", 3.0, timestamp=3000, step=6)
    h, _ = load_study_frames(STUDY, uri, metrics=["test/dup"], cache_dir=False)
    assert h[["step", "value"]].values.tolist() == [[5, 2.0], [6, 3.0]]


def test_both_backends_answer_the_run_reader_protocol_alike(study_dir, frames, monkeypatch):
    """The contract of workbench.results.readers: the SQL and REST backends are both RunReaders and
    give the same runs, keys and points for the same store (REST via MLflow's real handlers)."""
    from mlflow.server import app, handlers
    from mlflow.tracking._tracking_service import utils as tracking_utils

    from workbench.results.readers import RestRunReader, RunReader, SqlRunReader, reader_for
    from workbench.results.readers.frames import clean_points

    monkeypatch.setattr(handlers, "_tracking_store", None)
    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)  # the handler sets it
    handlers._get_tracking_store(uri_of(study_dir), str(study_dir / "mlartifacts"))
    http = app.test_client()

    def transport(endpoint, params):
        response = http.get(endpoint, query_string=params)
        assert response.status_code == 200, response.data[:300]
        return response.get_json()

    sql = reader_for(uri_of(study_dir))
    rest = reader_for("http://mlflow.test", client=MlflowClient(uri_of(study_dir)), transport=transport)
    assert isinstance(sql, SqlRunReader) and isinstance(rest, RestRunReader)
    assert isinstance(sql, RunReader) and isinstance(rest, RunReader)
    with pytest.raises(ValueError, match="cannot read tracking URI 'file:///tmp/x'"):
        reader_for("file:///tmp/x")

    eid = sql.experiment_id(STUDY)
    assert rest.experiment_id(STUDY) == eid and sql.experiment_id("no-such-study") is None
    assert set(sql.experiment_names()) == set(rest.experiment_names())
    assert sql.parent_run_id(eid) == rest.parent_run_id(eid) is not None
    (rows_s, tags_s, params_s), (rows_r, tags_r, params_r) = sql.runs(eid, "run"), rest.runs(eid, "run")
    ids = sorted(rows_s["run_id"])
    assert sorted(rows_r["run_id"]) == ids == sorted(frames[1]["run_id"])
    assert params_s == params_r
    assert all(tags_s[r]["workbench.variant"] == tags_r[r]["workbench.variant"] for r in ids)
    assert sql.run_info(ids[0]) == rest.run_info(ids[0])
    assert sql.metric_keys(ids) == rest.metric_keys(ids)
    points_s, points_r = clean_points(sql.history(ids, None)), clean_points(rest.history(ids, None))
    assert len(points_s) == len(frames[0]) > 0
    pd.testing.assert_frame_equal(points_s, points_r, check_dtype=False)


def test_per_problem_results_are_read_for_every_run_and_agree_with_eval_accuracy(study_dir, frames):
    """Every run logged eval/problems.csv.gz: one row per eval step and problem, the same problem ids
    in every run, each step's mean of `correct` is the logged eval/accuracy (a mean of 16 0/1 values
    either way: equal to 16 x eps), and eval/n_problems says 16."""
    history, runs = frames
    problems = StudyReader(uri_of(study_dir), cache_dir=False).problem_results(runs)
    assert list(problems.columns) == ["run_id", "step", "problem_id", "correct", "length", "truncated"]
    assert (
        set(problems["run_id"]) == set(runs["run_id"])
        and not problems.duplicated(["run_id", "step", "problem_id"]).any()
    )
    ids = problems.groupby("run_id")["problem_id"].apply(frozenset)
    assert ids.nunique() == 1 and len(ids.iloc[0]) == 16
    accuracy = problems.groupby(["run_id", "step"])["correct"].mean()
    logged = history[history["metric"] == "eval/accuracy"].set_index(["run_id", "step"])["value"]
    assert accuracy.index.equals(logged.sort_index().index)
    assert np.allclose(accuracy.to_numpy(), logged.sort_index().to_numpy(), rtol=0, atol=16 * 2.3e-16)
    n = history[history["metric"] == "eval/n_problems"]
    assert len(n) == len(logged) and (n["value"] == 16).all()
    assert problems["length"].between(1, 8).all() and problems["truncated"].isin([0, 1]).all()


def test_a_run_without_or_with_a_broken_table_has_no_rows_and_no_error(study_dir, tmp_path):
    (tmp_path / "bad" / "eval").mkdir(parents=True)
    (tmp_path / "bad" / "eval" / "problems.csv.gz").write_bytes(b"not gzip")
    (tmp_path / "none").mkdir()
    runs = pd.DataFrame(
        {"run_id": ["bad", "none"], "artifact_uri": [f"file://{tmp_path / 'bad'}", f"file://{tmp_path / 'none'}"]}
    )
    problems = StudyReader(uri_of(study_dir), cache_dir=False).problem_results(runs)
    assert problems.empty and list(problems.columns)[:3] == ["run_id", "step", "problem_id"]
    assert problems.attrs["unreadable"] == ["bad"]
