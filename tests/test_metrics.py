"""Canonical step metrics on hand-computed batches."""

import math

import torch

from tests.design_metrics import DESIGN_METRICS
from tests.tolerance import order_tolerance
from workbench.batch import Rollouts, ScoredRollouts
from workbench.metrics import BY_NAME, CATALOGUE
from workbench.metrics.compute import masked_mean_float, rollout_metrics, zero_std_fraction
from workbench.metrics.mismatch import mismatch_metrics
from workbench.tasks import Problem


def scored(rewards, correct, lengths, truncated, group_ids, T=6, timed_out=None):
    B = len(rewards)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    zeros = torch.zeros(B, T)
    r = Rollouts(
        problems=[Problem("1+1=", "2")] * B,
        group_ids=torch.tensor(group_ids),
        prompt_ids=torch.zeros(B, 2, dtype=torch.long),
        prompt_mask=torch.ones(B, 2, dtype=torch.long),
        completion_ids=zeros.long(),
        mask=mask,
        sampler_logp=zeros,
        truncated=torch.tensor(truncated),
        texts=[""] * B,
    )
    flags = None if timed_out is None else torch.tensor(timed_out)
    return ScoredRollouts(r, torch.tensor(rewards), torch.tensor(correct), timed_out=flags)


def test_rollout_metrics_hand_computed():
    s = scored(
        rewards=[1.0, 0.0, 0.0, 0.0],
        correct=[True, False, False, False],
        lengths=[2, 4, 6, 6],
        truncated=[False, False, True, False],
        group_ids=[0, 0, 1, 1],
        timed_out=[False, False, False, True],  # the last one scored incorrect for want of time
    )
    m = rollout_metrics(s)
    assert m["reward/mean"] == 0.25
    assert m["reward/verify_timeout_frac"] == 0.25  # 1 of 4
    # population std, float32: every intermediate (0.25, 0.75², 0.0625, 0.1875) is exact in binary; only
    # sqrt and the cast to a Python float round: 2·eps32 ≈ 2.4e-7 relative; 1e-6 allows it with margin
    assert math.isclose(m["reward/std"], math.sqrt(0.1875), rel_tol=1e-6)
    assert m["accuracy/train"] == 0.25
    assert m["length/mean"] == 4.5 and m["length/max"] == 6
    assert m["length/correct_mean"] == 2.0
    assert math.isclose(m["length/incorrect_mean"], 16 / 3, rel_tol=1e-6)  # 16 exact, one float32 division: eps32
    assert m["length/truncated_frac"] == 0.25
    assert m["batch/zero_std_frac"] == 0.5  # group 1 is all zero


def test_empty_side_is_absent_not_zero():
    s = scored(rewards=[0.0, 0.0], correct=[False, False], lengths=[3, 3], truncated=[False, False], group_ids=[0, 0])
    m = rollout_metrics(s)
    assert "length/correct_mean" not in m and m["length/incorrect_mean"] == 3.0
    assert "reward/verify_timeout_frac" not in m  # not scored by a verifier: unknown, not zero
    s = scored([0.0, 0.0], [False, False], [3, 3], [False, False], [0, 0], timed_out=[False, False])
    assert rollout_metrics(s)["reward/verify_timeout_frac"] == 0.0  # known: none timed out


def test_mismatch_metrics_hand_computed():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    learner = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    sampler = torch.log(torch.tensor([[0.4, 0.2, 0.1]]))  # the padded token differs wildly: ignored
    m = mismatch_metrics(learner, sampler, mask)
    # float32: each value is ≤ 8 rounded operations (two logs, the log-ratio, exp, subtract, abs or log ρ,
    # mean) on quantities ≤ 0.5, so it is within 8·eps32·0.5 ≈ 4.8e-7 of the exact value (tests/tolerance.py)
    tol = order_tolerance(8, 0.5)
    assert math.isclose(m["mismatch/prob_abs_diff_mean"], 0.05, rel_tol=0, abs_tol=tol)
    assert math.isclose(m["mismatch/prob_abs_diff_max"], 0.1, rel_tol=0, abs_tol=tol)
    rho = 0.5 / 0.4  # k3 = (rho - 1) - log rho on the first token, 0 on the second
    assert math.isclose(m["mismatch/kl"], ((rho - 1) - math.log(rho)) / 2, rel_tol=0, abs_tol=tol)


def test_masked_mean_and_zero_std():
    assert masked_mean_float(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1.0, 1.0, 0.0])) == 2.0
    assert masked_mean_float(torch.tensor([1.0]), torch.tensor([0.0])) == 0.0
    assert zero_std_fraction(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1, 2, 2])) == 2 / 3


def test_catalogue_covers_the_design_contract():
    assert set(DESIGN_METRICS) <= set(BY_NAME)
    assert len(BY_NAME) == len(CATALOGUE)


def test_every_metrics_range_follows_from_its_unit_and_excludes_no_value_it_can_take():
    """Bands are cut to a metric's range, so a range narrower than the values would hide data.
    Fractions and probabilities lie in [0, 1]; lengths, times, counts and rates are >= 0; k3 KL
    (exp(-d) + d - 1 >= 0) and entropy are >= 0; k1 KL, losses and rewards can have any sign."""
    import math

    from workbench.metrics.catalogue import NON_NEGATIVE, UNBOUNDED, UNIT_INTERVAL, metric_bounds

    by_unit = {
        "fraction": UNIT_INTERVAL,
        "probability": UNIT_INTERVAL,
        "tokens": NON_NEGATIVE,
        "s": NON_NEGATIVE,
        "count": NON_NEGATIVE,
        "tokens/s": NON_NEGATIVE,
        "norm": NON_NEGATIVE,
        "ratio": NON_NEGATIVE,
        "loss": UNBOUNDED,
    }
    for m in CATALOGUE:
        if m.unit in by_unit:
            assert m.bounds == by_unit[m.unit], m.name
        assert m.bounds[0] < m.bounds[1] and not any(map(math.isnan, m.bounds)), m.name
    assert metric_bounds("mismatch/kl") == NON_NEGATIVE  # k3
    assert metric_bounds("policy/approx_kl") == UNBOUNDED  # k1 can be negative
    assert metric_bounds("kl/ref") == UNBOUNDED  # the estimator is the user's choice (k1 included)
    assert metric_bounds("not/catalogued") == UNBOUNDED


def test_every_healthy_range_lies_inside_the_metrics_bounds():
    """The health tests' synthetic healthy streams draw each metric from its healthy_range
    (tests/health/streams.py), so the range must be values the metric can take."""
    for m in CATALOGUE:
        lo, hi = m.healthy_range
        assert m.bounds[0] <= lo <= hi <= m.bounds[1], m.name
    assert BY_NAME["health/status"].healthy_range == (0.0, 0.0)  # a healthy run's status is ok
    assert BY_NAME["length/truncated_frac"].healthy_range == (0.0, 0.1)
