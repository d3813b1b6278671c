"""Issue 28, finding 1: an inert knob read "inconclusive, N seeds needed"; it must read "not testable".

On synthetic stores of the three findings studies (tests/compare/activity_stores.py: the real study
files' configs, curves planted at docs/findings.md's measured levels), ``workbench compare`` calls
the questions whose knob barely acted "not testable" from the built-in defaults alone (no
``compare.activity`` in the study files), in every output format, and leaves the others tested:

* clip_higher: the upper clip bound binds on 0.12% (ε_high 0.2) and 0.07% (0.28) of tokens;
* precision_mismatch: TIS's cap binds on at most 0.057% of tokens in a step (bfloat16), never (float16);
* dapo_ablation: overlong shaping acts on 0.05-0.8% of responses (truncated); the soft punishment's
  window (48-64 tokens) was not logged then: planted at the truncated share + 0.2 points (assumed,
  still under 1%, as the findings' "starts at about three times the mean length" implies).

Before the gate every one of these rows read "not distinguishable with 5 seeds" with a seed count:
the note keeps that verdict ("the test alone: ..."), which the first test checks, so the finding's
reproduction stays part of the test.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.compare.activity_stores import EVAL_STEPS, STEPS, STUDIES, around, write_study_store
from workbench.cli.main import app

NOT_TESTABLE = re.compile(r"not testable: ")


def _accuracy(level: float, rng: np.random.Generator) -> np.ndarray:
    final = level + rng.normal(0.0, 0.02)
    return np.array([0.17, (0.17 + final) / 2, final])[: len(EVAL_STEPS)]


def clip_higher_curves(arm, config, seed, rng):
    clipped = {"eps_high_020": 0.0012, "eps_high_028": 0.0007}[arm]  # findings: 0.12% vs 0.07% of tokens
    entropy = {"eps_high_020": 0.1445, "eps_high_028": 0.1397}[arm] + rng.normal(0.0, 0.02)
    return {
        "clip/frac_high": around(clipped, rng, 0.0003),
        "clip/frac_low": around(0.001, rng, 0.0003),
        "entropy/mean": around(entropy, rng, 0.002),
        "eval/accuracy": _accuracy({"eps_high_020": 0.2007, "eps_high_028": 0.21}[arm], rng),
    }


def precision_curves(arm, config, seed, rng):
    dtype = config.sampler.dtype
    kl = {"float32": 7e-10, "float16": 1.3e-6, "bfloat16": 5.6e-5}[dtype]
    out = {
        "mismatch/kl": around(kl, rng, kl / 5),
        "mismatch/prob_abs_diff_mean": around(kl * 10, rng, kl),
        "mismatch/prob_abs_diff_max": around(kl * 1000, rng, kl * 100),
        "eval/accuracy": _accuracy(0.21, rng),
    }
    if config.algorithm.correction:  # logged only with a correction; bf16 at most 0.057% in a step
        capped = around(0.0001, rng, 0.0002) if dtype == "bfloat16" else np.zeros(STEPS)
        out["mismatch/is_clipped_frac"] = np.minimum(capped, 0.00057)
        out["mismatch/is_weight_mean"] = around(1.0, rng, 1e-4)
    return out


TRUNCATED = {
    "dapo": 0.0059,
    "no_clip_higher": 0.0016,
    "no_dynamic_sampling": 0.0005,
    "no_token_level_loss": 0.0038,
    "no_overlong": 0.0005,
    "grpo": 0.008,
}  # findings: final length/truncated_frac per arm


def dapo_curves(arm, config, seed, rng):
    algo = config.algorithm
    out = {
        "length/truncated_frac": around(TRUNCATED[arm], rng, 0.002),
        "clip/frac_high": around(0.0012 if algo.clip_high > 0.2 else 0.0027, rng, 0.0005),
        "eval/accuracy": _accuracy(0.23, rng),
    }
    if config.reward.shaping:
        out["reward/overlong_soft"] = around(-0.003, rng, 0.001, lo=-1.0)
        out["reward/overlong_soft/nonzero_frac"] = around(TRUNCATED[arm] + 0.002, rng, 0.002)
    if algo.batch_filter:
        out["batch/filtered_frac"] = around(0.4, rng, 0.05)  # groups all right or all wrong: dropped often
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('findings') / 'mlflow.db'}"  # one store, one experiment per study
    for study, curves in (
        ("clip_higher", clip_higher_curves),
        ("precision_mismatch", precision_curves),
        ("dapo_ablation", dapo_curves),
    ):
        write_study_store(uri, f"{study}.yaml", curves)
    return dict.fromkeys(("clip_higher", "precision_mismatch", "dapo_ablation"), uri)


def compare_json(uri: str, study: str, *args: str) -> dict[tuple[str, str], dict]:
    res = CliRunner().invoke(
        app, ["compare", str(STUDIES / f"{study}.yaml"), "--tracking-uri", uri, "--no-log", "--format", "json", *args]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{") :])
    return {(r["metric"], r["variant"]): r for r in doc["rows"]}


def test_clip_higher_entropy_question_is_not_testable(stores):
    rows = compare_json(stores["clip_higher"], "clip_higher")
    entropy = rows["final_entropy", "eps_high_028"]
    # the larger of the two arms' clipped shares: the ε_high 0.2 baseline's 0.12%
    assert re.fullmatch(
        r"not testable: clip_high acted on 0\.1[0-4]% of tokens \(min 1%\)(; \|Δ\| > \S+ excluded)?", entropy["verdict"]
    ), entropy["verdict"]
    assert 0.0010 < entropy["activity"] < 0.0014 and entropy["activity_min"] == 0.01
    assert entropy["status"] == "not testable"  # no seed count can show an effect of a knob that does not act
    # the study's first look (its seeds: 3 since the #37 re-design; 5 in the run the findings measured)
    assert re.search(r"the test alone: inconclusive with \d+ seeds \(MDE", entropy["note"]), entropy["note"]
    assert "clip/frac_high" in entropy["note"] and "eps_high_020" in entropy["note"]
    assert NOT_TESTABLE.match(rows["final_eval_accuracy", "eps_high_028"]["verdict"])
    # the clip fraction itself is the mechanism: comparing it is measuring the activity, always tested
    assert not NOT_TESTABLE.match(rows["final:clip/frac_high", "eps_high_028"]["verdict"])


def test_precision_mismatch_tis_question_is_tested_its_runs_never_logged_what_tis_acts_on(stores):
    # the study (re-designed in #37) compares every arm with bf16: bf16_tis changes only the correction.
    # Its runs logged the capped share (0.0x% of tokens) but not the reweighted one TIS acts on (#52):
    # the gate stays open and says why, so the comparison is tested; it no longer reads "not testable".
    rows = compare_json(stores["precision_mismatch"], "precision_mismatch", "-m", "final_eval_accuracy")
    tis = rows["final_eval_accuracy", "bf16_tis"]
    assert tis["status"] != "not testable", tis["verdict"]
    assert "no run of bf16_tis or bf16 logged mismatch/is_reweighted_frac" in tis["note"], tis["note"]
    # the other arms change the sampler's precision, which acts on every token: tested as before
    for arm in ("fp16", "fp32"):
        assert rows["final_eval_accuracy", arm]["status"] != "not testable", arm
    # the mismatch itself is never gated: it is what the precision changes
    rows = compare_json(stores["precision_mismatch"], "precision_mismatch", "-m", "final:mismatch/kl")
    assert not any(NOT_TESTABLE.match(r["verdict"]) for (_, arm), r in rows.items() if arm != "bf16_tis")


def test_dapo_ablation_overlong_arm_is_not_testable(stores):
    rows = compare_json(stores["dapo_ablation"], "dapo_ablation")
    overlong = rows["final_eval_accuracy", "no_overlong"]["verdict"]
    assert re.fullmatch(
        r"not testable: token filter overlong acted on 0\.\d+% of responses \(min 1%\), "
        r"shaping overlong_soft on 0\.\d+% of responses \(min 1%\).*",
        overlong,
    ), overlong
    # clip-higher is the other inert knob (0.12% vs 0.27% of tokens clipped; issue 28, finding 6)
    assert NOT_TESTABLE.match(rows["final_eval_accuracy", "no_clip_higher"]["verdict"])
    # dynamic sampling drops ~40% of groups: it acts; the aggregation and GRPO act on every token
    for arm in ("no_dynamic_sampling", "no_token_level_loss", "grpo"):
        assert not NOT_TESTABLE.match(rows["final_eval_accuracy", arm]["verdict"]), arm
    # the truncated share is the filter's own activity: never gated (the #37 design compares
    # final:length/mean instead; -m asks for this one)
    rows = compare_json(stores["dapo_ablation"], "dapo_ablation", "-m", "final:length/truncated_frac")
    assert not NOT_TESTABLE.match(rows["final:length/truncated_frac", "no_overlong"]["verdict"])


@pytest.mark.parametrize("fmt", ["md", "csv", "table"])
def test_every_output_format_says_not_testable_without_a_seed_count(stores, fmt, tmp_path):
    html = tmp_path / "report.html"
    res = CliRunner().invoke(
        app,
        [
            "compare",
            str(STUDIES / "clip_higher.yaml"),
            "--tracking-uri",
            stores["clip_higher"],
            "--no-log",
            "--format",
            fmt,
            "--out",
            str(html),
        ],
    )
    assert res.exit_code == 0, res.output
    for text in (res.stdout, html.read_text()):
        lines = [line for line in text.splitlines() if "not testable: clip_high acted on" in line]
        assert lines, text[:2000]
    verdict_lines = [line for line in res.stdout.splitlines() if "not testable" in line]
    assert not any(re.search(r"seeds? needed|\d+ needed", line) for line in verdict_lines)
