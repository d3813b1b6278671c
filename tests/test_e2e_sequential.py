"""End to end: `workbench run --until-decided` on the micro model: rounds of seeds, resumable without
duplicates, the design recorded and reported by `compare`, seeds added by hand flagged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app

pytestmark = pytest.mark.slow


def write_study(path, seeds=(0,)):
    path.write_text(
        yaml.safe_dump(
            {
                "name": "seq",
                "base": micro_run_config(),
                "seeds": list(seeds),
                "variants": {"grpo": {}, "fast": {"learner": {"lr": 3e-4}}},
                "compare": {"baseline": "grpo", "sequential": {"looks": [2, 3]}},
            }
        )
    )
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def child_runs(workdir):
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("seq")
    return client, exp, client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")


def test_until_decided_runs_rounds_resumes_and_compare_reports_the_design(workdir):
    study = write_study(workdir / "study.yaml")
    first = invoke("run", study, "--until-decided", "--max-seeds", "3", "--quiet")
    assert first.exit_code == 0, first.output
    assert "sequential design: looks at 2/3 seeds" in first.output
    assert "look 1 of 2: 2 seeds" in first.output
    client, exp, runs = child_runs(workdir)
    seeds = sorted({int(r.data.tags["workbench.seed"]) for r in runs})
    looks = 1 if "look 2 of 2" not in first.output else 2
    assert seeds == [0, 1, 2][: 1 + looks]  # declared seed 0, then 1, 2: max + 1, ...
    parent = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")[0]
    record = json.loads(
        Path(
            client.download_artifacts(
                parent.info.run_id,
                "sequential.json",
                str(workdir / "dl"),
            )
        ).read_text()
    )
    assert record["design"] == {"looks": [2, 3], "alpha": 0.05, "spending": "obrien_fleming"}
    assert record["family"] == "primary"  # the looks decide in compare's study-wide family of primaries (#52)
    assert [lk["seeds"] for lk in record["looks"]] == [2, 3][:looks]
    assert parent.data.tags["workbench.sequential"].startswith("looks 2")

    again = invoke("run", study, "--until-decided", "--max-seeds", "3", "--quiet")  # resume: nothing new
    assert again.exit_code == 0, again.output
    assert len(child_runs(workdir)[2]) == len(runs)
    assert "SKIPPED" in again.output

    changed = invoke("run", study, "--until-decided", "--max-seeds", "2", "--quiet")
    assert changed.exit_code == 2 and "would change the sequential design after looking" in changed.output

    report = invoke("compare", study, "--format", "md")
    assert report.exit_code == 0, report.output
    assert "sequential design: looks 2" in report.output and "of 2/3" in report.output
    # its verdicts at the level of the design's last look taken, not at 0.05 (a study stopped at look 3 of 3
    # with O'Brien-Fleming spending once read "better" at p_holm 0.039 where the design said inconclusive)
    from workbench.compare.sequential import Design

    design = Design(looks=(2, 3), spending="obrien_fleming", alpha=0.05)
    taken = 2 if "looks 2,3 of" in report.output else 1
    level = float(design.look_alpha[taken - 1])
    assert f"the table's re-test on all seeds, at its last look's level α = {level:.3g}" in report.output, report.output
    # one verdict per question (#52): the design's, at the look it was taken, equal to the record's last status
    from tests.test_sequential_verdicts import page_rows, recorded_statuses

    rows = page_rows(report.output)
    for (metric, arm), decided in recorded_statuses(record).items():
        taken_at = max(
            lk["look"] for lk in record["looks"] for d in lk["decisions"] if (d["metric"], d["arm"]) == (metric, arm)
        )
        assert rows[metric, arm]["status"] == decided, rows[metric, arm]
        assert f"at look {taken_at} of 2" in rows[metric, arm]["verdict"], rows[metric, arm]
    assert "re-test on all seeds (not the design's decision)" in report.output
    assert "seeds added after looking" not in report.output

    # seed 3 added by hand, after the looks: flagged
    write_study(study, seeds=(0, 1, 2, 3))
    assert invoke("run", study, "--only", "variant=grpo,seed=3", "--quiet").exit_code == 0
    flagged = invoke("compare", study, "--format", "md")
    assert flagged.exit_code == 0, flagged.output
    assert "seeds added after looking: p-values are not valid at face value" in flagged.output
    assert "seed 3 was run later" in flagged.output


def test_a_changed_arm_set_needs_an_amendment_and_a_damaged_record_is_rebuilt(workdir):
    """#53: adding a variant after the looks silently rewrote the design record as if planned; a truncated
    sequential.json made both `run --until-decided` and `compare` exit 1, so the study could neither resume
    nor be compared. Now the change is refused until an amendment declares it (the record keeps it), and a
    damaged record is reported in one line by `compare` and rebuilt from the store's runs by `run`."""
    study = write_study(workdir / "study.yaml")
    assert invoke("run", study, "--until-decided", "--max-seeds", "2", "--quiet").exit_code == 0

    data = yaml.safe_load(study.read_text())
    data["variants"]["slow"] = {"learner": {"lr": 1e-5}}
    study.write_text(yaml.safe_dump(data))
    refused = invoke("run", study, "--until-decided", "--max-seeds", "2", "--quiet")
    assert refused.exit_code == 2, refused.output
    assert "the compared arms changed after a look (added slow)" in refused.output
    assert "compare.sequential.amendments" in refused.output

    amendment = "added variant slow after look 1: a lower learning rate, asked by a reviewer"
    data["compare"]["sequential"]["amendments"] = [amendment]
    study.write_text(yaml.safe_dump(data))
    amended = invoke("run", study, "--until-decided", "--max-seeds", "2", "--quiet")
    assert amended.exit_code == 0, amended.output
    client, exp, _ = child_runs(workdir)
    parent = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'study'")[0]
    record = json.loads(
        Path(
            client.download_artifacts(
                parent.info.run_id,
                "sequential.json",
                str(workdir / "dl"),
            )
        ).read_text()
    )
    assert record["amendments"] == [amendment] and "slow" in " ".join(record["arms"])

    client.log_text(parent.info.run_id, '{"design": {"looks": [2, 3]', "sequential.json")  # truncated
    damaged = invoke("compare", study, "--format", "md")
    assert damaged.exit_code == 2, damaged.output
    assert "sequential.json" in damaged.output and "rebuilds it from the store's runs" in damaged.output
    rebuilt = invoke("run", study, "--until-decided", "--max-seeds", "2", "--quiet")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "could not be read" in rebuilt.output and "rebuilt from the store's runs" in rebuilt.output
    assert invoke("compare", study, "--format", "md").exit_code == 0  # readable again
