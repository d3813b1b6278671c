"""Parity with verl 0.9.1's ``verl/trainer/ppo/core_algos.py``: same names, same numbers.

Where a workbench name coincides with a verl one, values and gradients must agree on random
inputs, up to float32 rounding: each comparison's tolerance is operand count × eps ×
magnitude for the computation compared (tests/tolerance.py), ≈ 1e-5 or below for per-token values. verl is imported from a separate directory (its dependencies
conflict with ours): ``tests/algorithms/install_verl.sh DIR`` installs it there, and
``WORKBENCH_VERL_PATH=DIR`` points these tests at it. Without it they are skipped, unless
``WORKBENCH_REQUIRE_VERL=1`` (set by .ci/run), where a missing or unimportable verl fails them.

Conventions the workbench fixes where verl leaves a choice (and what the tests feed verl):
``dual_clip=None`` is verl with an unreachable ``clip_ratio_c``; ``dr_grpo`` is verl's
``grpo`` with ``norm_adv_by_std_in_grpo=False``; ``reinforce_plus_plus_baseline`` given the
response ``mask`` whitens over tokens as verl does (without one, per completion, which is
verl's whitening with one token per response).
Metrics follow docs/metrics.md; they are compared only where the two definitions coincide.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from tests.algorithms.strategies import clip_range, random_logps, random_mask, with_garbage
from tests.tolerance import order_tolerance
from workbench.algorithms import (
    AGG_MODES,
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    entropy_from_logits,
    importance_weights,
    kl_penalty,
)

ENV = "WORKBENCH_VERL_PATH"
REQUIRE_ENV = "WORKBENCH_REQUIRE_VERL"
VERL_VERSION = "0.9.1"
# Per-token values and their gradients: ≤ 10 float32 operations each, of values ≤ 1 in size (relative
# beyond): 10·eps32 ≈ 1.2e-6. Sums and normalised statistics get their own bounds below.
TOL = {"rtol": order_tolerance(10, 1.0), "atol": order_tolerance(10, 1.0)}


def tol(operands: int, magnitude: float) -> dict[str, float]:
    """Two float32 evaluations of ``operands`` rounded operations on values ≤ ``magnitude``."""
    return {"rtol": 0.0, "atol": order_tolerance(operands, magnitude)}


def smallest_group_std(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """The smallest Bessel std among groups of ≥ 2 (float64), 1 when there is none: a normalised
    advantage carries its group mean's rounding error divided by this."""
    stds = [
        float(rewards[group_ids == g].double().std())
        for g in torch.unique(group_ids)
        if int((group_ids == g).sum()) > 1
    ]
    return min(stds, default=1.0)


B, T = 12, 9
NO_DUAL_CLIP = 1e9  # a clip_ratio_c no ratio reaches: verl's dual clip switched off
CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # asymmetric on purpose (DAPO clip-higher)


@dataclass
class Verl:
    core: Any  # verl.trainer.ppo.core_algos
    functional: Any  # verl.utils.torch_functional
    rollout_corr: Any  # verl.trainer.ppo.rollout_corr_helper
    actor_config: type  # verl.workers.config.ActorConfig

    def config(self, *, dual_clip: float | None = None, norm_constant: float | None = None):
        info = {} if norm_constant is None else {"loss_scale_factor": norm_constant}
        return self.actor_config(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            clip_ratio=CLIP_LOW,
            clip_ratio_low=CLIP_LOW,
            clip_ratio_high=CLIP_HIGH,
            clip_ratio_c=NO_DUAL_CLIP if dual_clip is None else dual_clip,
            global_batch_info=info,
        )


def _import_verl(path: str) -> Verl:
    """Import verl from ``path`` without leaving it on sys.path or touching global logging.

    verl's import chain names ``ray`` (a heavy, conflicting dependency) only as an annotation
    (``ray.ObjectRef``); when ray is not installed a stand-in module provides that name.
    """
    saved_path = list(sys.path)
    root = logging.getLogger()
    saved_logging = (root.level, list(root.handlers))
    stand_in = None
    sys.path.insert(0, path)
    try:
        try:
            import ray  # noqa: F401 - imported only to know whether Ray is here
        except ImportError:
            stand_in = types.ModuleType("ray")
            stand_in.ObjectRef = type("ObjectRef", (), {})
            sys.modules["ray"] = stand_in
        verl = importlib.import_module("verl")
        if verl.__version__ != VERL_VERSION:
            verl_unavailable(f"{ENV}={path} holds verl {verl.__version__}; parity is pinned to verl {VERL_VERSION}")
        return Verl(
            core=importlib.import_module("verl.trainer.ppo.core_algos"),
            functional=importlib.import_module("verl.utils.torch_functional"),
            rollout_corr=importlib.import_module("verl.trainer.ppo.rollout_corr_helper"),
            actor_config=importlib.import_module("verl.workers.config").ActorConfig,
        )
    finally:
        sys.path[:] = saved_path
        if stand_in is not None and sys.modules.get("ray") is stand_in:
            del sys.modules["ray"]
        root.setLevel(saved_logging[0])
        root.handlers[:] = saved_logging[1]


def verl_unavailable(reason: str) -> None:
    """Skip, or fail under ``WORKBENCH_REQUIRE_VERL=1``: in CI the parity contract may not vanish."""
    (pytest.fail if os.environ.get(REQUIRE_ENV) == "1" else pytest.skip)(reason)


def load_verl() -> Verl:
    path = os.environ.get(ENV)
    if not path:
        verl_unavailable(
            f"{ENV} is not set: run tests/algorithms/install_verl.sh DIR and set {ENV}=DIR to check verl parity"
        )
    if not os.path.isdir(path):
        verl_unavailable(f"{ENV}={path} is not a directory (run tests/algorithms/install_verl.sh {path})")
    try:
        return _import_verl(path)
    except (pytest.skip.Exception, pytest.fail.Exception):
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure: report why (a skip, or a failure when verl is required)
        verl_unavailable(f"cannot import verl {VERL_VERSION} from {ENV}={path}: {exc!r}")


@pytest.fixture(scope="module")
def verl() -> Verl:
    return load_verl()


def test_missing_verl_fails_when_required_and_skips_otherwise(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path / "absent"))
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="is not a directory"):
        load_verl()
    monkeypatch.delenv(ENV)
    with pytest.raises(pytest.fail.Exception, match="is not set"):
        load_verl()
    monkeypatch.setenv(REQUIRE_ENV, "0")
    with pytest.raises(pytest.skip.Exception, match="is not set"):
        load_verl()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


SEEDS = [0, 1, 2]

# --- advantage estimators -----------------------------------------------------------------------


def _grouped(seed: int, length: int = T, sizes: tuple[int, ...] = (1, 2, 3, 4, 5)):
    """Rewards with random group sizes (by default including single completions) in random order."""
    gen = _gen(seed)
    group_ids = torch.cat([torch.full((n,), 10 * g + 3) for g, n in enumerate(sizes)])
    group_ids = group_ids[torch.randperm(group_ids.numel(), generator=gen)]
    n = group_ids.numel()
    rewards = torch.where(
        torch.rand(n, generator=gen) < 0.5,
        torch.randint(0, 2, (n,), generator=gen).float(),
        torch.randn(n, generator=gen),
    )
    mask = random_mask(gen, n, length)
    lengths = mask.sum(-1).long()
    token_rewards = torch.zeros(n, length)
    token_rewards[torch.arange(n), lengths - 1] = rewards  # outcome reward on the last response token
    return rewards, group_ids, token_rewards, mask


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [
        ("grpo", "grpo", {"norm_adv_by_std_in_grpo": True}),
        ("dr_grpo", "grpo", {"norm_adv_by_std_in_grpo": False}),
        ("rloo", "rloo", {}),
    ],
)
def test_group_advantages_match_verl(verl, seed, ours, theirs, kwargs):
    rewards, group_ids, token_rewards, mask = _grouped(seed)
    expected, _ = verl.core.get_adv_estimator_fn(theirs)(
        token_level_rewards=token_rewards, response_mask=mask, index=group_ids.numpy(), epsilon=1e-6, **kwargs
    )
    adv = compute_advantages(ours, rewards, group_ids, epsilon=1e-6)
    # group means and stds of ≤ 5 rewards (≤ 4·5 operations), amplified by 1/std for grpo
    scale = 1.0 / (smallest_group_std(rewards, group_ids) + 1e-6) if kwargs.get("norm_adv_by_std_in_grpo") else 2.0
    torch.testing.assert_close(adv[:, None] * mask, expected, **tol(20, float(rewards.abs().max()) * scale))


@pytest.mark.parametrize("seed", [*SEEDS, 3, 4, 5])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_passk_matches_verl(verl, seed, norm_by_std):
    # verl requires >= 2 completions per group (a group of one raises there; here it is r / (1 + eps)).
    # Half the rewards are 0/1, so groups with a tied best (all advantages 0) occur as well as unique bests.
    rewards, group_ids, token_rewards, mask = _grouped(seed, sizes=(2, 3, 4, 5, 8))
    expected, _ = verl.core.get_adv_estimator_fn("grpo_passk")(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=group_ids.numpy(),
        epsilon=1e-6,
        config={"norm_adv_by_std_in_grpo": norm_by_std},
    )
    adv = compute_advantages("grpo_passk", rewards, group_ids, epsilon=1e-6, norm_by_std=norm_by_std)
    assert int((adv != 0).sum()) == int((expected.abs().sum(-1) != 0).sum())  # the same completions move
    # one subtraction, then (normalised) a Bessel std of ≤ 8 rewards (≤ 4·8 operations) amplified by 1/std
    scale = 1.0 / (smallest_group_std(rewards, group_ids) + 1e-6) if norm_by_std else 1.0
    torch.testing.assert_close(adv[:, None] * mask, expected, **tol(32, float(rewards.abs().max()) * scale))


def _verl_reinforce_pp(verl, token_rewards, mask, group_ids):
    expected, _ = verl.core.get_adv_estimator_fn("reinforce_plus_plus_baseline")(
        token_level_rewards=token_rewards, response_mask=mask, index=group_ids.numpy(), epsilon=1e-6
    )
    return expected


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_plus_plus_baseline_with_mask_matches_verl_token_whitening(verl, seed):
    rewards, group_ids, token_rewards, mask = _grouped(seed)  # 1..T tokens per response
    expected = _verl_reinforce_pp(verl, token_rewards, mask, group_ids)
    adv = compute_advantages("reinforce_plus_plus_baseline", rewards, group_ids, mask=mask)
    torch.testing.assert_close(adv[:, None] * mask, expected, **TOL)


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_reinforce_plus_plus_baseline_with_mask_matches_verl_extreme_inputs(verl, scale):
    # tiny and large reward scales (verl's variance floor 1e-8 matters at the small one), a
    # constant-reward group, and very unequal lengths (1 token next to T tokens)
    rewards, group_ids, token_rewards, mask = _grouped(7)
    rewards = rewards * scale
    first = group_ids == group_ids[0]
    rewards[first] = 2.0 * scale  # one group with identical rewards: its deviations are 0
    mask[0] = 0
    mask[0, 0] = 1
    mask[-1] = 1
    lengths = mask.sum(-1).long()
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(rewards)), lengths - 1] = rewards
    expected = _verl_reinforce_pp(verl, token_rewards, mask, group_ids)
    adv = compute_advantages("reinforce_plus_plus_baseline", rewards, group_ids, mask=mask)
    torch.testing.assert_close(adv[:, None] * mask, expected, **TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_plus_plus_baseline_matches_verl_per_completion(verl, seed):
    # verl whitens over response tokens; with one token per response that is per completion.
    rewards, group_ids, token_rewards, mask = _grouped(seed, length=1)
    expected, _ = verl.core.get_adv_estimator_fn("reinforce_plus_plus_baseline")(
        token_level_rewards=token_rewards, response_mask=mask, index=group_ids.numpy(), epsilon=1e-6
    )
    # group means (≤ 4·5 operations), then a batch mean and variance over n completions, whitened by
    # 1/sqrt(var + 1e-8): ≤ (20 + 4n) operations on values ≤ max|r|, times the whitening factor
    centred = rewards.double() - torch.stack([rewards.double()[group_ids == g].mean() for g in group_ids])
    whiten = 1.0 / (float(centred.var()) + 1e-8) ** 0.5
    torch.testing.assert_close(
        compute_advantages("reinforce_plus_plus_baseline", rewards, group_ids)[:, None],
        expected,
        **tol(20 + 4 * rewards.numel(), float(rewards.abs().max()) * whiten),
    )


# --- aggregation --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("mode", "norm_constant"), [(mode, None) for mode in AGG_MODES.names()] + [("seq-mean-token-sum-norm", 32.0)]
)
def test_aggregation_matches_verl(verl, seed, mode, norm_constant):
    gen = _gen(seed)
    mask = random_mask(gen, B, T, allow_empty_rows=True)
    mask[0] = 1  # at least one response token in the batch
    values = with_garbage(torch.randn(B, T, generator=gen), mask, gen, scale=5.0)
    ours_in = values.clone().requires_grad_(True)
    theirs_in = values.clone().requires_grad_(True)
    ours = aggregate_loss(ours_in, mask, mode, norm_constant=norm_constant)
    theirs = verl.core.agg_loss(theirs_in, mask, mode, loss_scale_factor=norm_constant)
    # a sum of ≤ B·T masked values (plus a few divisions); the gradient is elementwise (1/count)
    torch.testing.assert_close(ours, theirs, **tol(B * T + 4, float((values * mask).abs().max())))
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, **TOL)


# --- policy losses ------------------------------------------------------------------------------


def _policy_inputs(seed: int, spread: float = 0.3):
    gen = _gen(seed)
    mask = random_mask(gen, B, T)
    logp, old = random_logps(gen, B, T, spread=spread)
    logp = logp + spread * torch.randn(B, 1, generator=gen)  # per-sequence drift: sequence ratios vary too
    logp, old = with_garbage(logp, mask, gen, scale=5.0), with_garbage(old, mask, gen, scale=5.0)
    adv = torch.randn(B, generator=gen)
    weights = torch.rand(B, T, generator=gen) * 2.0
    seq_weights = (torch.rand(B, 1, generator=gen) * 2.0 + 0.1).expand(B, T).contiguous()
    return logp, old, adv, mask, weights, seq_weights


def _both(verl, ours_name, theirs_fn, seed, *, agg_mode, weights, dual_clip=None, norm_constant=None, spread=0.3):
    logp, old, adv, mask, token_w, seq_w = _policy_inputs(seed, spread)
    is_weights = {"none": None, "token": token_w, "sequence": seq_w}[weights]
    ours_logp = logp.clone().requires_grad_(True)
    theirs_logp = logp.clone().requires_grad_(True)
    ours, metrics = compute_policy_loss(
        ours_name,
        ours_logp,
        old,
        adv,
        mask,
        agg_mode=agg_mode,
        norm_constant=norm_constant,
        is_weights=is_weights,
        **clip_range(ours_name, CLIP_LOW, CLIP_HIGH),  # reinforce takes none
        **({} if dual_clip is None else {"dual_clip": dual_clip}),  # ppo_clip's alone
    )
    theirs, their_metrics = theirs_fn(
        old,
        theirs_logp,
        adv[:, None].expand(B, T),
        mask,
        agg_mode,
        verl.config(dual_clip=dual_clip, norm_constant=norm_constant),
        is_weights,
    )
    # A per-token loss is ≤ |A|·(IS weight)·max(ratio, |logp|) (clipping only lowers it); the loss sums
    # ≤ B·T of them, a token's gradient involves its sequence's T tokens (gspo, gmpo) and ≤ 20 operations.
    on = mask.bool()
    ratio = float(torch.exp(logp - old)[on].max())
    magnitude = (
        float(adv.abs().max())
        * max(1.0, float(is_weights.max()) if is_weights is not None else 1.0)
        * max(1.0, ratio, float(logp[on].abs().max()))
    )
    torch.testing.assert_close(ours, theirs, **tol(B * T + 20, magnitude))
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, **tol(T + 20, magnitude))
    # token mean of old - logp over ≤ B·T tokens
    kl_tol = order_tolerance(B * T, float((logp - old)[on].abs().max()))
    assert metrics["policy/approx_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=kl_tol)
    return metrics, their_metrics


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weights", ["none", "token"])
def test_ppo_clip_matches_verl_vanilla(verl, seed, agg_mode, weights):
    ours, theirs = _both(
        verl, "ppo_clip", verl.core.get_policy_loss_fn("vanilla"), seed, agg_mode=agg_mode, weights=weights
    )
    # without dual clip, verl's pg_clipfrac counts exactly DESIGN's clip events
    assert ours["clip/frac"] == pytest.approx(theirs["actor/pg_clipfrac"], abs=1e-6)  # count/count: ≤ eps32
    assert ours["clip/frac_low"] > 0 and ours["clip/frac_high"] > 0  # the inputs do exercise clipping


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_ppo_dual_clip_matches_verl_vanilla(verl, seed, agg_mode):
    # spread 0.8: plenty of ratios above the dual-clip bound 2.0 on negative advantages
    _, theirs = _both(
        verl,
        "ppo_clip",
        verl.core.get_policy_loss_fn("vanilla"),
        seed,
        agg_mode=agg_mode,
        weights="token",
        dual_clip=2.0,
        spread=0.8,
    )
    assert theirs["actor/pg_clipfrac_lower"] > 0  # verl's count of dual-clip events: the bound is hit


def test_seq_mean_token_sum_norm_constant_matches_verl(verl):
    _both(
        verl,
        "ppo_clip",
        verl.core.get_policy_loss_fn("vanilla"),
        0,
        agg_mode="seq-mean-token-sum-norm",
        weights="none",
        norm_constant=64.0,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weights", ["none", "token"])
def test_gspo_matches_verl(verl, seed, agg_mode, weights):
    ours, theirs = _both(verl, "gspo", verl.core.get_policy_loss_fn("gspo"), seed, agg_mode=agg_mode, weights=weights)
    assert ours["clip/frac"] == pytest.approx(theirs["actor/pg_clipfrac"], abs=1e-6)  # same sequence-level events
    assert ours["clip/frac"] > 0  # the inputs do exercise clipping


def _extreme_inputs(seed: int):
    """Inputs at the clamps: sequence log-ratios of +15 and +10.5 (above GSPO's +10), -25, and
    single tokens at ±25 (beyond the ±20 token clamp), next to ordinary ones."""
    logp, old, adv, mask, token_w, _ = _policy_inputs(seed)
    mask[:4] = 1
    logp[0] = old[0] + 15.0
    logp[1] = old[1] + 10.5
    logp[2] = old[2] - 25.0
    logp[3, 0], logp[3, 1] = old[3, 0] + 25.0, old[3, 1] - 25.0
    adv[:4] = torch.tensor([-1.0, -0.5, 1.0, -2.0])  # negative advantages keep the unclipped large ratios
    return logp, old, adv, mask, token_w


@pytest.mark.parametrize(("ours_name", "theirs_name"), [("ppo_clip", "vanilla"), ("gspo", "gspo"), ("cispo", "cispo")])
@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_losses_match_verl_on_extreme_log_ratios(verl, ours_name, theirs_name, agg_mode):
    logp, old, adv, mask, token_w = _extreme_inputs(3)
    ours_logp, theirs_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours, metrics = compute_policy_loss(
        ours_name,
        ours_logp,
        old,
        adv,
        mask,
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
        agg_mode=agg_mode,
        is_weights=token_w,
    )
    theirs, their_metrics = verl.core.get_policy_loss_fn(theirs_name)(
        old, theirs_logp, adv[:, None].expand(B, T), mask, agg_mode, verl.config(), token_w
    )
    # the losses are dominated by e^15 ~ 3.3e6 (GSPO: e^10 after the clamp): compare relatively
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, rtol=1e-5, atol=1e-5)
    # policy/approx_kl is the mean of the raw old - new log-ratio (docs/metrics.md); verl's vanilla and
    # cispo report it after their ±20 clamp, so the metrics coincide only for gspo here.
    if ours_name == "gspo":
        assert metrics["policy/approx_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weights", ["none", "sequence"])
def test_gmpo_matches_verl_geo_mean(verl, seed, agg_mode, weights):
    # verl aggregates token IS weights by their geometric mean per sequence, we by the
    # arithmetic mean (they multiply the broadcast loss): identical for per-sequence weights.
    _both(verl, "gmpo", verl.core.get_policy_loss_fn("geo_mean"), seed, agg_mode=agg_mode, weights=weights)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weights", ["none", "token"])
def test_cispo_matches_verl(verl, seed, agg_mode, weights):
    _both(verl, "cispo", verl.core.get_policy_loss_fn("cispo"), seed, agg_mode=agg_mode, weights=weights)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weights", ["none", "token"])
def test_reinforce_matches_verl(verl, seed, agg_mode, weights):
    def theirs(old, logp, adv, mask, mode, config, is_weights):
        return verl.core.compute_policy_loss_reinforce(old, logp, adv, mask, mode, config, is_weights)

    _both(verl, "reinforce", theirs, seed, agg_mode=agg_mode, weights=weights)


# --- KL, entropy, truncated IS --------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "low_var_kl"])
def test_kl_matches_verl(verl, seed, estimator):
    gen = _gen(seed)
    logp, ref = random_logps(gen, B, T, spread=3.0)
    logp[0, :4] = torch.tensor([-40.0, 40.0, -25.0, 25.0])  # exercise both clamps
    ours_in, theirs_in = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours = kl_penalty(ours_in, ref, estimator)
    theirs = verl.core.kl_penalty(theirs_in, ref, estimator)
    # elementwise, ≤ 10 operations on operands up to e^|d| (|d| = |ref - logp|, clamped at 20 by both) and
    # (d²/2 for k2): a bound per element
    d = (ref - logp).abs().clamp(max=20.0)
    bound = order_tolerance(10, 1.0) * (d.exp() + d**2 + d + 1)
    assert ((ours - theirs).abs() <= bound).all()
    ours.sum().backward()
    theirs.sum().backward()
    assert ((ours_in.grad - theirs_in.grad).abs() <= bound).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_matches_verl(verl, seed):
    logits = 4.0 * torch.randn(B, T, 33, generator=_gen(seed))
    # a log-sum-exp and a probability-weighted sum over 33 logits: ≤ 2·33 operations on values ≤ max|logit|
    torch.testing.assert_close(
        entropy_from_logits(logits),
        verl.functional.entropy_from_logits(logits),
        **tol(2 * 33, float(logits.abs().max())),
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cap", [1.2, 2.0])
def test_tis_matches_verl_token_level_truncation(verl, seed, cap):
    gen = _gen(seed)
    mask = random_mask(gen, B, T)
    learner, sampler = random_logps(gen, B, T, spread=0.5)
    ours, _ = importance_weights("tis", learner, sampler, mask, cap=cap)
    theirs, _ = verl.rollout_corr.compute_rollout_correction_weights(
        learner - sampler, mask, rollout_is="token", rollout_is_threshold=cap
    )
    torch.testing.assert_close(ours, theirs, **TOL)


def test_verl_names_match_ours(verl):
    """The names that coincide exist in verl with these spellings (guards against verl renames)."""
    assert {"grpo", "rloo", "reinforce_plus_plus_baseline"} <= set(verl.core.ADV_ESTIMATOR_REGISTRY)
    assert {"vanilla", "gspo", "geo_mean", "cispo"} <= set(verl.core.POLICY_LOSS_REGISTRY)
    for mode in AGG_MODES.names():
        verl.core.agg_loss(torch.zeros(1, 1), torch.ones(1, 1), mode)  # raises on an unknown mode
    _ = np  # numpy group ids are what verl's estimators index with
