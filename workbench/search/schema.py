"""The ``search:`` section of a study: its schema, as pydantic models.

A study with a ``search:`` section can be tuned with ``workbench tune STUDY``: every Optuna trial
samples values for dotted run-config paths, applies them to the search's variant (base + the
study's ``health:``/``tracking:`` + the variant's overrides; ``grid:``/``zip:`` are not used), and
runs it once per seed::

    search:
      metric: eval/accuracy             # one objective: metric, direction, summary
      direction: maximize               # default: the metric's healthy direction in the catalogue
      # objectives:                     # or several (multi-objective: no pruning, Pareto front)
      #   - {metric: eval/accuracy, direction: maximize}
      #   - {metric: summary/tokens_per_correct, direction: minimize}
      params:
        learner.lr: {low: 1.0e-5, high: 1.0e-2, log: true}
        algorithm.clip_high: {low: 0.2, high: 0.4, step: 0.02}
        rollout.group_size: {low: 4, high: 16, step: 4}     # an int field gives an int parameter
        algorithm.preset: [grpo, dr_grpo, dapo]             # a list is a categorical parameter
      sampler: tpe                      # or {name: tpe, seed: 0, n_startup_trials: 5}; tpe | random |
                                        # grid | cmaes | nsgaii | qmc | gp (options: the Optuna class's)
      pruner: {name: median, n_startup_trials: 2}
      # pruner: {name: threshold, lower: 0.05}              # prune as soon as the value is below 0.05
      # pruner: {name: patient, patience: 2, wrapped: {name: median, n_startup_trials: 2}}
      include_step0: false              # count step 0 (the untrained policy) in pruning and summaries
      n_trials: 30                      # COMPLETE + PRUNED trials, counted across invocations
      timeout: 2h                       # per invocation: no trial starts after it
      seeds: [0, 1]                     # a trial runs each seed; its value is the mean
      enqueue:                          # fixed trials, run first (e.g. each paper's defaults)
        - {learner.lr: 1.0e-4, algorithm.preset: grpo}
      constraints:                      # feasibility, via Optuna's Trial.set_constraint
        - {metric: length/mean, max: 200}
      variant: base                     # which variant the search starts from (default: the first)
      confirm: {top_k: 3, seeds: [100, 101, 102]}  # after the budget: re-run the best 3 and the
                                        # baseline (the variant as is) on fresh seeds; rank by that

The section is read by :func:`workbench.search.spec.parse_search` (shorthands expanded and every
problem reported by :mod:`workbench.search.checks`); the Optuna samplers, pruners and
distributions are built by :mod:`workbench.search.samplers`.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

__all__ = [
    "DERIVED_METRICS",
    "CategoricalParam",
    "Confirm",
    "Constraint",
    "FloatParam",
    "IntParam",
    "Objective",
    "Param",
    "SearchConfig",
    "Summary",
]

#: Run-level summary metrics, computed from a run's step metrics by :mod:`workbench.search.objective`.
DERIVED_METRICS: dict[str, tuple[str, str]] = {
    # name -> (meaning, better direction)
    "summary/tokens_per_correct": (
        "training tokens generated per correct completion over the run (Σ perf/sample_tokens / "
        "Σ correct sampled completions; inf if none was correct)",
        "minimize",
    ),
    "summary/learner_steps": ("RL steps the run took (fewer if it was stopped early)", "minimize"),
}

Summary = Literal["last", "max", "min", "mean"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Objective(_Strict):
    """One objective: a metric of the run, reduced to one number per run, and a direction."""

    metric: str = Field(description="a canonical metric (`workbench metrics`) or a summary/* metric")
    direction: Literal["maximize", "minimize"] | None = Field(
        None, description="default: the metric's healthy direction in the catalogue"
    )
    summary: Summary = Field("last", description="how one run's values become one number: last | max | min | mean")


class Constraint(_Strict):
    """A feasibility bound on a run metric (Optuna ``Trial.set_constraint``): ``min`` and/or ``max``."""

    metric: str
    summary: Summary = "last"
    min: float | None = None
    max: float | None = None


class FloatParam(_Strict):
    type: Literal["float"] = "float"
    low: float
    high: float
    log: StrictBool = False
    step: float | None = Field(None, gt=0)


class IntParam(_Strict):
    type: Literal["int"] = "int"
    low: int
    high: int
    log: StrictBool = False
    step: int = Field(1, ge=1)


Scalar = None | bool | int | float | str


class CategoricalParam(_Strict):
    type: Literal["categorical"] = "categorical"
    choices: list[Scalar] = Field(min_length=1)


Param = typing.Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class Confirm(_Strict):
    """``confirm:``: after the budget, the ``top_k`` best trials and the baseline (the search's
    variant without sampled values) each run once per seed of ``seeds`` (fresh seeds, none of the
    search's own); the best trials are then ranked by the mean over those runs."""

    top_k: int = Field(3, ge=1, description="how many of the best trials (by their search value) are re-run")
    seeds: list[int] = Field(
        min_length=2, description=("fresh seeds, not among the search's seeds (at least 2, for an interval)")
    )


class SearchConfig(_Strict):
    """The ``search:`` section as written (after shorthands are expanded)."""

    objectives: list[Objective] = Field(min_length=1)
    params: dict[str, Param] = Field(min_length=1)
    sampler: dict[str, Any] = Field(default_factory=lambda: {"name": "tpe"})
    pruner: dict[str, Any] | None = None
    n_trials: int | None = Field(None, ge=1)
    timeout: float | None = Field(None, gt=0, description="seconds (or a string like 90s, 30m, 2h)")
    seeds: list[int] | None = None
    enqueue: list[dict[str, Any]] = Field(default_factory=list)
    constraints: list[Constraint] = Field(default_factory=list)
    variant: str | None = None
    include_step0: StrictBool = Field(
        False,
        description=(
            "count step 0 (measured before any update: the untrained policy) in what is reported to the "
            "pruner and in the last/max/min/mean summaries of objectives and constraints; by default it "
            "is logged to MLflow only, so a trial is judged on what learning did, not where it started"
        ),
    )
    confirm: Confirm | None = Field(
        None,
        description=(
            "re-run the top_k trials and the baseline on fresh seeds after the budget; the results "
            "table and --export-best then rank by the confirmed mean (t interval, as workbench compare)"
        ),
    )
