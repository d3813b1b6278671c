"""What would decide an inconclusive comparison (#52): the line ``compare`` prints after its headline, with the
seeds ``workbench plan`` sizes the comparison at and the ``workbench run STUDY --until-decided`` command.

Apart from :mod:`workbench.analysis.comparison` because it calls ``plan``'s own function
(:func:`workbench.analysis.seed_plan.seed_plan`), which reads the study's metrics through that module: the
command line and the notebook call :func:`add_next_steps` after :func:`~workbench.analysis.comparison.compare_loaded`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from workbench.analysis.comparison import Comparison, LoadedComparison
from workbench.analysis.seed_plan import seed_plan
from workbench.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["add_next_steps", "study_command", "what_would_decide"]


def add_next_steps(loaded: LoadedComparison, done: Comparison) -> None:
    """Set ``done.table.settings["to_decide"]`` (metric -> the line after each inconclusive headline of a
    primary metric) when the comparison has an inconclusive verdict; nothing otherwise."""
    table = done.table
    if not (table.df["status"] == "inconclusive").any():
        return
    secondary = list(table.settings.get("secondary") or ())
    table.settings["to_decide"] = what_would_decide(loaded, done.runs, str(table.baseline), table.metrics, secondary)


def study_command(where: str) -> str:
    """``workbench run STUDY --until-decided`` for the study as given: its YAML file as a path a reader can
    type from the project's root (``studies/x.yaml`` for a file in a ``studies`` folder; the path as given
    when relative; else its name), so that a committed page does not carry one machine's absolute path."""
    path = Path(where)
    if path.suffix not in (".yaml", ".yml"):
        shown = f"<{where}'s study YAML>"
    elif not path.is_absolute():
        shown = str(path)
    else:
        shown = f"studies/{path.name}" if path.parent.name == "studies" else path.name
    return f"workbench run {shown} --until-decided"


def what_would_decide(
    loaded: LoadedComparison, runs: pd.DataFrame, baseline: str, metrics: Sequence[str], secondary: Sequence[str]
) -> dict[str, str]:
    """Per primary metric, the line that follows an inconclusive headline: the seeds per arm ``workbench
    plan`` computes for its comparisons at the metric's SESOI (:func:`workbench.analysis.seed_plan.seed_plan`,
    called on the compared study's arms, so the plan is ``plan``'s own: its level, its noise SD declared or
    measured on the baseline's finished runs, a sequential design's last look), and the command that runs
    seeds until every comparison is decided. Secondary metrics get none: they do not keep a study running."""
    from workbench.compare.arms import arm_column  # deferred: scipy
    from workbench.compare.table import value_bounds  # deferred: scipy
    from workbench.compare.wording import effect_text  # deferred: scipy

    target = loaded.target
    arms = arm_column(runs)
    # plan's inputs, from the compared runs: the arms (variant, label without the seed) and the seeds run
    study = SimpleNamespace(
        compare={**target.compare, "baseline": baseline, "sesoi": dict(loaded.effects)},
        variants=dict.fromkeys(runs["variant"].astype(str)),
        seeds=sorted(runs["seed"].dropna().unique().tolist()),
    )
    specs = [
        SimpleNamespace(variant=str(v), label=f"{a}/seed=0")
        for v, a in dict.fromkeys(zip(runs["variant"].astype(str), arms.astype(str), strict=True))
    ]
    command = study_command(loaded.where)
    try:
        plans = {
            p.plan.metric: p.plan for p in seed_plan(study, specs, target.tracking_uri, target.study, loaded.where)
        }
    except (AnalysisError, ValueError) as e:  # e.g. a compare.noise_sd that is not a number: say so, in place
        return {
            m: f"to decide it: `workbench plan` cannot size it ({e}); then `{command}`"
            for m in metrics
            if m not in secondary
        }
    out = {}
    for metric in metrics:
        plan = plans.get(metric)
        if metric in secondary or plan is None:
            continue
        if plan.seeds is None:
            out[metric] = f"to decide it: `workbench plan` cannot size it ({plan.why}); then `{command}`"
            continue
        points = value_bounds(metric) == (0.0, 1.0)  # a rate: its SESOI in percentage points, as the headline's
        sesoi = effect_text(float(plan.sesoi or 0.0), points=points, signed=False) + (" points" if points else "")
        out[metric] = (
            f"to decide it: `workbench plan` sizes this comparison at {plan.seeds} seeds per arm "
            f"({plan.power:.0%} power at its SESOI ±{sesoi}, α {plan.alpha:.3g} per comparison); "
            f"run `{command}`"
        )
    return out
