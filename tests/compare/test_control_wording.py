"""`compare` names a reward-control arm as a control (#50): a comparison of or against an arm trained on
``reward.control`` (a spurious reward) is a control comparison, not a treatment effect, in the headline, the
tables and the report. The store is the shipped spurious_rewards study's runs (tests/compare/activity_stores.py)
with planted final accuracies, so every difference below is computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.compare.activity_stores import STEPS, STUDIES, write_study_store
from workbench.cli.main import app
from workbench.compare.wording import control_label

# final_eval_accuracy per arm and seed (0, 1, 2): the mean of the evals after step 0 (steps 6 and 11), both set
# to it. Means: constant 0.31, truth 0.41, random 0.32, truth_noclip 0.40 + 0.01 = 0.41, the others 0.30 + 0.01.
# Nine arms: every reward with the clip on and off (the study's design since 2026-11-29).
LEVEL = {
    "constant": 0.30,
    "truth": 0.40,
    "random": 0.31,
    "format": 0.30,
    "incorrect": 0.30,
    "truth_noclip": 0.40,
    "random_noclip": 0.30,
    "format_noclip": 0.30,
    "incorrect_noclip": 0.30,
}
OFFSET = {"constant": (0.01, 0.00, 0.02), "truth": (0.00, 0.02, 0.01), "random": (0.02, 0.01, 0.00)}


def curves(arm, config, seed, rng):
    final = LEVEL[arm] + OFFSET.get(arm, (0.0, 0.01, 0.02))[seed]
    return {"clip/frac": np.full(STEPS, 0.02 + 0.001 * seed), "eval/accuracy": np.array([0.2, final, final])}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('controls') / 'mlflow.db'}"
    write_study_store(uri, "spurious_rewards.yaml", curves)
    return uri


def compare(uri: str, *args: str) -> str:
    res = CliRunner().invoke(
        app,
        [
            "compare",
            str(STUDIES / "spurious_rewards.yaml"),
            "--tracking-uri",
            uri,
            "--no-log",
            "-m",
            "final_eval_accuracy",
            *args,
        ],
    )
    assert res.exit_code == 0, res.output
    return res.stdout


def test_the_label_names_the_control():
    assert control_label("random", "random") == "random (control: random reward)"
    assert control_label("format", "format_only") == "format (control: format-only reward)"
    assert control_label("truth", None) == "truth"


@pytest.mark.slow  # the store and three compare runs: ~2 min on the shared cores
def test_every_comparison_against_the_control_baseline_is_a_control_comparison(store, tmp_path):
    html = tmp_path / "report.html"
    doc = json.loads(compare(store, "--format", "json", "--out", str(html)))
    assert doc["settings"]["controls"] == {
        "constant": "constant",
        "random": "random",
        "format": "format_only",
        "incorrect": "incorrect_label",
        "random_noclip": "random",
        "format_noclip": "format_only",
        "incorrect_noclip": "incorrect_label",
    }
    lines = {line.split(": ", 1)[1].split(" vs ")[0]: line for line in doc["headline"]}
    assert len(lines) == 8 and all(line.startswith("control comparison: ") for line in doc["headline"])
    # truth (the verifier's reward) against the constant control: 0.41 - 0.31 = +10.0 points
    assert lines["truth"].startswith(
        "control comparison: truth vs constant (control: constant reward): +10.0 points final eval accuracy ("
    ), lines["truth"]
    # a control against a control: random 0.32 - constant 0.31 = +1.0 point
    assert lines["random (control: random reward)"].startswith(
        "control comparison: random (control: random reward) vs constant (control: constant reward): +1.0 points "
        "final eval accuracy ("
    ), lines
    report = html.read_text()
    assert "control comparison: random (control: random reward) vs constant (control: constant reward)" in report
    assert ">random (control: random reward)<" in report and "baseline: constant (control: constant reward)" in report


@pytest.mark.slow
def test_tables_label_control_arms_and_treatments_stay_plain(store):
    md = compare(store, "--format", "md", "--baseline", "truth")
    # truth_noclip against truth: neither trained on a control: a treatment comparison, worded as before
    # (0.41 - 0.41 = +0.0 points)
    (plain,) = [line for line in md.splitlines() if line.startswith("truth_noclip vs truth: ")]
    assert plain.startswith("truth_noclip vs truth: +0.0 points final eval accuracy ("), plain
    # every arm but truth_noclip is (or is compared with) a control: constant, random, format, incorrect and their
    # three clip-free twins against truth
    assert sum(line.startswith("control comparison: ") for line in md.splitlines()) == 7, md
    rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| ") and " | " in line}
    assert {
        "random (control: random reward)",
        "format (control: format-only reward)",
        "incorrect (control: incorrect-label reward)",
        "constant (control: constant reward)",
        "random_noclip (control: random reward)",
        "format_noclip (control: format-only reward)",
        "incorrect_noclip (control: incorrect-label reward)",
        "truth_noclip",
        "**truth**",
    } <= set(rows), sorted(rows)
    assert "### final_eval_accuracy (higher is better; baseline: truth)" in md
