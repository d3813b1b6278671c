"""Policy-gradient losses of the GRPO family.

A registered loss is a pure function ``(logp, old_logp, advantages, mask, *, <its params>) -> PolicyTerms``:
the per-token loss matrix plus what the clip metrics need. Its keyword-only parameters are its
knobs (``workbench.algorithms.params``), the clip bounds ``clip_low``/``clip_high``/``dual_clip``
included: ``compute_policy_loss`` passes them as ``**loss_params`` (a run config's
``AlgorithmConfig.loss_kwargs()``), and a parameter with a default keeps it when not given.
``compute_policy_loss`` applies the optional importance-sampling weights, aggregates with the chosen
mode and computes the metrics, so every loss is measured the same way. A loss registers with
``@policy_loss(name)``; ``truncates_weight=True`` declares how its clip metrics count (``PolicyTerms``).

Shapes: ``logp``, ``old_logp``, ``mask`` are ``[B,T]`` (log-probabilities of the sampled
tokens under the current and the behaviour policy); ``advantages`` is ``[B]`` and is
broadcast over each completion's tokens. Log-ratios are clamped to ±20 before ``exp``, except
``gspo``'s sequence log-ratio, clamped at +10 only (verl's convention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

import torch
from annotated_types import Gt
from torch import Tensor

from workbench.algorithms._masked import (
    clamped_exp,
    masked_max,
    masked_mean,
    sequence_mean_log_ratio,
    where_mask,
)
from workbench.algorithms.aggregate import AGG_MODES, aggregate_loss
from workbench.algorithms.params import check_unit_params, keyword_params, missing_params
from workbench.metrics.names import (
    CLIP_FRAC,
    CLIP_FRAC_HIGH,
    CLIP_FRAC_LOW,
    POLICY_APPROX_KL,
    POLICY_RATIO_MAX,
    POLICY_RATIO_MEAN,
)
from workbench.registry import Activity, Registry

# Exact metric keys returned by ``compute_policy_loss`` (docs/metrics.md).
POLICY_METRIC_KEYS = (
    CLIP_FRAC,
    CLIP_FRAC_LOW,
    CLIP_FRAC_HIGH,
    POLICY_APPROX_KL,
    POLICY_RATIO_MEAN,
    POLICY_RATIO_MAX,
)


class PolicyTerms(NamedTuple):
    """What a registered loss hands back to ``compute_policy_loss``."""

    loss_mat: Tensor  # [B,T] per-token loss, before IS weights and aggregation
    ratio: Tensor  # [B,T] ratio the metrics read (token ratio, or sequence ratio broadcast), detached
    # Clip events (docs/metrics.md): tokens whose gradient the clipping removes, on the low side (A < 0)
    # and the high side (A > 0); for a loss registered with truncates_weight=True, tokens whose weight
    # was truncated below / above its range, whatever the sign of A.
    clipped_low: Tensor  # [B,T] bool
    clipped_high: Tensor  # [B,T] bool
    # Fixed reduction ``(loss_mat, mask) -> []`` for losses defined per sequence; None = use agg_mode.
    reduce: Callable[[Tensor, Tensor], Tensor] | None = None


PolicyLoss = Callable[..., PolicyTerms]

# A loss shapes every token's loss; its keyword parameters declare their own activity (``params``).
EVERY_TOKEN = "defines every token's loss"
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "policy loss", activity=Activity.always(EVERY_TOKEN), selected_by="algorithm.loss"
)

# The clip bounds act on the tokens they clip (the clip events of docs/metrics.md, one side each).
CLIP_BOUNDS = {"clip_low": Activity(CLIP_FRAC_LOW, "tokens"), "clip_high": Activity(CLIP_FRAC_HIGH, "tokens")}


def policy_loss(
    name: str, *, truncates_weight: bool = False, params: dict[str, Activity] | None = None
) -> Callable[[PolicyLoss], PolicyLoss]:
    """Decorator: register a loss in ``POLICY_LOSSES`` as ``name``.

    ``truncates_weight``: the loss truncates a weight instead of removing gradients (``cispo``), so its
    clip metrics count the tokens whose weight was truncated, whatever the advantage's sign
    (docs/metrics.md); the clip-metric contract checks either reading by autograd.
    ``params``: the :class:`~workbench.registry.Activity` of each of its keyword parameters (a clip
    bound acts on the tokens it clips), read by ``workbench compare``'s activity gate.
    """

    def register(fn: PolicyLoss) -> PolicyLoss:
        fn.truncates_weight = truncates_weight  # type: ignore[attr-defined]  # a marker attribute on the registered function
        return POLICY_LOSSES.register(name, activity=Activity.always(EVERY_TOKEN, **(params or {})))(fn)

    return register


def truncates_weight(loss: str) -> bool:
    """Whether the registered loss ``loss`` declared ``truncates_weight`` (False if registered without it)."""
    return getattr(POLICY_LOSSES.get(loss), "truncates_weight", False)


def _check_clip_range(clip_low: float, clip_high: float) -> None:
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0; got {clip_low}, {clip_high}")


# verl clamps GSPO's length-normalised sequence log-ratio at +10 only (core_algos.compute_policy_loss_gspo).
GSPO_MAX_LOG_RATIO = 10.0


def _clip_masks(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """The clip events of docs/metrics.md: ``ratio < low`` with ``A < 0``; ``ratio > high`` with ``A > 0``.

    For a clipped surrogate these are exactly the tokens whose gradient the clip removes.
    """
    return (ratio < low) & (adv < 0), (ratio > high) & (adv > 0)  # [B,T], [B,T]


@policy_loss(
    "ppo_clip",
    params=CLIP_BOUNDS
    | {"dual_clip": Activity.always("caps negative-advantage tokens' loss; dual-clip events are not logged")},
)
def ppo_clip(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> PolicyTerms:
    """Clipped surrogate ``max(-A r, -A clip(r, 1-ε_low, 1+ε_high))`` per token.

    PPO, Schulman et al. 2017, §3 (Eq. 7), as used by GRPO (Shao et al. 2024, §4.1.1).
    ``clip_high != clip_low`` is DAPO's Clip-Higher (Yu et al. 2025, §3.1).
    ``dual_clip = c`` additionally caps the loss of negative-advantage tokens at ``-A c``
    (dual-clip PPO, Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL",
    arXiv:1912.09729); None disables it. verl ``policy_loss.loss_mode=vanilla`` (with ``clip_ratio_c`` = dual_clip).
    Dual-clip events also lose their gradient but are not clip events (docs/metrics.md's definition).
    """
    _check_clip_range(clip_low, clip_high)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    adv = advantages[:, None]  # [B,1]
    ratio = clamped_exp(logp - old_logp)  # [B,T]
    surrogate = -adv * ratio  # [B,T]
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B,T]
    loss = torch.maximum(surrogate, clipped)  # [B,T]
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)  # [B,T]
    low, high = _clip_masks(ratio, adv, 1.0 - clip_low, 1.0 + clip_high)
    return PolicyTerms(loss, ratio.detach(), low, high)


@policy_loss("gspo", params=CLIP_BOUNDS)
def gspo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float, clip_high: float
) -> PolicyTerms:
    """Sequence-level clipped surrogate with the length-normalised sequence ratio.

    GSPO, Zheng et al. 2025 (arXiv:2507.18071), §4.1 and the GSPO-token form of §4.3:
    ``s_b = exp(mean_t log r_bt)`` is clipped to ``[1-ε_low, 1+ε_high]``; each token carries
    ``s_bt = sg(s_b) · π_θ(y_t) / sg(π_θ(y_t))``, whose value is ``s_b`` and whose gradient
    flows through the token's own log-probability. verl ``loss_mode=gspo``; as there, the
    log of ``s_bt`` is clamped at +10 (no lower clamp: ``exp`` of a very negative value is 0).
    """
    _check_clip_range(clip_low, clip_high)
    adv = advantages[:, None]  # [B,1]
    seq_log_ratio = sequence_mean_log_ratio(logp - old_logp, mask)  # [B]
    token_log_ratio = seq_log_ratio.detach()[:, None] + logp - logp.detach()  # [B,T], value = seq ratio
    ratio = torch.exp(token_log_ratio.clamp(max=GSPO_MAX_LOG_RATIO))  # [B,T]
    surrogate = -adv * ratio  # [B,T]
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B,T]
    loss = torch.maximum(surrogate, clipped)  # [B,T]
    seq_ratio = ratio.detach()  # [B,T], constant along each row
    low, high = _clip_masks(seq_ratio, adv, 1.0 - clip_low, 1.0 + clip_high)
    return PolicyTerms(loss, seq_ratio, low, high)


def _mean_over_sequences(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Mean over all ``B`` sequences of each sequence's token mean (GMPO's and verl's reduction)."""
    return masked_mean(loss_mat, mask, dim=-1).mean()  # [B] -> []


@policy_loss("gmpo", params=CLIP_BOUNDS)
def gmpo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float, clip_high: float
) -> PolicyTerms:
    """Geometric-mean surrogate: ``-A_b · exp(mean_t clip(log r_bt))``, averaged over sequences.

    GMPO, Zhao et al. 2025 (arXiv:2507.20673), §3, the GMPO objective and its clipping:
    token log-ratios are clipped in log space, sign-aware — for ``A > 0`` at ``+ε_high`` above,
    for ``A < 0`` at ``-ε_low`` below — then averaged per sequence and exponentiated. The
    objective is defined per sequence and is a plain mean over the ``B`` sequences whatever
    ``agg_mode`` says (as verl's ``loss_mode=geo_mean``). Token IS weights multiply the
    broadcast sequence loss, i.e. the sequence is weighted by its mean token weight.

    Clip metrics count the tokens whose log-ratio was clipped on its advantage's side: exactly
    those lose their gradient (the sequence's geometric-mean ratio is not what is clipped).
    The ratio metrics read the geometric-mean ratio broadcast to its tokens.
    """
    _check_clip_range(clip_low, clip_high)
    adv = advantages[:, None]  # [B,1]
    log_ratio = logp - old_logp  # [B,T]
    clipped_log_ratio = torch.where(
        adv > 0,
        log_ratio.clamp(max=clip_high),
        torch.where(adv < 0, log_ratio.clamp(min=-clip_low), torch.zeros_like(log_ratio)),
    )  # [B,T]
    seq_ratio = clamped_exp(sequence_mean_log_ratio(clipped_log_ratio, mask))  # [B]
    loss = (-advantages * seq_ratio)[:, None].expand_as(log_ratio)  # [B,T], the sequence loss on each token
    geo_ratio = clamped_exp(sequence_mean_log_ratio(log_ratio, mask)).detach()[:, None].expand_as(log_ratio)  # [B,T]
    low, high = _clip_masks(log_ratio.detach(), adv, -clip_low, clip_high)  # per token, in log space
    return PolicyTerms(loss, geo_ratio, low, high, reduce=_mean_over_sequences)


@policy_loss("cispo", truncates_weight=True, params=CLIP_BOUNDS)
def cispo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float, clip_high: float
) -> PolicyTerms:
    """REINFORCE weighted by the clipped, stop-gradient ratio: ``-sg(clip(r)) · A · log π``.

    CISPO, MiniMax-M1 technical report (MiniMax 2025, arXiv:2506.13585), §3: clipping the IS weight
    instead of the update keeps the gradient of every token. verl ``loss_mode=cispo``.
    No gradient is removed, so the clip metrics count truncated weights (``truncates_weight``):
    low = ratio < 1-ε_low, high = ratio > 1+ε_high, whatever the advantage's sign.
    """
    _check_clip_range(clip_low, clip_high)
    adv = advantages[:, None]  # [B,1]
    ratio = clamped_exp(logp - old_logp).detach()  # [B,T]
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B,T]
    loss = -weight * adv * logp  # [B,T]
    return PolicyTerms(loss, ratio, ratio < 1.0 - clip_low, ratio > 1.0 + clip_high)


# A temperature must be > 0: the gate divides by it. The annotation carries the constraint so a
# run config rejects a bad value when the study loads (``params.check_unit_params``).
Temperature = Annotated[float, Gt(0)]


@policy_loss(
    "sapo",
    params=dict.fromkeys(
        ("temperature_pos", "temperature_neg"), Activity.always("the soft gate weighs every token's gradient")
    ),
)
def sapo(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    temperature_pos: Temperature = 1.0,
    temperature_neg: Temperature = 1.05,
) -> PolicyTerms:
    """Soft-gated surrogate ``-A · f_τ(r)`` with ``f_τ(r) = σ(τ (r - 1)) · 4/τ`` per token.

    SAPO, Gao et al. 2025 ("Soft Adaptive Policy Optimization", arXiv:2511.20347): a smooth,
    temperature-controlled gate replaces the hard clip. ``τ = temperature_pos`` for ``A > 0`` and
    ``temperature_neg`` otherwise; the paper's defaults 1.0 and 1.05 (a faster decay for negative
    advantages, whose updates spread over many unsampled tokens) are TRL's ``sapo_temperature_pos``
    and ``sapo_temperature_neg`` (``GRPOConfig``, ``loss_type="sapo"``). The ``4/τ`` factor makes
    ``∂f/∂r = 4 σ(1-σ) = 1`` at ``r = 1``: on policy the gradient is plain PPO's, and it decays
    smoothly as ``r`` leaves 1 (``∂f/∂r = 4 σ(1-σ)`` is never 0, only small).

    Clip metrics: no gradient is ever removed and no weight truncated, so ``clip/frac*`` are 0
    (honestly so: the clip-metric contract compares gradients with and without a clip range).
    How strongly the gate damps off-policy tokens shows in ``policy/ratio_mean``/``ratio_max``.
    ``clip_low``/``clip_high`` do not apply.
    """
    if not (temperature_pos > 0 and temperature_neg > 0):
        raise ValueError(f"sapo temperatures must be > 0, got {temperature_pos}, {temperature_neg}")
    adv = advantages[:, None]  # [B,1]
    ratio = clamped_exp(logp - old_logp)  # [B,T]
    tau = torch.where(adv > 0, torch.full_like(adv, temperature_pos), torch.full_like(adv, temperature_neg))  # [B,1]
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)  # [B,T]
    nothing = torch.zeros_like(ratio, dtype=torch.bool)  # [B,T]
    return PolicyTerms(-adv * gate, ratio.detach(), nothing, nothing)


@policy_loss("reinforce")
def reinforce(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> PolicyTerms:
    """Plain policy gradient ``-A · log π`` (no ratio, no clipping; ``clip_*`` do not apply).

    REINFORCE, Williams 1992; with group baselines as in RLOO (Ahmadian et al. 2024).
    Off-policy correction comes from ``is_weights`` (verl ``compute_policy_loss_reinforce``).
    ``old_logp`` only feeds the ratio metrics.
    """
    ratio = clamped_exp(logp - old_logp).detach()  # [B,T]
    loss = -advantages[:, None] * logp  # [B,T]
    nothing = torch.zeros_like(ratio, dtype=torch.bool)  # [B,T]
    return PolicyTerms(loss, ratio, nothing, nothing)


def _check_shapes(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, is_weights: Tensor | None) -> None:
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"logp, old_logp and mask must all be [B,T]; got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be [B]={tuple(logp.shape[:1])}; got {tuple(advantages.shape)}")
    if is_weights is not None and is_weights.shape != logp.shape:
        raise ValueError(f"is_weights must be [B,T]={tuple(logp.shape)}; got {tuple(is_weights.shape)}")


def compute_policy_loss(
    loss: str,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    agg_mode: str = "token-mean",
    norm_constant: float | None = None,
    is_weights: Tensor | None = None,
    **loss_params: Any,
) -> tuple[Tensor, dict[str, float]]:
    """Scalar policy loss and its metrics.

    ``is_weights`` ``[B,T]`` (e.g. from ``importance_weights``) multiplies the per-token loss,
    detached. The loss is reduced with ``agg_mode`` (and ``norm_constant``), except for losses
    defined per sequence (``gmpo``: mean over sequences). ``loss_params`` are the loss's
    keyword-only parameters, e.g. ``clip_low=0.2, clip_high=0.28`` (the clipped losses need both;
    ``ppo_clip`` also takes ``dual_clip`` > 1); a key it does not take, or one it needs and is not
    given, raises ``ValueError`` naming it, the loss and its valid keys.

    Metrics (python floats, means over response tokens; 0 for an empty mask): ``clip/frac``
    is the fraction of response tokens whose gradient the clipping removes, split into
    ``clip/frac_low`` (A<0: ``ppo_clip`` ratio < 1-clip_low; ``gspo`` sequence ratio below its
    range; ``gmpo`` token log-ratio < -clip_low) and ``clip/frac_high`` (A>0, the mirror image);
    ``cispo`` (``truncates_weight``) removes none and counts truncated IS weights instead
    (low: ratio < 1-clip_low, high: ratio > 1+clip_high, any advantage); ``reinforce`` and
    ``sapo`` (a soft gate, no clip) clip nothing. Dual-clip events are not clip events
    (docs/metrics.md). ``policy/approx_kl`` is the mean
    of old_logp - logp; ``policy/ratio_mean`` and ``policy/ratio_max`` read the token ratio
    (``gspo``: the sequence ratio, ``gmpo``: the geometric-mean ratio, broadcast to its tokens).
    The clip-metric contract (tests/algorithms/test_clip_metrics.py) checks these by autograd.
    """
    fn = POLICY_LOSSES.get(loss)
    AGG_MODES.get(agg_mode)  # validate the name even when the loss fixes its own reduction
    _check_shapes(logp, old_logp, advantages, mask, is_weights)
    kwargs = check_unit_params("policy loss", loss, fn, loss_params)
    missing = missing_params(fn, kwargs)
    if missing:
        raise ValueError(
            f"policy loss {loss!r} needs parameter {missing[0]!r} (takes: {', '.join(keyword_params(fn))})"
        )

    # Padding may hold arbitrary values: zero it so it reaches neither values nor gradients.
    logp = where_mask(logp, mask)  # [B,T]
    old_logp = where_mask(old_logp.detach(), mask)  # [B,T]
    advantages = advantages.detach()  # [B]
    terms = fn(logp, old_logp, advantages, mask, **kwargs)

    loss_mat = terms.loss_mat  # [B,T]
    if is_weights is not None:
        loss_mat = loss_mat * where_mask(is_weights.detach(), mask)  # [B,T]
    if terms.reduce is not None:
        if norm_constant is not None:
            raise ValueError(f"norm_constant does not apply to policy loss {loss!r} (it fixes its own reduction)")
        value = terms.reduce(loss_mat, mask)
    else:
        value = aggregate_loss(loss_mat, mask, agg_mode, norm_constant=norm_constant)

    with torch.no_grad():
        frac_low = masked_mean(terms.clipped_low.to(logp.dtype), mask)
        frac_high = masked_mean(terms.clipped_high.to(logp.dtype), mask)
        metrics = {
            CLIP_FRAC: float(frac_low + frac_high),
            CLIP_FRAC_LOW: float(frac_low),
            CLIP_FRAC_HIGH: float(frac_high),
            POLICY_APPROX_KL: float(masked_mean(old_logp - logp, mask)),
            POLICY_RATIO_MEAN: float(masked_mean(terms.ratio, mask)),
            POLICY_RATIO_MAX: float(masked_max(terms.ratio, mask)),
        }
    return value, metrics
