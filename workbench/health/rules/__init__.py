"""Health rules: small stateful watchers over the per-step metric stream.

The rule base and its shared semantics are in :mod:`.base`; one module per family registers its
rules into ``HEALTH_RULES`` on import (in this order: the order of the rule tables), and the
registry is frozen here, once every family is in.
"""

from __future__ import annotations

from . import clip_kl, entropy, length, mismatch, non_finite, reward  # noqa: F401 - registers the rules
from .base import (
    HEALTH_RULES,
    BlockReadings,
    HealthRule,
    Reading,
    RuleParams,
    StreakParams,
    finite_value,
    to_float,
)

__all__ = [
    "HEALTH_RULES",
    "BlockReadings",
    "HealthRule",
    "Reading",
    "RuleParams",
    "StreakParams",
    "finite_value",
    "markdown_table",
    "to_float",
]

HEALTH_RULES.freeze()


def markdown_table() -> str:
    """The registered rules as the table in docs/health.md (kept in sync by tests/health/test_rules.py)."""
    lines = ["| rule | what it catches |", "|---|---|"]
    lines += [f"| `{name}` | {HEALTH_RULES.get(name).summary} |" for name in HEALTH_RULES.names()]
    return "\n".join(lines) + "\n"
