"""Seeds planned before a study (#28): the family size compare will use, the plan from a declared
SESOI and noise SD, nothing invented without them, and the study fields validated."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.compare.planning import comparisons_per_metric, plan_seeds
from workbench.compare.stats import planned_seeds
from workbench.study import StudyError, load_study

ROOT = Path(__file__).resolve().parents[2]


def test_comparisons_per_metric_counts_what_compare_compares():
    arms = [("grpo", "grpo/lr=1"), ("grpo", "grpo/lr=2"), ("dr", "dr/lr=1"), ("dr", "dr/lr=2"), ("dapo", "dapo/lr=3")]
    assert comparisons_per_metric(arms, "grpo") == 2  # dapo/lr=3 has no grpo arm at its grid point
    assert comparisons_per_metric(arms, "grpo/lr=1") == 4  # one arm: every other arm against it
    assert comparisons_per_metric([("a", "a"), ("b", "b"), ("c", "c")], "a") == 2


def test_plan_uses_holm_first_step_level_and_invents_nothing():
    plans = plan_seeds(["acc", "ratio", "kl"], {"acc": 0.03, "ratio": 0.1}, {"acc": (0.04, "declared")},
                       comparisons=3, seeds_in_study=5)
    acc, ratio, kl = plans
    assert acc.seeds == planned_seeds(0.03, math.sqrt(2) * 0.04, alpha=0.05 / 3) and acc.alpha == pytest.approx(0.05 / 3)
    assert ratio.seeds is None and "noise_sd" in ratio.why
    assert kl.seeds is None and "no compare.sesoi" in kl.why


@pytest.mark.slow
@pytest.mark.parametrize(("study", "m", "sd"), [("dr_grpo_length_bias", 1, 0.025), ("clip_higher", 1, 0.025),
                                                ("dapo_ablation", 5, 0.025), ("precision_mismatch", 3, 0.025),
                                                ("loss_aggregation", 3, 0.025)])
def test_plan_prints_planned_seeds_for_every_findings_study(study, m, sd):
    """Each findings study declares a SESOI and a noise SD for its accuracy: `plan` turns them into
    seeds per arm at Holm's first-step level over the study's m comparisons of the metric; a metric
    with no SESOI is planned for nothing (and, when compare.primary leaves it out, marked secondary)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": "sqlite:////nonexistent/none.db"}
    out = subprocess.run([sys.executable, "-m", "workbench.cli.main", "plan", f"studies/{study}.yaml",
                          "--format", "json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    plan = {p["metric"]: p for p in json.loads(out.stdout)["seed_plan"]}
    acc = plan["final_eval_accuracy"]
    assert acc["comparisons"] == m
    assert acc["seeds"] == planned_seeds(0.03, math.sqrt(2) * sd, alpha=0.05 / m)
    assert acc["sd_source"] == "declared in compare.noise_sd"
    assert all(p["seeds"] is None for p in plan.values() if p["sesoi"] is None)


@pytest.mark.parametrize(("block", "field"), [("sesoi: {final_eval_accuracy: -0.1}", "compare.sesoi.final_eval_accuracy"),
                                              ("noise_sd: 0.04", "compare.noise_sd")])
def test_bad_sesoi_or_noise_sd_names_the_field_and_file(tmp_path, block, field):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase: {model: {name: tiny}}\ncompare:\n  " + block + "\n")
    with pytest.raises(StudyError) as e:
        load_study(study)
    line = next(x for x in str(e.value).splitlines() if field in x)
    assert "s.yaml" in line and ("positive number" in line or "mapping" in line)


@pytest.mark.slow
def test_compare_primary_marks_the_other_metrics_secondary_in_the_plan(tmp_path):
    """`compare.primary` names what the study is designed to decide: `plan` plans those and reports the
    others as secondary, without asking for a SESOI they do not need."""
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase: {model: {builtin: tiny}}\nvariants: {a: {}, b: {algorithm: {preset: dr_grpo}}}\nseeds: [0, 1, 2]\n"
                     "compare:\n  baseline: a\n  metrics: [final_eval_accuracy, final:mismatch/kl]\n"
                     "  primary: [final_eval_accuracy]\n  sesoi: {final_eval_accuracy: 0.03}\n"
                     "  noise_sd: {final_eval_accuracy: 0.025}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/none.db"}
    run = [sys.executable, "-m", "workbench.cli.main", "plan", str(study)]
    out = subprocess.run([*run, "--format", "json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    plan = {p["metric"]: p for p in json.loads(out.stdout)["seed_plan"]}
    assert plan["final_eval_accuracy"]["secondary"] is False
    assert plan["final_eval_accuracy"]["seeds"] == planned_seeds(0.03, math.sqrt(2) * 0.025, alpha=0.05)
    assert plan["final:mismatch/kl"]["secondary"] is True and plan["final:mismatch/kl"]["seeds"] is None
    text = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
    assert "final:mismatch/kl (secondary): reported, not planned for" in text
    assert "nothing planned" not in text


def test_a_primary_metric_not_compared_names_the_field_and_file(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase: {model: {name: tiny}}\ncompare:\n  metrics: [final_eval_accuracy, eval_auc]\n"
                     "  primary: [final_eval_acuracy]\n")
    with pytest.raises(StudyError) as e:
        load_study(study)
    line = next(x for x in str(e.value).splitlines() if "compare.primary" in x)
    assert "s.yaml" in line and "'final_eval_acuracy'" in line and "final_eval_accuracy" in line  # did you mean
