"""What a study's plan needs, without the executor: where its runs log and one row per run.

``workbench plan`` imports this module instead of :mod:`workbench.execution.study`, whose imports
(the process pool, Ray, the run itself, transformers) a plan does not use; ``execution.study``
re-exports these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.tracking.store import resolve_tracking_uri

if TYPE_CHECKING:
    from workbench.study import RunSpec, Study

__all__ = ["plan_rows", "study_experiment", "study_tracking_uri"]


def study_experiment(study: Study, specs: list[RunSpec]) -> str:
    """The MLflow experiment of a study's runs: ``tracking.experiment``, else the study's name."""
    return (specs[0].config.tracking.experiment if specs else None) or study.name


def study_tracking_uri(specs: list[RunSpec]) -> str:
    return resolve_tracking_uri(specs[0].config.tracking.uri if specs else None)


def plan_rows(specs: list[RunSpec], statuses: dict[str, str]) -> list[dict]:
    return [
        {
            "label": s.label,
            "variant": s.variant,
            "seed": s.seed,
            "run_key": s.run_key,
            "status": statuses.get(s.run_key, "new"),
            **{f"grid.{k}": v for k, v in s.grid.items()},
            **({} if s.cold_start is None else {"cold_start": s.cold_start}),
        }  # only where replicated
        for s in specs
    ]
