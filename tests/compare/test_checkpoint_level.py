"""The checkpoint as the unit when it varies (``replicate: {cold_start: k}``): seeds averaged within each
checkpoint, the test over checkpoints; and "intervals over RL seeds of one checkpoint" said when it does not."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.power import TTestPower

from workbench.compare import CompareSettings, ComparisonTable, compare_variants
from workbench.compare.checkpoints import CHECKPOINT_COLUMN, ONE_CHECKPOINT, checkpoint_level

METRIC = "final_eval_accuracy"


def frame(values: dict[str, list[list[float]]], **extra) -> pd.DataFrame:
    """variant -> per checkpoint, its seeds' values."""
    rows = [
        {"variant": v, "seed": s, CHECKPOINT_COLUMN: c, METRIC: x, **extra}
        for v, per in values.items()
        for c, seeds in enumerate(per)
        for s, x in enumerate(seeds)
    ]
    return pd.DataFrame(rows)


def test_seeds_are_averaged_within_each_checkpoint():
    df = frame({"a": [[0.1, 0.3], [0.5, 0.7]], "b": [[0.2, 0.2], [0.4, 0.6]]})
    out, rep = checkpoint_level(df, [METRIC], variant_col="variant", arm_col=None, seed_col="seed")
    assert rep.unit == "checkpoint" and rep.checkpoints == {"a": 2, "b": 2} and rep.seeds["a"] == (2, 2)
    # hand: (0.1+0.3)/2, (0.5+0.7)/2, (0.2+0.2)/2, (0.4+0.6)/2; two additions and one halving each, values
    # below 1: at most 2 ulp(1) = 4.4e-16 apart from the decimal
    assert out[METRIC].to_numpy() == pytest.approx([0.2, 0.6, 0.2, 0.5], abs=4.4e-16)
    assert out["seed"].tolist() == [0, 1, 0, 1]  # the checkpoint's index: pairs cold start i with cold start i
    assert out["n_runs_in_checkpoint"].tolist() == [2, 2, 2, 2]


def test_a_checkpoint_takes_its_worst_runs_outcome():
    df = frame({"a": [[0.1, 0.3], [0.5, math.inf], [0.2, math.nan]]})
    df["status"] = "FINISHED"
    df["stopped_early"] = False
    df.loc[1, "status"] = "FAILED"  # checkpoint 0, seed 1
    out, _ = checkpoint_level(df, [METRIC], variant_col="variant", arm_col=None, seed_col="seed")
    assert out["status"].tolist() == ["FAILED", "FINISHED", "FINISHED"]
    assert math.isinf(out[METRIC].iloc[1]) and math.isnan(out[METRIC].iloc[2])  # censored, missing: not a mean


def test_one_checkpoint_per_arm_leaves_the_runs_as_they_are():
    df = frame({"a": [[0.1, 0.3, 0.2]], "b": [[0.2, 0.4, 0.3]]})
    for given in (df, df.drop(columns=CHECKPOINT_COLUMN)):  # no column: the runs of earlier studies
        out, rep = checkpoint_level(given, [METRIC], variant_col="variant", arm_col=None, seed_col="seed")
        assert rep.unit == "seed" and out is given


def test_every_output_says_what_the_unit_is():
    one = compare_variants(
        frame({"a": [[0.1, 0.3, 0.2]], "b": [[0.2, 0.4, 0.3]]}), "a", [METRIC], CompareSettings(n_resamples=0)
    )
    many = compare_variants(
        frame({"a": [[0.1, 0.3], [0.2, 0.2], [0.4, 0.5]], "b": [[0.2, 0.4], [0.3, 0.1], [0.5, 0.5]]}),
        "a",
        [METRIC],
        CompareSettings(n_resamples=0),
    )
    for table in (one, ComparisonTable.from_dict(one.to_dict())):
        assert any(ONE_CHECKPOINT in line for line in table.definitions())
        assert ONE_CHECKPOINT in table.to_markdown()
        assert "intervals over RL seeds of one checkpoint" in table.to_markdown().split("### ")[0]  # the headline block
        assert "with 3 seeds" in table.headlines()[0]
    for table in (many, ComparisonTable.from_dict(many.to_dict())):
        assert "with 3 checkpoints" in table.headlines()[0]
        assert any("the checkpoint is the unit" in line and "2 RL seeds each" in line for line in table.definitions())
        assert "| n_checkpoints |" in table.to_markdown()
    row = many.df.set_index("variant").loc["b"]
    # hand: checkpoint means a = 0.2, 0.2, 0.45; b = 0.3, 0.2, 0.5; paired differences 0.1, 0, 0.05 -> mean 0.05
    assert row["n_seeds"] == 3 and row["paired"]
    assert row["delta"] == pytest.approx(0.05, abs=1e-15)  # a few sums of values below 1: ~4 ulp


def test_runs_are_named_apart_where_their_seeds_repeat_across_cold_starts():
    from workbench.analysis.comparison import runs_overview
    from workbench.analysis.health_table import run_label
    from workbench.compare.panels import run_labels

    runs = pd.DataFrame(
        {
            "run_id": list("abcd"),
            "variant": ["v"] * 4,
            "arm": ["v"] * 4,
            "seed": [0, 1, 0, 1],
            CHECKPOINT_COLUMN: [None, None, "1", "1"],
            "status": ["FINISHED"] * 4,
            "health": ["ok"] * 4,
        }
    )
    assert list(run_labels(runs).values()) == ["v/seed=0", "v/seed=1", "v/cold_start=1/seed=0", "v/cold_start=1/seed=1"]
    assert [run_label(r) for r in runs.to_dict("records")] == list(run_labels(runs).values())
    overview = runs_overview(runs)
    assert overview["cold starts"].tolist() == [2] and overview["n_seeds"].tolist() == [2]
    assert "cold starts" not in runs_overview(runs.drop(columns=CHECKPOINT_COLUMN)).columns  # as it was


# --------------------------------------------------------------------------------------------
# Simulation: with checkpoint-level variance, the seed-level test is anti-conservative and the
# checkpoint-level one holds its level and has the power of a t-test over checkpoints.
# --------------------------------------------------------------------------------------------

K, S = 3, 3  # checkpoints per arm, seeds per checkpoint: the priming re-run's design
SD_CKPT, SD_SEED = 1.0, 1.0
REPS = 1000
ALPHA = 0.05


def simulate(rng: np.random.Generator, effect: float) -> pd.DataFrame:
    """Two arms, each with K independent checkpoints (a priming arm's SFT is its own: the checkpoint effects of
    the two arms are independent) and S seeds each; arm b is ``effect`` higher."""
    rows = []
    for arm, shift in (("a", 0.0), ("b", effect)):
        for c in range(K):
            u = rng.normal(0.0, SD_CKPT)
            for s in range(S):
                rows.append(
                    {"variant": arm, "seed": s, CHECKPOINT_COLUMN: c, "m": shift + u + rng.normal(0.0, SD_SEED)}
                )
    return pd.DataFrame(rows)


def rejects(df: pd.DataFrame, *, naive: bool, effect: float) -> tuple[bool, bool]:
    """(the test rejected, the Δ interval covers the true effect)."""
    if naive:  # every run its own seed: the test the comparison made before checkpoints were told apart
        df = df.assign(seed=df[CHECKPOINT_COLUMN] * S + df["seed"])
    settings = CompareSettings(
        n_resamples=0, higher_is_better={"m": True}, checkpoint_col=None if naive else CHECKPOINT_COLUMN
    )
    row = compare_variants(df, "a", ["m"], settings).df.set_index("variant").loc["b"]
    return row["p_adjusted"] < ALPHA, row["delta_lo"] <= effect <= row["delta_hi"]


@pytest.mark.slow
def test_seed_level_test_is_anti_conservative_and_checkpoint_level_holds_its_level():
    rng = np.random.default_rng(52)
    naive = np.array([rejects(simulate(rng, 0.0), naive=True, effect=0.0) for _ in range(REPS)])
    rng = np.random.default_rng(52)  # the same data for both tests
    two_level = np.array([rejects(simulate(rng, 0.0), naive=False, effect=0.0) for _ in range(REPS)])
    se = math.sqrt(ALPHA * (1 - ALPHA) / REPS)  # Monte Carlo SE of a 5% rate over REPS: 0.0069
    # two-level: paired t over K checkpoint means, exact under this normal model -> 5% within 3 MC SE
    assert abs(two_level[:, 0].mean() - ALPHA) < 3 * se, two_level[:, 0].mean()
    assert abs(two_level[:, 1].mean() - (1 - ALPHA)) < 3 * se  # its interval covers 0 as often as it should
    # seed level: the 9 runs of an arm share 3 checkpoints (ICC 0.5 of a paired difference): the standard error
    # is under-estimated by ~1.5x and the test rejects ~14% of the time; 0.10 is > 3 MC SE below that
    assert naive[:, 0].mean() > 0.10, naive[:, 0].mean()
    assert naive[:, 1].mean() < 0.90


@pytest.mark.slow
def test_checkpoint_level_power_is_that_of_a_t_test_over_checkpoints():
    effect = 4.0
    rng = np.random.default_rng(7)
    sims = np.array([rejects(simulate(rng, effect), naive=False, effect=effect) for _ in range(REPS)])
    # paired difference of two checkpoint means: variance 2 (SD_CKPT^2 + SD_SEED^2 / S) = 2.667, K pairs
    sd_d = math.sqrt(2 * (SD_CKPT**2 + SD_SEED**2 / S))
    expected = TTestPower().power(effect_size=effect / sd_d, nobs=K, alpha=ALPHA, alternative="two-sided")
    se = math.sqrt(expected * (1 - expected) / REPS)  # MC SE of the rejection rate: ~0.016
    assert abs(sims[:, 0].mean() - expected) < 3 * se, (sims[:, 0].mean(), expected)
    assert abs(sims[:, 1].mean() - (1 - ALPHA)) < 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)  # coverage at an effect
