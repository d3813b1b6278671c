"""Which summary metrics a study compares, and which of them are secondary (``compare.metrics``,
``compare.primary``): shared by ``compare`` (:mod:`workbench.analysis.comparison`) and the sequential looks
(:mod:`workbench.analysis.sequential`), which ``compare`` replays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_METRICS", "comparison_metrics", "secondary_metrics"]

DEFAULT_METRICS = ("final_eval_accuracy",)


def comparison_metrics(requested: Sequence[str] | None, compare_cfg: dict[str, Any]) -> list[str]:
    """Summary metric names to compare: ``--metric`` values, else the study's ``compare.metrics``,
    else ``final_eval_accuracy``. Logged metric names (``eval/accuracy``) become ``final:<name>``."""
    from workbench.compare.summary import summary_name  # deferred: scipy

    names = list(requested or compare_cfg.get("metrics") or DEFAULT_METRICS)
    return list(dict.fromkeys(summary_name(m) for m in names))


def secondary_metrics(names: Sequence[str], compare_cfg: dict[str, Any]) -> list[str]:
    """The compared summary metrics the study does not declare primary (``compare.primary``; none
    declared: every metric is primary). Secondary metrics are reported, marked secondary, and do not
    keep a ``--until-decided`` study running."""
    from workbench.compare.summary import summary_name  # deferred: scipy

    primary = compare_cfg.get("primary")
    if not primary:
        return []
    wanted = {summary_name(m) for m in primary}
    return [m for m in names if m not in wanted]
