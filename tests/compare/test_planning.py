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

from workbench.analysis.metric_roles import comparison_metrics, secondary_metrics
from workbench.compare.planning import comparisons_per_metric, plan_seeds
from workbench.compare.sequential import design_from_settings
from workbench.compare.stats import planned_seeds, t_test_power, tost_power
from workbench.study import StudyError, load_study

ROOT = Path(__file__).resolve().parents[2]


def test_comparisons_per_metric_counts_what_compare_compares():
    arms = [("grpo", "grpo/lr=1"), ("grpo", "grpo/lr=2"), ("dr", "dr/lr=1"), ("dr", "dr/lr=2"), ("dapo", "dapo/lr=3")]
    assert comparisons_per_metric(arms, "grpo") == 2  # dapo/lr=3 has no grpo arm at its grid point
    assert comparisons_per_metric(arms, "grpo/lr=1") == 4  # one arm: every other arm against it
    assert comparisons_per_metric([("a", "a"), ("b", "b"), ("c", "c")], "a") == 2


def test_a_sequential_plan_uses_the_last_looks_level_and_states_the_power_at_its_cap():
    """#52: the shipped studies planned at 0.05/m but test their last look at O'Brien-Fleming's lower α
    (planned power 0.80 was 0.73 at those seeds), and capped seeds below plan without saying what power
    the cap leaves. The plan's level is now the last look's α/m; below plan, the cap's power is stated."""
    design = design_from_settings({"looks": [3, 6, 9]})
    last = float(design.look_alpha[-1])
    assert last < 0.05
    (acc,) = plan_seeds(
        ["acc"],
        {"acc": 0.03},
        {"acc": (0.025, "declared")},
        comparisons=1,
        seeds_in_study=3,
        last_look_alpha=last,
        cap=9,
    )
    assert acc.alpha == pytest.approx(last) and acc.level_source == "last look's alpha / m"
    assert acc.seeds == planned_seeds(0.03, math.sqrt(2) * 0.025, alpha=last) > 9
    assert acc.power_at_cap == pytest.approx(
        float(t_test_power(9, 0.03, math.sqrt(2) * 0.025, paired=True, alpha=last))
    )
    assert acc.tost_power_at_cap == pytest.approx(tost_power(9, 0.03, math.sqrt(2) * 0.025, alpha=last))
    (roomy,) = plan_seeds(
        ["acc"],
        {"acc": 0.03},
        {"acc": (0.005, "declared")},
        comparisons=1,
        seeds_in_study=3,
        last_look_alpha=last,
        cap=9,
    )
    assert roomy.seeds <= 9 and roomy.power_at_cap is None  # nothing cut: nothing to state


@pytest.mark.parametrize(("n", "margin", "sd"), [(3, 0.03, 0.035), (9, 0.03, 0.035), (21, 0.03, 0.035), (6, 0.1, 0.05)])
def test_tost_power_equals_a_simulation_of_the_paired_tost(n, margin, sd):
    """The exact TOST power (one integral over the sample SD) against 400,000 simulated studies at a true
    difference of 0: the Monte-Carlo SE is at most √(0.25 / 400,000) = 0.0008, so 0.004 is 5 SE."""
    import numpy as np
    import scipy.stats as sps

    rng = np.random.default_rng(52)
    d = rng.normal(0.0, sd, (400_000, n))
    mean, s = d.mean(axis=1), d.std(axis=1, ddof=1)
    accepted = (np.abs(mean) < margin - sps.t.ppf(0.95, n - 1) * s / np.sqrt(n)).mean()
    assert tost_power(n, margin, sd, alpha=0.05) == pytest.approx(accepted, abs=0.004)


def test_plan_uses_holm_first_step_level_and_invents_nothing():
    plans = plan_seeds(
        ["acc", "ratio", "kl"],
        {"acc": 0.03, "ratio": 0.1},
        {"acc": (0.04, "declared")},
        comparisons=3,
        seeds_in_study=5,
    )
    acc, ratio, kl = plans
    assert acc.seeds == planned_seeds(0.03, math.sqrt(2) * 0.04, alpha=0.05 / 3) and acc.alpha == pytest.approx(
        0.05 / 3
    )
    assert ratio.seeds is None and "noise_sd" in ratio.why
    assert kl.seeds is None and "no compare.sesoi" in kl.why


@pytest.mark.slow
@pytest.mark.parametrize(
    ("study", "m", "sd"),
    [
        ("dr_grpo_length_bias", 1, 0.025),
        ("clip_higher", 1, 0.025),
        ("dapo_ablation", 5, 0.025),
        ("precision_mismatch", 3, 0.025),
        ("loss_aggregation", 3, 0.025),
    ],
)
def test_plan_prints_planned_seeds_for_every_findings_study(study, m, sd):
    """Each findings study declares a SESOI and a noise SD for its accuracy: `plan` turns them into
    seeds per arm at Holm's first-step level over its family (m comparisons per metric, times the primary
    metrics when it is primary); a metric
    with no SESOI is planned for nothing (and, when compare.primary leaves it out, marked secondary)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": "sqlite:////nonexistent/none.db"}
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", "plan", f"studies/{study}.yaml", "--format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    plan = {p["metric"]: p for p in json.loads(out.stdout)["seed_plan"]}
    acc = plan["final_eval_accuracy"]
    # Holm's family as compare forms it (#52): a primary metric's comparisons with every other primary's
    compare = load_study(ROOT / "studies" / f"{study}.yaml").compare or {}
    metrics = comparison_metrics(None, compare)
    primaries = [x for x in metrics if x not in secondary_metrics(metrics, compare)]
    family = m * len(primaries) if "final_eval_accuracy" in primaries else m
    assert acc["comparisons"] == family
    # a sequential study is tested at its last look's α (#52), and capped at that look's seeds
    sequential = compare.get("sequential")
    design = design_from_settings(sequential) if sequential is not None else None
    alpha = 0.05 if design is None else float(design.look_alpha[-1])
    assert acc["seeds"] == planned_seeds(0.03, math.sqrt(2) * sd, alpha=alpha / family)
    assert acc["sd_source"] == "declared in compare.noise_sd"
    if design is not None and acc["seeds"] > design.looks[-1]:
        assert acc["cap"] == design.looks[-1] and 0 < acc["power_at_cap"] < 0.8
        assert 0 <= acc["tost_power_at_cap"] < 1
    assert all(p["seeds"] is None for p in plan.values() if p["sesoi"] is None)


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("sesoi: {final_eval_accuracy: -0.1}", "compare.sesoi.final_eval_accuracy"),
        ("noise_sd: 0.04", "compare.noise_sd"),
    ],
)
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
    study.write_text(
        "name: s\nbase: {model: {builtin: tiny}}\nvariants: {a: {}, b: {algorithm: {preset: dr_grpo}}}\nseeds: [0, 1, 2]\n"
        "compare:\n  baseline: a\n  metrics: [final_eval_accuracy, final:mismatch/kl]\n"
        "  primary: [final_eval_accuracy]\n  sesoi: {final_eval_accuracy: 0.03}\n"
        "  noise_sd: {final_eval_accuracy: 0.025}\n"
    )
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
    study.write_text(
        "name: s\nbase: {model: {name: tiny}}\ncompare:\n  metrics: [final_eval_accuracy, eval_auc]\n"
        "  primary: [final_eval_acuracy]\n"
    )
    with pytest.raises(StudyError) as e:
        load_study(study)
    line = next(x for x in str(e.value).splitlines() if "compare.primary" in x)
    assert "s.yaml" in line and "'final_eval_acuracy'" in line and "final_eval_accuracy" in line  # did you mean
