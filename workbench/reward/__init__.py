"""Reward: correctness by math-verify (time-bounded, in worker processes) plus weighted
shaping terms (format, length).

    with AnswerVerifier(timeout_s=1.0, workers=1) as verifier:
        batch = score_completions(
            verifier, completions, answers, lengths, truncated, group_ids,
            shaping=[("format", 0.1, {}), ("overlong_soft", 1.0, {"max_length": 512, "cache_length": 128})],
        )
    batch.reward       # [B] float32 = 1.0 * correct + sum of weighted shaping terms
    batch.terms        # {"correct": [B], "format": [B], "overlong_soft": [B]}, weighted, summing to reward

Scripts that create an ``AnswerVerifier`` must guard their entry point with
``if __name__ == "__main__":`` (workers are started with forkserver/spawn).

This package imports torch only when scoring or shaping is used, so worker processes
(which import ``workbench.reward._worker``) stay light.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.reward.verify import AnswerVerifier, VerifyResult

if TYPE_CHECKING:
    import torch

    from workbench.reward.shaping import REWARD_SHAPERS, ShapingInput

__all__ = [
    "CONTROL_TERM",
    "CORRECT_TERM",
    "REWARD_SHAPERS",
    "AnswerVerifier",
    "RewardBatch",
    "ShapingInput",
    "ShapingSpec",
    "VerifyResult",
    "score_completions",
    "validate_shaping",
]

# (registered shaper name, weight, keyword params of the shaper)
ShapingSpec = tuple[str, float, Mapping[str, Any]]

CORRECT_TERM = "correct"  # key of the correctness term (1.0 per correct completion) in RewardBatch.terms
CONTROL_TERM = "control"  # key of a spurious-reward control's term, which replaces the correctness term


def __getattr__(name: str) -> Any:  # lazy: torch is imported only when shaping is used
    if name in ("REWARD_SHAPERS", "ShapingInput"):
        from workbench.reward import shaping  # deferred: torch

        return getattr(shaping, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RewardBatch:
    """Rewards of ``B`` completions and what they are made of."""

    reward: torch.Tensor  # [B] float32, sum of terms
    correct: torch.Tensor  # [B] bool, verifier's judgement
    timed_out: torch.Tensor  # [B] bool, verification ran out of time (scored incorrect)
    terms: dict[str, torch.Tensor]  # name -> [B] float32 weighted contribution; "correct" first
    extracted: list[str | None]  # [B] answer string the verifier extracted, for sample tables


def validate_shaping(shaping: Sequence[ShapingSpec]) -> list[tuple[str, float, dict[str, Any]]]:
    """Check a shaping config without scoring anything; returns it normalised.

    Raises ``ValueError`` for an unknown shaper name (listing the valid ones), a duplicate
    name, a non-finite weight, or params the shaper does not accept / misses.
    """
    import inspect
    import math

    from workbench.reward.shaping import REWARD_SHAPERS  # deferred: torch

    out: list[tuple[str, float, dict[str, Any]]] = []
    seen = {CORRECT_TERM}
    for entry in shaping:
        if not isinstance(entry, (tuple, list)) or len(entry) != 3:
            raise ValueError(f"shaping entries are (name, weight, params) triples, got {entry!r}")
        name, weight, params = entry
        fn = REWARD_SHAPERS.get(name)  # ValueError listing valid names
        if name in seen:
            raise ValueError(f"reward shaper {name!r} listed twice (or clashes with the {CORRECT_TERM!r} term)")
        seen.add(name)
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"weight of reward shaper {name!r} must be a number, got {weight!r}") from None
        if not math.isfinite(weight):
            raise ValueError(f"weight of reward shaper {name!r} must be finite, got {weight!r}")
        params = dict(params or {})
        sig = inspect.signature(fn)
        try:
            sig.bind(None, **params)
        except TypeError as e:
            accepted = [p.name for p in list(sig.parameters.values())[1:]]
            raise ValueError(
                f"bad params for reward shaper {name!r}: {e}; it accepts {accepted or 'no params'}, got {sorted(params)}"
            ) from None
        out.append((name, weight, params))
    return out


def score_completions(
    verifier: AnswerVerifier,
    completions: Sequence[str],
    answers: Sequence[str],
    lengths: torch.Tensor | Sequence[int],
    truncated: torch.Tensor | Sequence[bool],
    group_ids: torch.Tensor | Sequence[int],
    shaping: Sequence[ShapingSpec] = (),
    control: tuple[str, Mapping[str, Any]] | None = None,
    seed: int = 0,
) -> RewardBatch:
    """Score ``B`` completions: ``reward = 1.0 * correct + sum_k weight_k * shaper_k(...)``.

    With ``control`` ``(name, params)`` (a spurious-reward control, ``workbench.reward.controls``), the
    term ``control`` replaces ``1.0 * correct`` in the reward; ``correct`` is still the verifier's
    judgement. ``seed`` seeds a control that draws (the batch's sampling seed).

    Args:
        verifier: an :class:`AnswerVerifier` (its workers are reused across calls).
        completions: ``[B]`` decoded response texts.
        answers: ``[B]`` reference answers (``"85"``, ``"\\frac{1}{2}"``, ...).
        lengths: ``[B]`` response lengths in tokens.
        truncated: ``[B]`` whether the response hit ``max_new_tokens`` without EOS.
        group_ids: ``[B]`` prompt/group id of each completion.
        shaping: ``(name, weight, params)`` per shaping term, names from ``REWARD_SHAPERS``.

    The shaping config is validated before any verification is done.
    """
    import torch

    from workbench.reward.shaping import REWARD_SHAPERS, ShapingInput  # deferred: torch

    specs = validate_shaping(shaping)
    b = len(completions)
    if len(answers) != b:
        raise ValueError(f"{b} completions but {len(answers)} answers")
    lengths_t = torch.as_tensor(lengths).to(torch.int64).reshape(-1)  # [B]
    truncated_t = torch.as_tensor(truncated).to(torch.bool).reshape(-1)  # [B]
    group_ids_t = torch.as_tensor(group_ids).to(torch.int64).reshape(-1)  # [B]
    for name, t in (("lengths", lengths_t), ("truncated", truncated_t), ("group_ids", group_ids_t)):
        if t.numel() != b:
            raise ValueError(f"{name} has {t.numel()} entries for {b} completions")

    results = verifier.score(completions, answers)
    correct = torch.tensor([r.correct for r in results], dtype=torch.bool)  # [B]
    timed_out = torch.tensor([r.timed_out for r in results], dtype=torch.bool)  # [B]

    extracted = [r.extracted for r in results]
    terms: dict[str, torch.Tensor] = {CORRECT_TERM: correct.to(torch.float32)}
    if control is not None:
        from workbench.reward.controls import REWARD_CONTROLS, ControlInput, validate_control  # deferred: torch

        name, params = control
        validate_control(name, params)

        judged_timeouts: list[torch.Tensor] = []

        def judge(texts: Sequence[str], labels: Sequence[str]) -> torch.Tensor:
            scored = verifier.score(list(texts), list(labels))
            judged_timeouts.append(torch.tensor([r.timed_out for r in scored], dtype=torch.bool))
            return torch.tensor([r.correct for r in scored], dtype=torch.bool)

        raw = REWARD_CONTROLS.get(name)(
            ControlInput(
                completions=list(completions),
                answers=list(answers),
                correct=correct,
                extracted=extracted,
                seed=seed,
                judge=judge,
            ),
            **params,
        )
        terms = {CONTROL_TERM: raw.to(torch.float32)}  # [B] in place of the correctness term
        for flags in judged_timeouts:  # a control's own verification (incorrect_label): its timeouts are the reward's
            if flags.shape != timed_out.shape:
                raise ValueError(
                    f"reward control {name!r} judged {flags.numel()} texts for {b} completions: a control judges "
                    "the batch's completions, one label each, so its timeouts count against the right completion"
                )
            timed_out = timed_out | flags
    inp = ShapingInput(
        completions=list(completions), lengths=lengths_t, correct=correct, group_ids=group_ids_t, truncated=truncated_t
    )
    for name, weight, params in specs:
        raw = REWARD_SHAPERS.get(name)(inp, **params)
        if not isinstance(raw, torch.Tensor) or raw.shape != (b,):
            got = tuple(raw.shape) if isinstance(raw, torch.Tensor) else type(raw).__name__
            raise ValueError(f"reward shaper {name!r} returned {got}, expected a tensor of shape ({b},)")
        terms[name] = weight * raw.to(torch.float32)  # [B]
    reward = torch.stack(list(terms.values())).sum(0) if b else torch.zeros(0)  # [B]
    return RewardBatch(
        reward=reward,
        correct=correct,
        timed_out=timed_out,
        terms=terms,
        extracted=extracted,
    )
