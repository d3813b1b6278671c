"""Self-reflection words in decoded completions: ``behaviour/reflection_rate`` (train) and
``eval/reflection_rate`` (eval), each also split ``_correct`` / ``_incorrect``.

oat-zero (Liu et al. 2025, "There May Not be Aha Moment in R1-Zero-like Training — A Pilot Study",
``sail-sg/oat-zero`` ``analysis/eval_self_reflect.py`` @ e37c4980) detects self-reflection by keywords: a
response reflects when its lower-cased text contains at least one of 11 keywords (``text.count(word) > 0``).
It finds such words already at step 0 and their rate not tied to correctness ("superficial"). The default list
here is its 11, verbatim; ``rollout.reflection_words`` replaces it. A rate is the fraction of responses with
at least one keyword; the split rates are over the correct (incorrect) responses and absent when there are
none. Matching is substring matching on lower-cased text, as oat-zero's (``"rethinking"`` counts).
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.metrics.names import (
    BEHAVIOUR_REFLECTION_RATE,
    BEHAVIOUR_REFLECTION_RATE_CORRECT,
    BEHAVIOUR_REFLECTION_RATE_INCORRECT,
    EVAL_REFLECTION_RATE,
    EVAL_REFLECTION_RATE_CORRECT,
    EVAL_REFLECTION_RATE_INCORRECT,
)

OAT_ZERO_KEYWORDS: tuple[str, ...] = (
    "recheck",
    "rethink",
    "reevaluate",
    "re-evaluate",
    "reevaluation",
    "re-examine",
    "reexamine",
    "try again",
    "check again",
    "think again",
    "go over the steps",
)

# (all responses, correct ones, incorrect ones), by where the responses come from
REFLECTION_METRICS: dict[str, tuple[str, ...]] = {
    "behaviour": (BEHAVIOUR_REFLECTION_RATE, BEHAVIOUR_REFLECTION_RATE_CORRECT, BEHAVIOUR_REFLECTION_RATE_INCORRECT),
    "eval": (EVAL_REFLECTION_RATE, EVAL_REFLECTION_RATE_CORRECT, EVAL_REFLECTION_RATE_INCORRECT),
}


def reflects(text: str, keywords: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``keywords`` (lower-cased substring match, as oat-zero)."""
    low = text.lower()
    return any(word in low for word in keywords)


def reflection_metrics(
    texts: Sequence[str], correct: Sequence[bool], keywords: Sequence[str], *, prefix: str = "behaviour"
) -> dict[str, float]:
    """``{prefix}/reflection_rate`` over ``texts`` and its ``_correct``/``_incorrect`` splits (a split with no
    response is left out: absent, not 0). ``keywords`` are lower-cased before matching."""
    if len(texts) != len(correct):
        raise ValueError(f"{len(texts)} texts but {len(correct)} correctness flags")
    if not texts:
        return {}
    words = [w.lower() for w in keywords]
    hits = [reflects(t, words) for t in texts]
    rate, rate_correct, rate_incorrect = REFLECTION_METRICS[prefix]
    out = {rate: sum(hits) / len(hits)}
    for name, side in ((rate_correct, True), (rate_incorrect, False)):
        chosen = [h for h, c in zip(hits, correct, strict=True) if bool(c) == side]
        if chosen:
            out[name] = sum(chosen) / len(chosen)
    return out
