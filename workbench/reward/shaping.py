"""Reward shapers: small pure functions added, with a weight, to the correctness reward.

Contract of a shaper registered in :data:`REWARD_SHAPERS`::

    shaper(inp: ShapingInput, **params) -> Tensor[B] (float32)

* ``inp`` carries everything a shaper may look at for a batch of ``B`` completions (see
  :class:`ShapingInput`); each shaper reads only the fields it needs, so no shaper takes
  an argument it ignores.
* ``params`` are the shaper's own keyword-only settings (e.g. ``max_length``); an unknown
  or missing one is an error (``workbench.reward.validate_shaping`` checks them up front).
* The return value is the *unweighted* term, one value per completion; the caller
  multiplies it by the configured weight and adds it to the reward. No I/O, no state.

Registering a new shaper::

    @REWARD_SHAPERS.register("my_shaper", activity=nonzero_activity("my_shaper"))
    def my_shaper(inp: ShapingInput, *, scale: float = 1.0) -> torch.Tensor:
        \"\"\"<what it does>. <Paper, section>.\"\"\"
        ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from workbench.registry import Activity, Registry

__all__ = ["REWARD_SHAPERS", "ShapingInput", "Shaper", "has_boxed_answer", "nonzero_activity", "nonzero_metric"]


@dataclass(frozen=True)
class ShapingInput:
    """One batch of scored completions, as shapers see it (``B`` completions)."""

    completions: Sequence[str]  # [B] decoded response texts
    lengths: torch.Tensor  # [B] int64, response length in tokens
    correct: torch.Tensor  # [B] bool, judged correct by the verifier
    group_ids: torch.Tensor  # [B] int64, completions of the same prompt share an id
    truncated: torch.Tensor  # [B] bool, hit max_new_tokens without EOS

    def __post_init__(self) -> None:
        b = len(self.completions)
        for name in ("lengths", "correct", "group_ids", "truncated"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.shape != (b,):
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ShapingInput.{name} must be a tensor of shape ({b},), got {shape}")


Shaper = Callable[..., torch.Tensor]
REWARD_SHAPERS: Registry[Shaper] = Registry("reward shaper", selected_by="reward.shaping")


def nonzero_metric(name: str) -> str:
    """The logged fraction of responses whose ``name`` term is nonzero: the responses it touched."""
    return f"reward/{name}/nonzero_frac"


def nonzero_activity(name: str) -> Activity:
    """A shaper's :class:`~workbench.registry.Activity`: the responses whose reward it changed."""
    return Activity(nonzero_metric(name), "responses")


# ---------------------------------------------------------------------------------------
# format
# ---------------------------------------------------------------------------------------

# Tokens that matter for brace matching: a \boxed{ opener, an escaped brace (literal, not
# grouping), or a plain brace.
_BRACE_TOKENS = re.compile(r"\\boxed\s*\{|\\[{}]|[{}]")


def has_boxed_answer(text: str) -> bool:
    """True if ``text`` contains ``\\boxed{...}`` whose braces balance and whose content is
    not blank. Escaped braces ``\\{``/``\\}`` are literal characters. Linear time."""
    stack: list[int] = []  # for each open group: start of a \boxed content, or -1
    for m in _BRACE_TOKENS.finditer(text):
        tok = m.group()
        if tok[0] == "\\" and len(tok) == 2:  # \{ or \}
            continue
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0 and text[start : m.start()].strip():
                    return True
        elif tok == "{":
            stack.append(-1)
        else:  # \boxed{
            stack.append(m.end())
    return False


@REWARD_SHAPERS.register("format", activity=nonzero_activity("format"))
def format_reward(inp: ShapingInput) -> torch.Tensor:
    """1.0 where the completion contains a well-formed ``\\boxed{...}`` answer, else 0.0.

    A rule-based format reward as in DeepSeek-R1 (DeepSeek-AI 2025, "DeepSeek-R1:
    Incentivizing Reasoning Capability in LLMs via Reinforcement Learning", §2.2.2
    "Reward Modeling": accuracy rewards plus format rewards), with the ``\\boxed{}``
    answer convention of MATH-style tasks in place of R1's ``<think>`` tags. The bonus
    size is the weight given in the shaping config (a preset typically uses 0.0-0.1).
    Whether the boxed content is *correct* is the verifier's job, not this term's.
    """
    return torch.tensor([1.0 if has_boxed_answer(c) else 0.0 for c in inp.completions], dtype=torch.float32)


# ---------------------------------------------------------------------------------------
# overlong_soft
# ---------------------------------------------------------------------------------------


@REWARD_SHAPERS.register("overlong_soft", activity=nonzero_activity("overlong_soft"))
def overlong_soft(inp: ShapingInput, *, max_length: int, cache_length: int) -> torch.Tensor:
    """Soft overlong punishment of DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale", §3.4 "Overlong Reward Shaping", Eq. 13).

    With ``L = lengths``, ``L_max = max_length``, ``L_cache = cache_length``::

        0                                 if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache if L_max - L_cache < L <= L_max
        -1                                if L > L_max

    i.e. a penalty growing linearly from 0 to -1 across the last ``cache_length`` tokens
    before ``max_length`` (DAPO: L_max = 20480, L_cache = 4096, weight 1). It depends on
    length only, not on correctness.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(
            f"need 0 < cache_length <= max_length, got cache_length={cache_length}, max_length={max_length}"
        )
    lengths = inp.lengths.to(torch.float64)  # [B]
    expected = float(max_length - cache_length)
    penalty = ((expected - lengths) / float(cache_length)).clamp(min=-1.0, max=0.0)  # [B]
    return penalty.to(torch.float32)


# ---------------------------------------------------------------------------------------
# kimi_length
# ---------------------------------------------------------------------------------------


@REWARD_SHAPERS.register("kimi_length", activity=nonzero_activity("kimi_length"))
def kimi_length(inp: ShapingInput) -> torch.Tensor:
    """Length reward of Kimi k1.5 (Kimi Team 2025, "Kimi k1.5: Scaling Reinforcement
    Learning with LLMs", §2.3.3 "Length Penalty").

    Within each group (the samples of one prompt), with ``min_len``/``max_len`` the
    shortest and longest response of the group::

        lambda = 0.5 - (len - min_len) / (max_len - min_len)
        reward = lambda             if correct
                 min(0, lambda)     if incorrect

    so short correct answers gain up to +0.5, long ones lose up to -0.5, and incorrect
    answers are only ever penalised. A group whose lengths are all equal gets 0. (Kimi
    warms this term up over training; schedule the weight for that.)
    """
    lengths = inp.lengths.to(torch.float64)  # [B]
    _, inverse = torch.unique(inp.group_ids, return_inverse=True)  # [B] group index 0..G-1
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    lo = torch.full((n_groups,), float("inf"), dtype=torch.float64).scatter_reduce(0, inverse, lengths, "amin")  # [G]
    hi = torch.full((n_groups,), float("-inf"), dtype=torch.float64).scatter_reduce(0, inverse, lengths, "amax")  # [G]
    span = (hi - lo)[inverse]  # [B]
    lam = 0.5 - (lengths - lo[inverse]) / torch.where(span > 0, span, torch.ones_like(span))  # [B]
    lam = torch.where(span > 0, lam, torch.zeros_like(lam))
    correct = inp.correct.to(torch.bool)
    reward = torch.where(correct, lam, lam.clamp(max=0.0))  # [B]
    return reward.to(torch.float32)
