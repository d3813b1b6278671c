"""A validated search (:class:`SearchSpec`): what a worker needs to build Optuna objects and trial
configs, made from a study's ``search:`` section by :func:`parse_search`.

The section's schema is :mod:`workbench.search.schema`, its checks :mod:`workbench.search.checks`,
the Optuna objects :mod:`workbench.search.samplers`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from pydantic import ValidationError

from workbench.config import RunConfig, deep_merge
from workbench.errors import show_value, suggest_or_list
from workbench.search import samplers
from workbench.search.checks import (
    Issues,
    check_budget,
    check_confirm,
    check_enqueue,
    check_objectives,
    check_params,
    check_pruner,
    check_sampler,
    check_seeds,
    config_issues,
    normalise,
    validate_schema,
)
from workbench.search.schema import CategoricalParam, FloatParam, IntParam, Objective, SearchConfig
from workbench.study import Study
from workbench.study.paths import copy_tree, set_path

__all__ = ["SearchSpec", "parse_search"]


@dataclasses.dataclass
class SearchSpec:
    """A validated search: what a worker needs to build Optuna objects and trial configs."""

    study: Study
    config: SearchConfig
    variant: str
    seeds: list[int]
    layered: dict[str, Any]  # the variant's raw run config (no seed), before sampled values
    experiment: str
    optuna_name: str

    @property
    def objectives(self) -> list[Objective]:
        return self.config.objectives

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.config.objectives]  # type: ignore[misc]  # directions are filled in by the checks before this is read

    @property
    def multi_objective(self) -> bool:
        return len(self.config.objectives) > 1

    @property
    def params(self) -> dict[str, FloatParam | IntParam | CategoricalParam]:
        return self.config.params

    @property
    def n_trials(self) -> int | None:
        if self.sampler_name == "grid":  # at most one trial per grid point
            size = samplers.grid_size(self.config.params)
            return size if self.config.n_trials is None else min(size, self.config.n_trials)
        return self.config.n_trials

    @property
    def timeout(self) -> float | None:
        return self.config.timeout

    @property
    def sampler_name(self) -> str:
        return self.config.sampler["name"]

    @property
    def pruner_name(self) -> str:
        return self.config.pruner["name"] if self.config.pruner else "none"

    @property
    def pruning(self) -> bool:
        return self.pruner_name != "none"

    @property
    def per_problem_pruning(self) -> bool:
        """The pruner is fed each eval's per-problem results, not the learning curve (wilcoxon)."""
        return self.pruner_name == "wilcoxon"

    def objective_names(self) -> list[str]:
        return [o.metric if o.summary == "last" else f"{o.metric}:{o.summary}" for o in self.objectives]

    def fingerprint(self) -> str:
        """A hash of the search definition, budget and confirmation excluded (a resumed search whose
        definition changed is reported; neither changes what a trial's value means)."""
        search = self.config.model_dump(mode="json", exclude={"n_trials", "timeout", "confirm"})
        data = {"search": search, "base": self.layered, "seeds": self.seeds}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------------------ Optuna
    def distributions(self) -> dict[str, Any]:
        return {name: samplers.to_distribution(p) for name, p in self.params.items()}

    def suggest(self, trial) -> dict[str, Any]:
        """Sample (or, for an enqueued or retried trial, read back) every parameter."""
        return samplers.suggest(trial, self.params)

    def make_sampler(self, worker_index: int = 0, resumed_at: int = 0):
        """The sampler (:func:`workbench.search.samplers.make_sampler`: a seeded one gets a seed of
        its own in every worker but the first of a fresh search)."""
        return samplers.make_sampler(self.config.sampler, self.params, worker_index, resumed_at)

    def make_pruner(self):
        return samplers.make_pruner(self.config.pruner)

    # --------------------------------------------------------------------------- run config
    def trial_raw(self, values: dict[str, Any], seed: int) -> dict[str, Any]:
        raw = copy_tree(self.layered)
        for path, value in values.items():
            set_path(raw, path.split("."), value)
        raw["seed"] = seed
        return raw

    def trial_config(self, values: dict[str, Any], seed: int) -> RunConfig:
        """The run config of one seed of a trial (``ValueError`` naming the problem if invalid)."""
        try:
            return RunConfig.model_validate(self.trial_raw(values, seed))
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, loc)) or 'config'}: {msg}" for loc, msg in config_issues(err))
            raise ValueError(f"the sampled values {values} give an invalid run config: {problems}") from None

    def variant_override(self, values: dict[str, Any]) -> dict[str, Any]:
        """The search variant's own overrides plus ``values``, as a nested study variant."""
        override = copy_tree(self.study.variants.get(self.variant, {}))
        for path, value in values.items():
            set_path(override, path.split("."), value)
        return override


def parse_search(study: Study) -> SearchSpec:
    """Validate ``study.search`` against the study and the run-config schema.

    Raises ``StudyError`` with one ``FILE:LINE search.PATH: message`` line per problem.
    """
    issues = Issues(study)
    raw = _search_section(study, issues)
    cfg, dropped = validate_schema(normalise(raw, issues), raw, issues)
    variant = _search_variant(cfg, study, issues)
    layered = _layered_config(study, variant)

    check_objectives(cfg, issues)
    check_params(cfg, layered, study, issues)
    check_enqueue(cfg, layered, issues, skip=dropped)
    check_sampler(cfg, issues)
    if cfg.pruner is None:
        cfg.pruner = {"name": "median" if len(cfg.objectives) == 1 else "none"}  # Optuna's default
    else:
        check_pruner(cfg, issues)
    check_budget(raw, cfg, issues)
    seeds = cfg.seeds if cfg.seeds is not None else list(study.seeds)
    check_seeds(seeds, issues)
    check_confirm(cfg, seeds, issues)
    issues.raise_if_any()
    return SearchSpec(
        study=study,
        config=cfg,
        variant=variant,
        seeds=list(seeds),
        layered=layered,
        experiment=layered["tracking"]["experiment"] or study.name,
        optuna_name=f"{study.name}:search",
    )


def _search_section(study: Study, issues: Issues) -> dict[str, Any]:
    """The study's ``search:`` mapping (``StudyError`` when it has none, or not a mapping)."""
    raw = study.search
    if raw is None:
        issues.add(
            (),
            "this study has no search: section (metric, params, n_trials: see `workbench tune --help` "
            "and the docstring of workbench/search/schema.py)",
        )
        issues.raise_if_any()
    if not isinstance(raw, dict):
        issues.add((), f"expected a mapping (metric, params, sampler, ...), got {show_value(raw)}")
        issues.raise_if_any()
    return raw


def _search_variant(cfg: SearchConfig, study: Study, issues: Issues) -> str:
    """The variant the search starts from (default: the study's first); ``StudyError`` if unknown."""
    variant = cfg.variant or next(iter(study.variants))
    if variant not in study.variants:
        issues.add(("variant",), f"unknown variant {variant!r}{suggest_or_list(variant, sorted(study.variants))}")
        issues.raise_if_any()
    return variant


def _layered_config(study: Study, variant: str) -> dict[str, Any]:
    """The variant's raw run config: base + the study's ``health:``/``tracking:`` + the variant's
    overrides, with the study's name as the default MLflow experiment."""
    layered = copy_tree(study.base)
    if study.health is not None:
        layered = deep_merge(layered, {"health": study.health})
    if study.tracking:
        layered = deep_merge(layered, {"tracking": study.tracking})
    layered = deep_merge(layered, copy_tree(study.variants[variant]))
    tracking = dict(layered.get("tracking") or {})
    tracking.setdefault("experiment", study.name)
    layered["tracking"] = tracking
    return layered
