"""The Optuna objects of a search: samplers, pruners, distributions, and the sampling of a trial.

Names in a study's ``search:`` section (``sampler: tpe``, ``pruner: {name: median, ...}``) map to
Optuna classes here; their options are the classes' own constructor arguments. Optuna is imported
when an object is built, not with this module.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from workbench.search.schema import CategoricalParam, FloatParam, IntParam

__all__ = [
    "NOT_OPTIONS",
    "PRUNERS",
    "SAMPLERS",
    "WRAPPING",
    "grid_cardinality",
    "grid_size",
    "grid_space",
    "grid_values",
    "make_pruner",
    "make_sampler",
    "optuna_class",
    "suggest",
    "to_distribution",
]

SAMPLERS = {  # name -> Optuna class name in optuna.samplers
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "cmaes": "CmaEsSampler",
    "nsgaii": "NSGAIISampler",
    "qmc": "QMCSampler",
    "gp": "GPSampler",  # Gaussian-process BO (needs torch and scipy, both workbench dependencies)
}
PRUNERS = {  # name -> Optuna class name in optuna.pruners
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
    "threshold": "ThresholdPruner",  # {lower: 0.05}: prune once the reported value leaves [lower, upper]
    "patient": "PatientPruner",  # {patience: 2, wrapped: median}: prune after `patience` evals without progress
    "none": "NopPruner",
    "wilcoxon": "WilcoxonPruner",  # {p_threshold: 0.1}: paired by eval problem (fed per-problem results)
}
#: Pruners that wrap another: the option a study writes -> the constructor argument it fills. The
#: value is a pruner spec itself (a name or a mapping), built by :func:`make_pruner`; left out, the
#: wrapper decides alone (``patient`` without ``wrapped`` prunes on stagnation only).
WRAPPING = {"patient": ("wrapped", "wrapped_pruner")}
#: Constructor arguments that are not options a spec may set (the search supplies them, or they
#: take objects YAML cannot express).
NOT_OPTIONS = {"search_space", "constraints_func", "independent_sampler", "source_trials", "x0"}

AnyParam = FloatParam | IntParam | CategoricalParam


def optuna_class(kind: str, name: str) -> type:
    """The Optuna class of a ``sampler`` or ``pruner`` name (a key of :data:`SAMPLERS`/:data:`PRUNERS`)."""
    import optuna

    if kind == "sampler":
        return getattr(optuna.samplers, SAMPLERS[name])
    return getattr(optuna.pruners, PRUNERS[name])


def to_distribution(p: AnyParam):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(p, FloatParam):
        return FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    if isinstance(p, IntParam):
        return IntDistribution(p.low, p.high, log=p.log, step=p.step)
    return CategoricalDistribution(p.choices)


def grid_cardinality(p: AnyParam) -> int | None:
    """How many values :func:`grid_values` would list, by arithmetic (an int range of 1e9 is a
    number here, not a list); ``None`` for a continuous range."""
    if isinstance(p, CategoricalParam):
        return len(p.choices)
    if isinstance(p, IntParam):
        return len(range(p.low, p.high + 1, p.step))  # a range object: O(1)
    if p.step is None:
        return None
    return int(math.floor((p.high - p.low) / p.step + 1e-9)) + 1


def grid_values(p: AnyParam) -> list[Any] | None:
    """The finite set of values of a parameter, or ``None`` (a continuous range)."""
    if isinstance(p, CategoricalParam):
        return list(p.choices)
    if isinstance(p, IntParam):
        return list(range(p.low, p.high + 1, p.step))
    if p.step is None:
        return None
    n = int(math.floor((p.high - p.low) / p.step + 1e-9))
    return [round(p.low + i * p.step, 12) for i in range(n + 1)]


def grid_space(params: dict[str, Any]) -> dict[str, list[Any]]:
    return {name: grid_values(p) for name, p in params.items()}  # type: ignore[misc]  # grid_values of a grid parameter is a list (the caller checked it is one)


def grid_size(params: dict[str, Any]) -> int:
    """Grid points of a grid search (0 if a parameter is continuous), without listing them."""
    sizes = [grid_cardinality(p) for p in params.values()]
    return 0 if None in sizes else math.prod(sizes)  # type: ignore[arg-type]  # no None left in sizes past the test on the left


def suggest(trial, params: dict[str, AnyParam]) -> dict[str, Any]:
    """Sample (or, for an enqueued or retried trial, read back) every parameter."""
    out: dict[str, Any] = {}
    for name, p in params.items():
        if isinstance(p, FloatParam):
            out[name] = trial.suggest_float(name, p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            out[name] = trial.suggest_int(name, p.low, p.high, log=p.log, step=p.step)
        else:
            out[name] = trial.suggest_categorical(name, p.choices)
    return out


def make_sampler(sampler: dict[str, Any], params: dict[str, AnyParam], worker_index: int = 0, resumed_at: int = 0):
    """The sampler of a ``sampler:`` mapping (``name`` and options). A seeded one keeps its seed in
    the first worker of a fresh search (so a one-worker search is reproducible); another worker, or
    a worker joining a search that already has ``resumed_at`` trials, gets a seed derived from
    (seed, worker, resumed_at), so it does not propose the same points again."""
    options = {k: v for k, v in sampler.items() if k != "name"}
    if options.get("seed") is not None and (worker_index or resumed_at):
        entropy = [int(options["seed"]), worker_index, resumed_at]
        options["seed"] = int(np.random.SeedSequence(entropy).generate_state(1)[0])
    cls = optuna_class("sampler", sampler["name"])
    if sampler["name"] == "grid":
        return cls(grid_space(params), **options)
    return cls(**options)


def make_pruner(pruner: dict[str, Any] | str | None):
    """The pruner of a ``pruner:`` mapping (``name`` and options, or just a name); none: Optuna's
    ``NopPruner``. A wrapping pruner's ``wrapped`` spec is built the same way."""
    spec = {"name": pruner} if isinstance(pruner, str) else (pruner or {"name": "none"})
    cls = optuna_class("pruner", spec["name"])
    options = {k: v for k, v in spec.items() if k != "name"}
    if spec["name"] in WRAPPING:
        key, argument = WRAPPING[spec["name"]]
        options[argument] = make_pruner(options.pop(key)) if key in options else None
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():  # Optuna marks PatientPruner and WilcoxonPruner experimental: noted in docs
        warnings.simplefilter("ignore", ExperimentalWarning)
        return cls(**options)
