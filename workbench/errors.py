"""Error-message pieces shared by every place that rejects a name: "did you mean ...?".

One definition of "close" (difflib's ratio ≥ 0.6, the nearest one) and one wording, so a typo
gets the same kind of hint in a study, a search space, a health config, a preset, a dashboard
spec or any registry lookup.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

CLOSE_RATIO = 0.6  # difflib's default: below it a suggestion is more often wrong than helpful


def closest_match(word: Any, choices: Iterable[str]) -> str | None:
    """The choice nearest to ``word``, or ``None`` when none is close enough."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=CLOSE_RATIO)
    return close[0] if close else None


def suggestion_hint(suggestion: str | None) -> str:
    """``; did you mean 'x'?`` (to append to a message), or ``""`` without a suggestion."""
    return f"; did you mean {suggestion!r}?" if suggestion else ""


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """The hint for the choice nearest to ``word``: ``; did you mean 'x'?``, or ``""``."""
    return suggestion_hint(closest_match(word, choices))
