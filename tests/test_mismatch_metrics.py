"""The mismatch flight recorder's metrics (workbench/metrics/mismatch.py): hand-computed on a batch small
enough to do on paper, and equal to verl 0.9.1's own functions where verl defines the same quantity."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from tests.algorithms.strategies import random_logps, random_mask, with_garbage
from tests.algorithms.test_verl_parity import load_verl
from tests.tolerance import EPS64, order_tolerance
from workbench.metrics import BY_NAME
from workbench.metrics.mismatch import HIST_EDGES, mismatch_metrics, mismatch_record, repetition_frac

# Two sequences: tokens (0.5 vs 0.4), (0.2 vs 0.2) and (0.3 vs 0.6); the padding disagrees wildly.
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
LEARNER = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.9, 0.9]]))
SAMPLER = torch.log(torch.tensor([[0.4, 0.2, 0.1], [0.6, 0.01, 0.01]]))
ENTROPY = torch.tensor([[1.0, 3.0, 99.0], [2.0, 99.0, 99.0]])


def test_every_metric_hand_computed():
    m = mismatch_metrics(LEARNER, SAMPLER, MASK, entropy=ENTROPY, cap=1.2)
    rho = [1.25, 1.0, 0.5]  # 0.5/0.4, 0.2/0.2, 0.3/0.6
    delta = [math.log(r) for r in rho]
    seq_delta = [delta[0] + delta[1], delta[2]]
    ppl_learner = [1 / math.sqrt(0.5 * 0.2), 1 / 0.3]  # exp(−mean log p) per sequence
    ppl_sampler = [1 / math.sqrt(0.4 * 0.2), 1 / 0.6]
    k3 = sum(r - 1 - math.log(r) for r in rho) / 3
    expected = {
        "mismatch/prob_abs_diff_mean": (0.1 + 0.0 + 0.3) / 3,
        "mismatch/prob_abs_diff_max": 0.3,
        "mismatch/kl": k3,
        "mismatch/kl_k1": -sum(delta) / 3,
        "mismatch/log_ratio_abs_mean": sum(map(abs, delta)) / 3,
        "mismatch/log_ratio_abs_max": math.log(2),
        "mismatch/is_ratio_mean": 2.75 / 3,
        "mismatch/is_ratio_std": math.sqrt(2.8125 / 3 - (2.75 / 3) ** 2),
        "mismatch/is_ratio_min": 0.5,
        "mismatch/is_ratio_max": 1.25,
        "mismatch/is_ratio_p1": 0.5 + 0.02 * 0.5,  # linear interpolation at rank 0.01·(3−1) = 0.02
        "mismatch/is_ratio_p50": 1.0,
        "mismatch/is_ratio_p99": 1.0 + 0.98 * 0.25,  # rank 1.98
        "mismatch/is_ratio_tail_frac": 2 / 3,  # 1.25 and 0.5 lie outside [0.9, 1.1]
        "mismatch/is_ratio_above_cap_frac": 1 / 3,  # 1.25 > 1.2
        "mismatch/is_ratio_below_cap_frac": 1 / 3,  # 0.5 < 1/1.2
        "mismatch/ess": (2.75 / 3) ** 2 / (2.8125 / 3),
        "mismatch/chi2_token": 2.8125 / 3 - 1,
        "mismatch/chi2_seq": (1.25**2 + 0.5**2) / 2 - 1,
        "mismatch/seq_log_ratio_mean": sum(seq_delta) / 2,
        "mismatch/seq_log_ratio_std": abs(seq_delta[0] - seq_delta[1]) / 2,
        "mismatch/seq_log_ratio_min": seq_delta[1],
        "mismatch/seq_log_ratio_max": seq_delta[0],
        "mismatch/learner_ppl": sum(ppl_learner) / 2,
        "mismatch/sampler_ppl": sum(ppl_sampler) / 2,
        "mismatch/log_ppl_diff": sum(math.log(a / b) for a, b in zip(ppl_learner, ppl_sampler)) / 2,
        "mismatch/ppl_ratio": sum(a / b for a, b in zip(ppl_learner, ppl_sampler)) / 2,
        "mismatch/token_mult_prob_error": (1.25 + 1.0 + 2.0) / 3,  # NeMo-RL: mean exp|Δ|
        "mismatch/kl_ent_ratio": k3 / 2.0,  # entropy mean over the 3 response tokens: (1 + 3 + 2)/3
    }
    # The inputs are float32 logs of the probabilities (one rounding each, relative eps32 of the log,
    # |log p| ≤ 1.7): every Δ carries ≤ 2·eps32·1.7 ≈ 4e-7, and each metric is ≤ 10 further float64
    # operations on values ≤ 3.4 (the perplexities): 10·eps64 is negligible, so 2·eps32·1.7 times the
    # largest derivative of a metric in Δ (exp(2Δ)·2 ≤ 3.2 for chi2, ≤ 3.4 for a perplexity) bounds it.
    tol = order_tolerance(2, 1.7) * 3.4
    for name, value in expected.items():
        assert m[name] == pytest.approx(value, abs=tol), name
    assert set(m) <= set(BY_NAME), set(m) - set(BY_NAME)  # every logged name is catalogued


def test_identical_engines_log_the_exact_no_mismatch_values():
    logp = torch.log(torch.rand(4, 5, generator=torch.Generator().manual_seed(0)))
    m = mismatch_metrics(logp, logp.clone(), torch.ones(4, 5), cap=2.0)
    assert m["mismatch/ess"] == 1.0 and m["mismatch/chi2_token"] == 0.0 and m["mismatch/kl"] == 0.0
    assert m["mismatch/token_mult_prob_error"] == 1.0 and m["mismatch/is_ratio_tail_frac"] == 0.0
    assert m["mismatch/is_ratio_p1"] == m["mismatch/is_ratio_p99"] == 1.0
    assert m["mismatch/learner_ppl"] == m["mismatch/sampler_ppl"]


def test_no_response_tokens_log_nothing():
    assert mismatch_metrics(LEARNER, SAMPLER, torch.zeros_like(MASK)) == {}


def test_quantiles_are_numpy_linear_quantiles_of_the_response_tokens():
    gen = torch.Generator().manual_seed(3)
    mask = random_mask(gen, 16, 20)
    new, old = random_logps(gen, 16, 20, spread=0.05)
    m = mismatch_metrics(with_garbage(new, mask, gen), with_garbage(old, mask, gen), mask)
    rho = np.exp((new.double() - old.double())[mask.bool()].numpy())
    for q in (1, 5, 50, 95, 99):
        # the same float64 ratios sorted and interpolated: ≤ 4 operations on values ≤ 1.2
        assert m[f"mismatch/is_ratio_p{q}"] == pytest.approx(np.quantile(rho, q / 100), abs=4 * EPS64 * 1.2)


def test_repetition_frac_hand_computed():
    ids = torch.tensor(
        [
            [7, 7, 7, 7, 0, 0, 0, 0],  # "7" four times: a loop
            [1, 2, 1, 2, 1, 2, 1, 2],  # "1 2" four times: a loop
            [1, 2, 1, 2, 1, 2, 3, 4],  # "1 2" three times: not yet
            [5, 5, 5, 5, 5, 5, 5, 5],  # only 3 response tokens: the padding never counts
        ]
    )
    mask = (torch.arange(8)[None] < torch.tensor([4, 8, 8, 3])[:, None]).float()
    assert repetition_frac(ids, mask) == 0.5


def test_record_histogram_and_worst_tokens_hand_computed():
    record = mismatch_record(LEARNER, SAMPLER, MASK, torch.tensor([[11, 12, 13], [21, 22, 23]]), worst=2)
    assert record["tokens"] == 3 and sum(record["counts"]) == 3
    edges = [-math.inf, *HIST_EDGES, math.inf]
    bins = {k for k, c in enumerate(record["counts"]) for _ in range(c)}
    # Δ = log 1.25 = 0.223 ∈ (0.1, 0.316], 0 ∈ (−1e-6, 1e-6], log 0.5 = −0.693 ∈ (−1, −0.316]
    assert {(edges[k], edges[k + 1]) for k in bins} == {(0.1, 10**-0.5), (-1e-6, 1e-6), (-1.0, -(10**-0.5))}
    worst = record["worst_tokens"]
    assert [(w["sequence"], w["position"], w["token_id"]) for w in worst] == [(1, 0, 21), (0, 0, 11)]
    assert worst[0]["learner_logp"] == pytest.approx(math.log(0.3)) and worst[0]["log_ratio"] == pytest.approx(
        math.log(0.5)
    )


# --- parity with verl 0.9.1's rollout_corr_helper ---------------------------------------------------

VERL_OFFPOLICY = {  # verl compute_offpolicy_metrics key -> workbench name
    "kl": "mismatch/kl_k1",
    "k3_kl": "mismatch/kl",
    "training_ppl": "mismatch/learner_ppl",
    "rollout_ppl": "mismatch/sampler_ppl",
    "log_ppl_diff": "mismatch/log_ppl_diff",
    "ppl_ratio": "mismatch/ppl_ratio",
    "chi2_token": "mismatch/chi2_token",
    "chi2_seq": "mismatch/chi2_seq",
}
VERL_IS = {  # verl compute_is_metrics key (token level, raw weights) -> workbench name
    "rollout_is_mean": "mismatch/is_ratio_mean",
    "rollout_is_max": "mismatch/is_ratio_max",
    "rollout_is_min": "mismatch/is_ratio_min",
    "rollout_is_ratio_fraction_high": "mismatch/is_ratio_above_cap_frac",
    "rollout_is_ratio_fraction_low": "mismatch/is_ratio_below_cap_frac",
}


@pytest.fixture(scope="module")
def verl():
    return load_verl()


def _inputs(seed: int, spread: float):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, 12, 9)
    learner, sampler = random_logps(gen, 12, 9, spread=spread)
    return with_garbage(learner, mask, gen), with_garbage(sampler, mask, gen), mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spread", [0.01, 0.3])
def test_offpolicy_metrics_match_verl(verl, seed, spread):
    learner, sampler, mask = _inputs(seed, spread)
    ours = mismatch_metrics(learner, sampler, mask, cap=2.0)
    theirs = verl.rollout_corr.compute_offpolicy_metrics(learner, sampler, mask)
    on = mask.bool()
    seq_sum = torch.where(on, learner - sampler, 0.0).sum(-1).double()
    largest = {  # the largest term each mean sums: (Π ρ)² per sequence, ρ² per token, a sequence's perplexity
        "chi2_seq": float((2 * seq_sum).exp().max()) + 1,
        "chi2_token": float((2 * (learner - sampler)[on].double()).exp().max()) + 1,
        "training_ppl": float((-learner[on]).exp().max()),
        "rollout_ppl": float((-sampler[on]).exp().max()),
    }
    for key, name in VERL_OFFPOLICY.items():
        # verl reduces in float32 (ours float64): a mean of ≤ 108 tokens (or 12 sequences) of values of size
        # ≤ |v| differs by ≤ 108·eps32·max|v| plus the exp's own rounding (110 operations in all)
        magnitude = largest[key] if key in largest else max(abs(theirs[key]), abs(ours[name])) + 1
        assert ours[name] == pytest.approx(theirs[key], rel=0, abs=order_tolerance(110, magnitude)), key


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cap", [1.05, 2.0])
def test_ratio_metrics_match_verl_token_is_on_raw_weights(verl, seed, cap):
    learner, sampler, mask = _inputs(seed, 0.1)
    ours = mismatch_metrics(learner, sampler, mask, cap=cap)
    raw = torch.exp((learner - sampler).clamp(-20, 20))
    bounded = verl.rollout_corr.compute_is_metrics(raw, raw, learner - sampler, mask, "token", cap)
    # verl's std and ESS are of the weights clamped at the threshold: with an unreachable one, of the raw ratios
    unbounded = verl.rollout_corr.compute_is_metrics(raw, raw, learner - sampler, mask, "token", 1e9)
    tol = order_tolerance(110, 2.0)  # float32 means of ≤ 108 ratios ≤ exp(0.1·4) < 2
    for key, name in VERL_IS.items():
        assert ours[name] == pytest.approx(bounded[key], rel=0, abs=tol), key
    assert ours["mismatch/is_ratio_std"] == pytest.approx(unbounded["rollout_is_std"], rel=0, abs=math.sqrt(tol))
    # verl divides by (mean + 1e-8): a relative 2e-8 on top of the float32 reduction
    assert ours["mismatch/ess"] == pytest.approx(unbounded["rollout_is_eff_sample_size"], rel=0, abs=tol + 2e-8)


def test_a_verl_rollout_corr_log_imports_as_the_workbench_metrics(verl):
    """verl's own rollout_corr/* numbers, through the verl importer, land on the names the workbench logs for
    the same batch (and so face the same health rules)."""
    from workbench.importers.adapters import ADAPTERS

    learner, sampler, mask = _inputs(0, 0.05)
    logged = {
        f"rollout_corr/{k}": v for k, v in verl.rollout_corr.compute_offpolicy_metrics(learner, sampler, mask).items()
    }
    imported = ADAPTERS.get("verl").convert_step(logged)
    ours = mismatch_metrics(learner, sampler, mask)
    canonical = {name: value for name, value in imported.items() if not name.startswith("source/")}
    assert set(canonical) == set(VERL_OFFPOLICY.values())
    for name, value in canonical.items():
        # float32 means of ≤ 108 values ≤ exp(2·9·0.05·4) ≈ 37 (chi2_seq's largest term): 110·eps32·37
        assert ours[name] == pytest.approx(value, rel=0, abs=order_tolerance(110, 37.0)), name


# --- the fast paths give the reference's bits -------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 20, 101, 2464, 40_000])
def test_picked_quantiles_are_torch_quantile_bit_for_bit(n):
    """mismatch_metrics picks the order statistics instead of sorting (workbench/metrics/mismatch.py):
    the quantiles must be torch.quantile's own numbers, ties and a NaN included."""
    from workbench.metrics.mismatch import QUANTILES, _linear_quantiles

    gen = torch.Generator().manual_seed(n)
    levels = torch.tensor(QUANTILES, dtype=torch.float64)
    ratios = torch.exp(0.01 * torch.randn(n, generator=gen, dtype=torch.float64))
    tied = torch.randint(0, 3, (n,), generator=gen).double()  # many equal values
    for values in (ratios, tied):
        assert torch.equal(_linear_quantiles(values, values.max()), torch.quantile(values, levels))
    if n > 1:
        with_nan = ratios.clone()
        with_nan[n // 2] = float("nan")
        assert torch.quantile(with_nan, levels).isnan().all()
        assert _linear_quantiles(with_nan, with_nan.max()).isnan().all()


@pytest.mark.parametrize("n", [1, 7, 4096, 40_000])
def test_means_from_sums_are_tensor_mean_bit_for_bit(n):
    from workbench.metrics.mismatch import _means

    values = torch.randn(3, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64).exp()
    flags = values[0] > 1  # a fraction: an integer count over n
    sums = {"a": values[0].sum(), "b": values[1].sum(), "c": values[2].sum(), "frac": flags.sum()}
    expected = torch.stack([values[0].mean(), values[1].mean(), values[2].mean(), flags.double().mean()])
    assert torch.equal(_means(sums, n), expected)


def test_a_record_reads_back_and_a_broken_one_is_one_line():
    from workbench.tracking.artifacts import decode_mismatch_records

    record = {"step": 3} | mismatch_record(LEARNER, SAMPLER, MASK, torch.tensor([[11, 12, 13], [21, 22, 23]]))
    later = record | {"step": 7}
    assert decode_mismatch_records([later, record]) == [record, later]  # step order
    for broken, message in [
        ({"not": "a list"}, "mismatch.json is not a list of records (got dict)"),
        ([{k: v for k, v in record.items() if k != "counts"}], "mismatch.json record 0 lacks ['counts']"),
        ([record | {"counts": record["counts"][:-1]}], "counts must be 27 non-negative integers"),
        ([record | {"tokens": 4}], "counts sum to 3, not its 4 tokens"),
        ([record | {"worst_tokens": [{"sequence": 0}]}], "worst_tokens must be objects with sequence, position"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            decode_mismatch_records(broken)


@pytest.mark.slow
def test_the_record_reads_the_updates_own_logprobs_and_adds_no_forward(monkeypatch):
    """The mismatch record is built from the logprobs the update computes before its optimizer step (the
    "old" policy's), so recording every step costs no learner forward: a run records at each step and
    calls the learner exactly as often as the same run with the record off. Each record covers every
    response token of its batch (its histogram's counts add up to them)."""
    from tests.conftest import micro_run_config
    from workbench.config import RunConfig
    from workbench.health import HealthMonitor
    from workbench.train.learner import TorchLearner
    from workbench.train.loop import train

    calls: list[int] = []
    forward = TorchLearner.logprobs
    monkeypatch.setattr(TorchLearner, "logprobs", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))

    def run(every: int):
        calls.clear()
        cfg = RunConfig.model_validate(micro_run_config(health={"mismatch_record_every": every, "step0_gate": False}))

        class Sink:
            def log_metrics(self, metrics, step):
                pass

        result = train(cfg, Sink(), HealthMonitor.from_config(cfg.health))
        return len(calls), result.mismatch_records, cfg

    off_calls, off_records, cfg = run(0)
    on_calls, records, _ = run(1)
    assert off_records == [] and on_calls == off_calls
    assert [r["step"] for r in records] == list(range(cfg.rollout.steps))
    rows = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    for record in records:
        assert 0 < sum(record["counts"]) <= rows * cfg.sampler.max_new_tokens
