"""The knob-activity gate (workbench/compare/activity.py), on hand-built frames with hand-computed
activities, the contract every registered unit keeps, and bad ``compare.activity`` settings."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from workbench.algorithms import ADVANTAGE_ESTIMATORS, AGG_MODES, IS_CORRECTIONS, KL_ESTIMATORS, POLICY_LOSSES
from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS
from workbench.algorithms.params import keyword_params
from workbench.batch import Rollouts, ScoredRollouts
from workbench.cli.main import app
from workbench.compare import CompareSettings, compare_variants
from workbench.compare.activity import (
    DEFAULT_MIN,
    activity_gates,
    changed_knobs,
    parse_settings,
    percent,
)
from workbench.metrics.catalogue import BY_NAME, is_fraction
from workbench.metrics.compute import rollout_metrics
from workbench.reward import REWARD_SHAPERS
from workbench.study import StudyError, load_study


def runs_frame(arms: dict[str, dict], seeds=(0, 1)) -> pd.DataFrame:
    """Runs as the reader gives them: one row per (arm, seed) with the arm's config as params."""
    rows = []
    for arm, params in arms.items():
        for seed in seeds:
            rows.append(
                {
                    "run_id": f"{arm}-{seed}",
                    "variant": arm,
                    "arm": arm,
                    "seed": seed,
                    "status": "FINISHED",
                    "algorithm.loss": "ppo_clip",
                    "algorithm.clip_low": 0.2,
                    "algorithm.clip_high": 0.2,
                    "algorithm.correction": None,
                    "algorithm.token_filters": "[]",
                    "reward.shaping": "[]",
                    "learner.lr": 1e-4,
                    "algorithm.preset": "grpo",
                }
                | params
            )
    return pd.DataFrame(rows)


def history(points: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """``(run_id, metric) -> values at steps 0, 1, ...`` as a history frame."""
    rows = [
        {"run_id": rid, "metric": m, "step": s, "value": v}
        for (rid, m), values in points.items()
        for s, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


# ---- which knobs a comparison changes -------------------------------------------------------------


def test_changed_knobs_map_config_keys_to_the_units_that_declare_their_activity():
    base = {
        "algorithm.loss": "ppo_clip",
        "algorithm.clip_high": 0.2,
        "algorithm.correction": None,
        "algorithm.token_filters": [],
        "reward.shaping": [],
        "algorithm.batch_filter": None,
    }
    wider = changed_knobs(base | {"algorithm.clip_high": 0.28}, base)
    assert [(k.label, k.activity.metric, k.activity.unit) for k in wider] == [("clip_high", "clip/frac_high", "tokens")]
    tis = changed_knobs(base | {"algorithm.correction": "tis"}, base)
    assert [(k.label, k.activity.metric) for k in tis] == [("correction tis", "mismatch/is_reweighted_frac")]
    capped = changed_knobs(
        base | {"algorithm.correction": "tis", "algorithm.correction_cap": 5.0},
        base | {"algorithm.correction": "tis", "algorithm.correction_cap": 2.0},
    )
    assert [(k.label, k.activity.metric) for k in capped] == [("correction_cap (tis)", "mismatch/is_clipped_frac")]
    shaped = changed_knobs(
        base
        | {
            "reward.shaping": [
                {"name": "overlong_soft", "weight": 1.0, "params": {"max_length": 64, "cache_length": 16}}
            ],
            "algorithm.token_filters": ["overlong"],
        },
        base,
    )
    assert [(k.label, k.activity.metric, k.activity.unit) for k in shaped] == [
        ("token filter overlong", "length/truncated_frac", "responses"),
        ("shaping overlong_soft", "reward/overlong_soft/nonzero_frac", "responses"),
    ]
    dyn = changed_knobs(base | {"algorithm.batch_filter": "zero_std", "algorithm.filter_on": "correct"}, base)
    assert [(k.label, k.activity.metric, k.activity.unit) for k in dyn] == [
        ("batch filter zero_std", "batch/filtered_frac", "groups")
    ]
    # settings no unit measures: the knob acts on every token, the comparison is always tested
    assert [k.gated for k in changed_knobs(base | {"learner.lr": 3e-4}, base)] == [False]
    assert [k.gated for k in changed_knobs(base | {"algorithm.loss": "gspo", "algorithm.clip_high": 0.28}, base)] == [
        False,
        False,
    ]  # the loss changed too: its clip metric does not measure the same thing
    assert changed_knobs(base, dict(base)) == []


# ---- measuring: mean over steps, then over seeds; the larger of the two arms -------------------


def test_activity_is_the_mean_over_steps_then_seeds_the_larger_arm_counts():
    runs = runs_frame({"narrow": {}, "wide": {"algorithm.clip_high": 0.28}})
    # narrow: seed 0 mean(0.001, 0.003) = 0.002, seed 1 mean(0.004) = 0.004 -> 0.003
    # wide:   seed 0 mean(0.0, 0.002, 0.001) = 0.001, seed 1 mean(0.001, 0.001) = 0.001 -> 0.001
    # (a mean over all five points of narrow would be 0.00267: steps are averaged per run first)
    h = history(
        {
            ("narrow-0", "clip/frac_high"): [0.001, 0.003],
            ("narrow-1", "clip/frac_high"): [0.004],
            ("wide-0", "clip/frac_high"): [0.0, 0.002, 0.001],
            ("wide-1", "clip/frac_high"): [0.001, 0.001],
        }
    )
    gate = activity_gates(runs, h, "narrow")["wide"]
    (reading,) = gate.readings
    assert reading.in_arm == pytest.approx(0.001, abs=1e-15)  # a few float sums of numbers ~1e-3: ~10 eps x 1e-3
    assert reading.in_baseline == pytest.approx(0.003, abs=1e-15)
    assert reading.value == reading.in_baseline and gate.not_testable
    assert gate.verdict() == "not testable: clip_high acted on 0.3% of tokens (min 1%)"
    # a declared minimum below the activity opens the gate
    loose = activity_gates(
        runs, h, "narrow", parse_settings({"activity": {"wide": {"min": 0.002}}}, ["narrow", "wide"])
    )
    assert not loose["wide"].not_testable
    # a declared metric replaces the built-in knobs: here clip/frac_low, 0.0005 in both arms (hand-computed)
    h_low = pd.concat(
        [h, history({(f"{a}-{s}", "clip/frac_low"): [0.0004, 0.0006] for a in ("narrow", "wide") for s in (0, 1)})]
    )
    declared = parse_settings({"activity": {"wide": {"metric": "clip/frac_low", "min": 0.001}}}, ["narrow", "wide"])
    gate = activity_gates(runs, h_low, "narrow", declared)["wide"]
    assert gate.verdict() == "not testable: wide's knob acted on 0.05% of tokens (min 0.1%)"


def test_a_knob_not_logged_by_any_run_leaves_the_comparison_tested():
    runs = runs_frame({"off": {}, "tis": {"algorithm.correction": "tis"}})
    gate = activity_gates(runs, history({("off-0", "eval/accuracy"): [0.5]}), "off")["tis"]
    assert not gate.not_testable and "logged mismatch/is_reweighted_frac" in gate.why_open


def test_gate_applies_in_compare_variants_to_every_metric_but_the_knobs_own():
    runs = runs_frame({"narrow": {}, "wide": {"algorithm.clip_high": 0.28}}, seeds=range(5))
    rng = np.random.default_rng(0)
    h = history({(f"{a}-{s}", "clip/frac_high"): [0.001] for a in ("narrow", "wide") for s in range(5)})
    summary = runs.assign(
        final_eval_accuracy=0.3 + rng.normal(0, 0.02, len(runs)),
        **{"final:clip/frac_high": np.where(runs["variant"] == "wide", 0.0005, 0.001)},
    )
    gates = activity_gates(runs, h, "narrow")
    table = compare_variants(
        summary,
        "narrow",
        ["final_eval_accuracy", "final:clip/frac_high"],
        CompareSettings(n_resamples=0),
        activity=gates,
    )
    acc = table.for_metric("final_eval_accuracy").set_index("variant").loc["wide"]
    assert re.fullmatch(
        r"not testable: clip_high acted on 0\.1% of tokens \(min 1%\); \|Δ\| > [\d.]+ excluded", acc["verdict"]
    )
    # the excluded bound is the corrected interval's farther end, rounded up: never tighter than the interval
    bound = float(acc["verdict"].rsplit("> ", 1)[1].split()[0])
    assert bound >= max(abs(acc["delta_lo"]), abs(acc["delta_hi"]))
    assert acc["status"] == "not testable" and acc["activity"] == pytest.approx(0.001)
    own = table.for_metric("final:clip/frac_high").set_index("variant").loc["wide"]
    assert not own["verdict"].startswith("not testable")  # identical per-seed values: a real (if tiny) shift
    assert table.winners("final_eval_accuracy") == []


def test_percent_keeps_two_significant_digits():
    assert [percent(x) for x in (0.0012, 0.01, 0.00057, 0.0, 2e-8, math.nan)] == [
        "0.12%",
        "1%",
        "0.057%",
        "0%",
        "<0.001%",
        "—",
    ]
    assert DEFAULT_MIN == 0.01


# ---- the contract every registered unit keeps -----------------------------------------------------

# Kinds of unit that change the loss, the advantages, the batch or the reward. Each unit declares an
# activity metric, or is explicitly always active with a reason (its registry's default or its own).
UNIT_REGISTRIES = {
    "advantage estimator": ADVANTAGE_ESTIMATORS,
    "aggregation": AGG_MODES,
    "policy loss": POLICY_LOSSES,
    "IS correction": IS_CORRECTIONS,
    "KL estimator": KL_ESTIMATORS,
    "batch filter": BATCH_FILTERS,
    "token filter": TOKEN_FILTERS,
    "reward shaper": REWARD_SHAPERS,
}
# Kinds whose every unit acts on each token or response it sees (the registry-wide reason).
ALWAYS_ACTIVE = {"advantage estimator", "aggregation", "KL estimator", "policy loss"}


@pytest.mark.parametrize("kind", list(UNIT_REGISTRIES))
def test_every_registered_unit_declares_its_activity(kind):
    registry = UNIT_REGISTRIES[kind]
    for name in registry.names():
        activity = registry.activity(name)
        assert activity is not None, f"{kind} {name!r} declares no Activity (a metric, or why it acts always)"
        if kind in ALWAYS_ACTIVE:
            assert activity.metric is None and activity.reason, (kind, name)
        else:  # filters, corrections, shapers act on some tokens/responses/groups: a logged fraction says how many
            assert activity.metric is not None, (kind, name)
            assert is_fraction(activity.metric) or re.fullmatch(r"reward/\w+/nonzero_frac", activity.metric), (
                kind,
                name,
                activity.metric,
            )


def test_every_loss_parameter_declares_its_activity():
    for name in POLICY_LOSSES.names():
        params = POLICY_LOSSES.activity(name).params
        assert set(params) == set(keyword_params(POLICY_LOSSES.get(name))), name
        for param, activity in params.items():
            assert activity.reason or activity.metric in BY_NAME, (name, param)


def test_every_shapers_activity_metric_is_logged():
    lengths = torch.tensor([10, 50, 60, 64])
    mask = (torch.arange(64)[None, :] < lengths[:, None]).float()  # [4, 64]
    rollouts = Rollouts(
        problems=[None] * 4,
        group_ids=torch.tensor([0, 0, 1, 1]),
        prompt_ids=torch.zeros(4, 1, dtype=torch.long),
        prompt_mask=torch.ones(4, 1),
        completion_ids=torch.zeros(4, 64, dtype=torch.long),
        mask=mask,
        sampler_logp=torch.zeros(4, 64),
        truncated=torch.tensor([False, False, False, True]),
        texts=["\\boxed{1}", "a", "b", "c"],
    )
    terms = {name: torch.tensor([0.0, -0.5, 0.0, -1.0]) for name in REWARD_SHAPERS.names()}
    scored = ScoredRollouts(
        rollouts, rewards=torch.zeros(4), correct=torch.zeros(4, dtype=torch.bool), reward_terms=terms
    )
    metrics = rollout_metrics(scored)
    for name in REWARD_SHAPERS.names():
        assert metrics[REWARD_SHAPERS.activity(name).metric] == 0.5  # 2 of 4 responses have a nonzero term


# ---- bad compare.activity: one line naming the field and the file, exit 2 ----------------------

STUDY = """\
name: t
base:
  model: {builtin: tiny}
  algorithm: {preset: grpo, minibatches: 4}
variants:
  narrow: {}
  wide: {algorithm: {clip_high: 0.28}}
compare:
  baseline: narrow
  activity:
"""


@pytest.mark.parametrize(
    "entry, expected",
    [
        (
            "    wider: {metric: clip/frac_high}\n",
            "x.yaml:11 compare.activity.wider: unknown variant 'wider'; did you mean 'wide'?",
        ),
        (
            "    wide: {metric: clip/frac_hi}\n",
            "x.yaml:11 compare.activity.wide.metric: unknown metric 'clip/frac_hi'; did you mean 'clip/frac_high'? ...",
        ),
        (
            "    wide: {metric: entropy/mean}\n",
            "x.yaml:11 compare.activity.wide.metric: 'entropy/mean' is not a fraction in [0, 1]; ...",
        ),
        (
            "    wide: {metric: clip/frac_high, min: 5}\n",
            "x.yaml:11 compare.activity.wide.min: must be a fraction in [0, 1] (0.01 = 1%), got 5",
        ),
        (
            "    wide: {metric: clip/frac_high, min: -0.1}\n",
            "x.yaml:11 compare.activity.wide.min: must be a fraction in [0, 1] (0.01 = 1%), got -0.1",
        ),
        (
            "    wide: {metric: reward/overlong_sotf/nonzero_frac}\n",
            "x.yaml:11 compare.activity.wide.metric: 'reward/overlong_sotf/nonzero_frac': unknown reward shaper "
            "'overlong_sotf'; did you mean 'overlong_soft'?",
        ),
    ],
)
def test_bad_activity_settings_name_the_field_and_the_file(tmp_path, monkeypatch, entry, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text(STUDY + entry)
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    (line,) = str(err.value).splitlines()
    assert line == expected if not expected.endswith("...") else line.startswith(expected[:-4]), line
    res = CliRunner().invoke(app, ["compare", "x.yaml", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--no-log"])
    assert res.exit_code == 2 and expected[:-4].split(" ", 1)[1] in res.output.replace("\n", " ")
    assert not (tmp_path / "m.db").exists()  # nothing written


def test_good_activity_settings_parse():
    settings = parse_settings(
        {"activity": {"wide": {"metric": "clip/frac_high", "min": 0.005}, "narrow": False}}, ["narrow", "wide"]
    )
    assert settings["wide"].unit == "tokens" and settings["wide"].min == 0.005 and settings["narrow"].off
    with pytest.raises(ValueError, match=r"^compare\.activity\.wider: unknown variant"):
        parse_settings({"activity": {"wider": {}}}, ["narrow", "wide"])


def test_a_rejecting_test_keeps_its_verdict_however_little_the_knob_acted():
    """#52: the gate qualifies a verdict, it never overrules one. A planted +6.5-point effect (SD 0.5
    points per seed, 5 paired seeds: p ~ 1e-6) under a knob acting on 0.1% of tokens stays "better";
    the activity is in its columns and its note."""
    runs = runs_frame({"narrow": {}, "wide": {"algorithm.clip_high": 0.28}}, seeds=range(5))
    rng = np.random.default_rng(1)
    h = history({(f"{a}-{s}", "clip/frac_high"): [0.001] for a in ("narrow", "wide") for s in range(5)})
    planted = np.where(runs["variant"] == "wide", 0.065, 0.0)
    summary = runs.assign(final_eval_accuracy=0.3 + planted + rng.normal(0, 0.005, len(runs)))
    table = compare_variants(
        summary,
        "narrow",
        ["final_eval_accuracy"],
        CompareSettings(n_resamples=0),
        activity=activity_gates(runs, h, "narrow"),
    )
    acc = table.for_metric("final_eval_accuracy").set_index("variant").loc["wide"]
    assert acc["status"] == "better" and acc["verdict"].startswith("better"), acc["verdict"]
    assert acc["activity"] == pytest.approx(0.001) and acc["activity_min"] == pytest.approx(0.01)
    assert "clip_high acted on 0.1% of tokens (min 1%), yet the test rejected" in acc["note"]
    assert table.winners("final_eval_accuracy") == ["wide"]


@pytest.mark.parametrize("correction", IS_CORRECTIONS.names())
def test_a_corrections_activity_counts_every_reweighted_token_not_only_the_capped(correction):
    """#52: "TIS acted on 0% of tokens" read the capped share alone. Learner logprobs 0.01 nats above
    the sampler's on every token: weights exp(0.01) = 1.01, none capped at 2, every token reweighted
    (|w − 1| = 0.01 > the 0.1% tolerance); equal logprobs: weights exactly 1, nothing reweighted."""
    from workbench.algorithms.correction import importance_weights

    sampler = torch.full((2, 5), -1.0)
    mask = torch.ones(2, 5)
    _, shifted = importance_weights(correction, sampler + 0.01, sampler, mask, cap=2.0)
    assert shifted["mismatch/is_reweighted_frac"] == 1.0 and shifted["mismatch/is_clipped_frac"] == 0.0
    _, equal = importance_weights(correction, sampler, sampler, mask, cap=2.0)
    assert equal["mismatch/is_reweighted_frac"] == 0.0
    activity = IS_CORRECTIONS.activity(correction)
    assert activity.metric == "mismatch/is_reweighted_frac" and activity.metric in shifted
    assert activity.params["correction_cap"].metric == "mismatch/is_clipped_frac"
