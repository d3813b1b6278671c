"""Shared arms (#37): a run whose run_key FINISHED in another study of the store is copied, not computed.

Real micro runs and a real MLflow store: study A runs arm ``base`` (seeds 0, 1); study B shares it
(as ``shared``) and adds ``other``, run with ``--until-decided --parallel 2 --export``: ``shared`` is
copied from A (its history, per-problem table and health report the same as A's, tagged
``workbench.reused_from``, counted at B's look), ``other`` is computed although another experiment holds
FAILED, KILLED and RUNNING runs of its run_key (whole records) and a FINISHED one without metrics; running B
again adds nothing; ``compare`` and ``export`` of B hold the copies; ``--no-reuse`` computes the shared run
again (the same values where the computation decides them). About 50 s on the busy 2-core machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.execution_helpers import child_runs, fast_run_config, install_empty_mlflow_db
from workbench.cli.main import app
from workbench.execution.reuse import REUSED_FROM_TAG, Source, artifact_files, copy_run
from workbench.results.export import read_export
from workbench.results.reader import StudyReader
from workbench.study import expand, load_study
from workbench.tracking.artifacts import PROBLEMS_ARTIFACT

pytestmark = pytest.mark.slow

# rewards that vary for the never-correct micro model (-length/8), so the look has something to compare
LENGTH_REWARD = {"shaping": [{"name": "overlong_soft", "weight": 1.0, "params": {"max_length": 8, "cache_length": 8}}]}
OTHER = {"learner": {"lr": 3.0e-4}}
DETERMINISTIC = ("reward/mean", "loss/policy", "entropy/mean", "length/mean", "eval/accuracy")  # not timings


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def write(path, name, variants, seeds, **extra):
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "base": fast_run_config(3, reward=LENGTH_REWARD),
                "variants": variants,
                "seeds": list(seeds),
                **extra,
            },
            sort_keys=False,
        )
    )
    return path


def points(uri, run_id) -> pd.DataFrame:
    frame = StudyReader(uri, cache_dir=False).backend.history([run_id], None)
    return (
        frame.drop(columns="run_id")
        .astype({"metric": str})
        .sort_values(["metric", "step", "timestamp", "value"])
        .reset_index(drop=True)
    )


def plant_unusable_sources(client, uri: str, spec, whole_run) -> None:
    """Runs of ``spec``'s run_key in another experiment that must never be copied: FAILED, KILLED and RUNNING
    ones with a whole record (``whole_run``'s params, metrics and artifacts), and a FINISHED one with no metric
    points."""
    eid = client.create_experiment("elsewhere")
    source = Source(whole_run, "reuse-a", artifact_files(client, whole_run.info.run_id))
    for status in ("FAILED", "KILLED", "RUNNING"):
        planted = copy_run(client, uri, source, spec, study="elsewhere", experiment_id=eid, parent_run_id=None)
        client.update_run(planted, status=status)
    tags = {"workbench.role": "run", "workbench.run_key": spec.run_key, "workbench.study": "elsewhere"}
    empty = client.create_run(eid, tags=tags, run_name="other/seed=0").info.run_id
    client.log_param(empty, "learner.lr", "0.0003")
    client.set_terminated(empty, "FINISHED")


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.setenv("COLUMNS", "200")
        uri = install_empty_mlflow_db(root)
        a = write(root / "a.yaml", "reuse-a", {"base": {}}, [0, 1])
        ran = invoke("run", a, "--quiet")
        assert ran.exit_code == 0, ran.output
        b = write(
            root / "b.yaml",
            "reuse-b",
            {"shared": {}, "other": OTHER},
            [0],
            compare={"baseline": "shared", "metrics": ["final_reward"], "sequential": {"looks": [2, 3]}},
        )
        client = MlflowClient(uri)
        other = next(s for s in expand(load_study(b)) if s.variant == "other" and s.seed == 0)
        plant_unusable_sources(client, uri, other, by_label(child_runs(client, "reuse-a"))["base/seed=0"])
        planned = invoke("plan", b, "--format", "json")
        assert planned.exit_code == 0, planned.output
        first = invoke("run", b, "--until-decided", "--max-seeds", 2, "--parallel", 2, "--export", root / "export-b")
        assert first.exit_code == 0, first.output
        again = invoke("run", b, "--until-decided", "--max-seeds", 2, "--quiet")
        assert again.exit_code == 0, again.output
        yield {
            "root": root,
            "uri": uri,
            "client": client,
            "first": first.output,
            "again": again.output,
            "plan": json.loads(planned.stdout[planned.stdout.index("{") :]),
            "a": child_runs(client, "reuse-a"),
            "b": child_runs(client, "reuse-b"),
        }


def by_label(runs) -> dict:
    return {r.info.run_name: r for r in runs}


def test_the_shared_arm_is_copied_from_the_other_study_and_the_other_arm_computed(studies):
    a, b, uri = by_label(studies["a"]), by_label(studies["b"]), studies["uri"]
    assert sorted(b) == ["other/seed=0", "other/seed=1", "shared/seed=0", "shared/seed=1"]
    assert all(r.info.status == "FINISHED" for r in b.values())
    for seed in (0, 1):
        copy, source = b[f"shared/seed={seed}"], a[f"base/seed={seed}"]
        assert copy.data.tags[REUSED_FROM_TAG] == f"reuse-a/{source.info.run_id}"
        assert copy.data.tags["workbench.run_key"] == source.data.tags["workbench.run_key"]
        assert (copy.data.tags["workbench.study"], copy.data.tags["workbench.variant"]) == ("reuse-b", "shared")
        assert copy.data.tags["workbench.arm"] == "shared" and copy.data.tags["workbench.health"]
        assert copy.data.tags["mlflow.parentRunId"] != source.data.tags["mlflow.parentRunId"]
        assert copy.data.params == source.data.params
        pd.testing.assert_frame_equal(points(uri, copy.info.run_id), points(uri, source.info.run_id))  # not computed
        reader = StudyReader(uri, cache_dir=False)
        rollouts = [f for f in artifact_files(MlflowClient(uri), source.info.run_id) if f.startswith("rollouts/")]
        assert "rollouts/manifest.json" in rollouts and "rollouts/completions-00000.parquet" in rollouts
        for name in (
            PROBLEMS_ARTIFACT,
            "health.json",
            "config.yaml",
            "samples.json",
            *rollouts,
        ):  # every completion too
            assert reader.read_artifact_bytes(
                copy.info.run_id, copy.info.artifact_uri, name
            ) == reader.read_artifact_bytes(source.info.run_id, source.info.artifact_uri, name), name
        assert f"REUSED shared/seed={seed} from study reuse-a (run {source.info.run_id[:8]})" in studies["first"]
    for seed in (0, 1):
        assert REUSED_FROM_TAG not in b[f"other/seed={seed}"].data.tags  # computed here
    assert studies["first"].count("REUSED") >= 2 and "from study reuse-a (run" in studies["first"]  # the summary


def test_plan_says_which_runs_run_would_copy(studies):
    """`workbench plan` shows, before anything runs, the run another study FINISHED (to be copied) and
    the one whose only sources there are failed, killed, running or incomplete (status new)."""
    statuses = {r["label"]: r["status"] for r in studies["plan"]["runs"]}
    assert statuses == {"shared/seed=0": "reuse (reuse-a)", "other/seed=0": "new"}


def test_failed_killed_running_or_incomplete_runs_are_never_reused(studies):
    first = studies["first"]
    assert "warning: not reusing other/seed=0 from study elsewhere (run " in first
    assert "it has no metric points; computing it" in first
    assert first.count("not reusing") == 1  # one line, for the FINISHED one; the others are no candidates
    other = by_label(studies["b"])["other/seed=0"]
    assert other.data.metrics and REUSED_FROM_TAG not in other.data.tags
    exp = studies["client"].get_experiment_by_name("elsewhere")
    planted = studies["client"].search_runs([exp.experiment_id])
    assert sorted(r.info.status for r in planted) == ["FAILED", "FINISHED", "KILLED", "RUNNING"]  # left as they were


def test_the_look_counts_reused_runs_and_a_rerun_adds_nothing(studies):
    client = studies["client"]
    exp = client.get_experiment_by_name("reuse-b")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")
    record = json.loads(
        Path(
            client.download_artifacts(
                parent.info.run_id,
                "sequential.json",
                str(studies["root"] / "dl"),
            )
        ).read_text()
    )
    decided = [d for d in record["looks"][0]["decisions"] if d["arm"] == "other"]
    assert decided and all(d["n_seeds"] == 2 for d in decided)  # against the two reused baseline runs
    assert len(child_runs(client, "reuse-b")) == 4  # the rerun: nothing duplicated
    assert studies["again"].count("SKIPPED") == 4 and "REUSED shared" not in studies["again"]


def test_compare_and_export_of_the_second_study_hold_the_reused_runs(studies, monkeypatch):
    monkeypatch.chdir(studies["root"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    report = invoke("compare", studies["root"] / "b.yaml", "--no-log", "--format", "md")
    assert report.exit_code == 0, report.output
    assert "other" in report.output and "shared" in report.output
    reader = StudyReader(studies["uri"], cache_dir=False)
    history = reader.load("reuse-b", ["reward/mean"]).history
    shared = history[history["variant"] == "shared"].sort_values(["seed", "step"])["value"].to_numpy()
    source = reader.load("reuse-a", ["reward/mean"]).history.sort_values(["seed", "step"])["value"].to_numpy()
    assert (shared == source).all()  # compare reads the copies' histories: A's numbers
    export = read_export(studies["root"] / "export-b")
    copied = [r for r in export.runs if r.role == "run" and REUSED_FROM_TAG in r.tags]
    assert sorted(r.run_name for r in copied) == ["shared/seed=0", "shared/seed=1"]
    assert export.manifest["runs"] == 4


def test_no_reuse_computes_the_shared_run_again(studies, monkeypatch):
    monkeypatch.chdir(studies["root"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    c = write(studies["root"] / "c.yaml", "reuse-c", {"mine": {}}, [0])
    result = invoke("run", c, "--no-reuse", "--quiet")
    assert result.exit_code == 0, result.output
    (run,) = child_runs(studies["client"], "reuse-c")
    source = by_label(studies["a"])["base/seed=0"]
    assert run.data.tags["workbench.run_key"] == source.data.tags["workbench.run_key"]
    assert REUSED_FROM_TAG not in run.data.tags and "REUSED" not in result.output
    computed, original = (points(studies["uri"], r.info.run_id) for r in (run, source))
    assert not computed.equals(original)  # its own points (timings, timestamps) ...
    for key in DETERMINISTIC:  # ... with the same values where the computation decides them
        assert (
            computed[computed["metric"] == key]["value"].tolist()
            == original[original["metric"] == key]["value"].tolist()
        ), key
