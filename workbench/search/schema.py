"""The ``search:`` section of a study: schema, validation against the run config, Optuna objects.

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
      sampler: tpe                      # or {name: tpe, seed: 0, n_startup_trials: 5}
      pruner: {name: median, n_startup_trials: 2}
      n_trials: 30                      # COMPLETE + PRUNED trials, counted across invocations
      timeout: 2h                       # per invocation: no trial starts after it
      seeds: [0, 1]                     # a trial runs each seed; its value is the mean
      enqueue:                          # fixed trials, run first (e.g. each paper's defaults)
        - {learner.lr: 1.0e-4, algorithm.preset: grpo}
      constraints:                      # feasibility, via Optuna's Trial.set_constraint
        - {metric: length/mean, max: 200}
      variant: base                     # which variant the search starts from (default: the first)

Every problem is a :class:`workbench.study.StudyError` line ``FILE:LINE search.PATH: message``,
all of them at once, before any trial starts: unknown keys (with a did-you-mean), unknown
run-config paths, ``low > high``, ``log`` with ``low <= 0``, a value the run config rejects (an
unknown preset, a negative learning rate), a sampler that does not apply (grid over a continuous
range, CMA-ES for a multi-objective search), pruning of a multi-objective search.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import json
import math
import re
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from workbench.config import RunConfig, deep_merge
from workbench.errors import did_you_mean, explain_pydantic_error, pydantic_issues, show_value, suggest_or_list
from workbench.metrics.catalogue import BY_NAME as CATALOGUE
from workbench.study import Study, config_path_error
from workbench.study.paths import config_fields_at, set_path
from workbench.study.report import Reporter

__all__ = [
    "DERIVED_METRICS",
    "Objective",
    "SearchSpec",
    "parse_search",
    "set_path",
]

# ---------------------------------------------------------------------------------------------
# Run-level summary metrics (computed from a run's step metrics by workbench.search.objective)
# ---------------------------------------------------------------------------------------------

DERIVED_METRICS: dict[str, tuple[str, str]] = {
    # name -> (meaning, better direction)
    "summary/tokens_per_correct": (
        "training tokens generated per correct completion over the run (Σ perf/sample_tokens / "
        "Σ correct sampled completions; inf if none was correct)", "minimize"),
    "summary/learner_steps": ("RL steps the run took (fewer if it was stopped early)", "minimize"),
}

SAMPLERS = {  # name -> Optuna class name in optuna.samplers
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "cmaes": "CmaEsSampler",
    "nsgaii": "NSGAIISampler",
    "qmc": "QMCSampler",
}
PRUNERS = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
    "none": "NopPruner",
}
_NO_OPTIONS = {"search_space", "constraints_func", "independent_sampler", "source_trials", "x0"}
Summary = Literal["last", "max", "min", "mean"]


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Objective(_Strict):
    """One objective: a metric of the run, reduced to one number per run, and a direction."""

    metric: str = Field(description="a canonical metric (`workbench metrics`) or a summary/* metric")
    direction: Literal["maximize", "minimize"] | None = Field(
        None, description="default: the metric's healthy direction in the catalogue")
    summary: Summary = Field(
        "last", description="how one run's values become one number: last | max | min | mean")


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


# ---------------------------------------------------------------------------------------------
# The validated search
# ---------------------------------------------------------------------------------------------


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
        return [o.direction for o in self.config.objectives]  # type: ignore[misc]

    @property
    def multi_objective(self) -> bool:
        return len(self.config.objectives) > 1

    @property
    def params(self) -> dict[str, FloatParam | IntParam | CategoricalParam]:
        return self.config.params

    @property
    def n_trials(self) -> int | None:
        if self.sampler_name == "grid":  # at most one trial per grid point
            size = grid_size(self.config.params)
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

    def objective_names(self) -> list[str]:
        return [o.metric if o.summary == "last" else f"{o.metric}:{o.summary}" for o in self.objectives]

    def fingerprint(self) -> str:
        """A hash of the search definition, budget excluded (a resumed search whose definition
        changed is reported)."""
        search = self.config.model_dump(mode="json", exclude={"n_trials", "timeout"})
        data = {"search": search, "base": self.layered, "seeds": self.seeds}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------------------ Optuna
    def distributions(self) -> dict[str, Any]:
        return {name: to_distribution(p) for name, p in self.params.items()}

    def suggest(self, trial) -> dict[str, Any]:
        """Sample (or, for an enqueued or retried trial, read back) every parameter."""
        out: dict[str, Any] = {}
        for name, p in self.params.items():
            if isinstance(p, FloatParam):
                out[name] = trial.suggest_float(name, p.low, p.high, log=p.log, step=p.step)
            elif isinstance(p, IntParam):
                out[name] = trial.suggest_int(name, p.low, p.high, log=p.log, step=p.step)
            else:
                out[name] = trial.suggest_categorical(name, p.choices)
        return out

    def make_sampler(self, worker_index: int = 0, resumed_at: int = 0):
        """The sampler. A seeded one keeps its seed in the first worker of a fresh search (so a
        one-worker search is reproducible); another worker, or a worker joining a search that
        already has ``resumed_at`` trials, gets a seed derived from (seed, worker, resumed_at), so it
        does not propose the same points again."""
        import numpy as np
        import optuna

        options = {k: v for k, v in self.config.sampler.items() if k != "name"}
        if options.get("seed") is not None and (worker_index or resumed_at):
            entropy = [int(options["seed"]), worker_index, resumed_at]
            options["seed"] = int(np.random.SeedSequence(entropy).generate_state(1)[0])
        cls = getattr(optuna.samplers, SAMPLERS[self.sampler_name])
        if self.sampler_name == "grid":
            return cls(grid_space(self.params), **options)
        return cls(**options)

    def make_pruner(self):
        import optuna

        spec = self.config.pruner or {"name": "none"}
        cls = getattr(optuna.pruners, PRUNERS[spec["name"]])
        return cls(**{k: v for k, v in spec.items() if k != "name"})

    # --------------------------------------------------------------------------- run config
    def trial_raw(self, values: dict[str, Any], seed: int) -> dict[str, Any]:
        raw = _copy_tree(self.layered)
        for path, value in values.items():
            set_path(raw, path.split("."), value)
        raw["seed"] = seed
        return raw

    def trial_config(self, values: dict[str, Any], seed: int) -> RunConfig:
        """The run config of one seed of a trial (``ValueError`` naming the problem if invalid)."""
        try:
            return RunConfig.model_validate(self.trial_raw(values, seed))
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, loc)) or 'config'}: {msg}" for loc, msg in _config_issues(err))
            raise ValueError(f"the sampled values {values} give an invalid run config: {problems}") from None

    def variant_override(self, values: dict[str, Any]) -> dict[str, Any]:
        """The search variant's own overrides plus ``values``, as a nested study variant."""
        override = _copy_tree(self.study.variants.get(self.variant, {}))
        for path, value in values.items():
            set_path(override, path.split("."), value)
        return override


def to_distribution(p: FloatParam | IntParam | CategoricalParam):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(p, FloatParam):
        return FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    if isinstance(p, IntParam):
        return IntDistribution(p.low, p.high, log=p.log, step=p.step)
    return CategoricalDistribution(p.choices)


def grid_values(p: FloatParam | IntParam | CategoricalParam) -> list[Any] | None:
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
    return {name: grid_values(p) for name, p in params.items()}  # type: ignore[misc]


def grid_size(params: dict[str, Any]) -> int:
    return math.prod(len(v) for v in grid_space(params).values())


def _copy_tree(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _copy_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy_tree(v) for v in tree]
    return tree


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


class _Issues(Reporter):
    """Collects ``search.*`` problems with the file and line they were written at."""

    def __init__(self, study: Study) -> None:
        super().__init__(getattr(study, "_origin", None))

    def add(self, path: tuple[Any, ...], message: str) -> None:  # type: ignore[override]
        super().add(("search",) + tuple(path), message)


def _config_issues(error: ValidationError) -> list[tuple[tuple[Any, ...], str]]:
    """A run config's validation errors, explained as the study explains them."""
    return pydantic_issues(error, config_fields_at)


def _parse_timeout(value: Any) -> Any:
    """``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1h30m"`` -> seconds; other input is left for pydantic."""
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text)
        if text and parts and any(parts.groups()):
            h, m, s = (float(g) if g else 0.0 for g in parts.groups())
            return h * 3600 + m * 60 + s
        raise ValueError(f"expected seconds or a duration like '90s', '30m', '2h', got {show_value(value)}")
    return value


def _leaf_kind(dotted: str) -> str | None:
    """'int' | 'float' | 'bool' | 'str' for a run-config leaf; None where the schema does not say."""
    node: Any = RunConfig
    ann: Any = None
    for part in dotted.split("."):
        if not (isinstance(node, type) and issubclass(node, BaseModel)) or part not in node.model_fields:
            return None
        ann = node.model_fields[part].annotation
        options = [ann]
        if typing.get_origin(ann) in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(ann) if a is not type(None)]
        node = options[0] if len(options) == 1 else None
        ann = node
    if typing.get_origin(ann) is Literal:
        args = typing.get_args(ann)
        return "str" if all(isinstance(a, str) for a in args) else None
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(ann)


def _normalise_param(name: str, raw: Any, issues: _Issues) -> Any:
    """Shorthands -> an explicit ``type``: a list is categorical; a range's type follows the field."""
    path = ("params", name)
    kind = _leaf_kind(name)
    if isinstance(raw, list):
        return {"type": "categorical", "choices": raw}
    if not isinstance(raw, dict):
        issues.add(path, f"expected a range like {{low: 1.0e-5, high: 1.0e-3, log: true}} or a list of "
                         f"choices, got {show_value(raw)}")
        return None
    raw = dict(raw)
    given = raw.get("type")
    if given is None:
        if "choices" in raw:
            raw["type"] = "categorical"
        elif kind in ("int", "float"):
            raw["type"] = kind
        elif kind in ("str", "bool"):
            issues.add(path, f"{name!r} is a {kind} field: give its values as a list of choices")
            return None
        else:  # a free-form field: ints mean an int parameter
            ints = all(isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool)
                       for k in ("low", "high") if k in raw)
            raw["type"] = "int" if ints and not isinstance(raw.get("step"), float) else "float"
    elif given not in ("float", "int", "categorical"):
        issues.add(path + ("type",), f"expected 'float', 'int' or 'categorical', got {show_value(given)}")
        return None
    if raw["type"] == "float" and kind == "int":
        issues.add(path + ("type",), f"{name!r} is an integer field: use type: int (or leave 'type' out)")
        return None
    if raw["type"] in ("float", "int") and kind in ("str", "bool"):
        issues.add(path + ("type",), f"{name!r} is a {kind} field: give its values as a list of choices")
        return None
    return raw


def _normalise(raw: dict[str, Any], issues: _Issues) -> dict[str, Any]:
    data = dict(raw)
    single = {k: data.pop(k) for k in ("metric", "direction", "summary") if k in data}
    if single:
        if "objectives" in data:
            issues.add(("objectives",), "give either metric/direction (one objective) or objectives (a list), "
                                        "not both")
        elif "metric" not in single:
            issues.add(("metric",), "missing: the metric to optimise, e.g. metric: eval/accuracy")
        else:
            data["objectives"] = [single]
    elif "objectives" not in data:
        data["objectives"] = [{"metric": "eval/accuracy"}]  # the workbench's headline metric
    if isinstance(data.get("objectives"), dict):  # {metric: direction} mapping shorthand
        data["objectives"] = [{"metric": m, "direction": d} for m, d in data["objectives"].items()]
    for key in ("sampler", "pruner"):
        if isinstance(data.get(key), str):
            data[key] = {"name": data[key]}
    if "timeout" in data:
        try:
            data["timeout"] = _parse_timeout(data["timeout"])
        except ValueError as err:
            issues.add(("timeout",), str(err))
            data.pop("timeout")
    seeds = data.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            issues.add(("seeds",), f"a number of seeds must be >= 1, got {seeds}")
        data["seeds"] = list(range(max(seeds, 1)))
    params = data.get("params")
    if isinstance(params, dict):
        out = {}
        for name, spec in params.items():
            norm = _normalise_param(str(name), spec, issues)
            if norm is not None:
                out[name] = norm
        data["params"] = out
    if data.get("enqueue") is None:
        data.pop("enqueue", None)
    return data


def _known_metric(metric: str) -> bool:
    return metric in CATALOGUE or metric in DERIVED_METRICS


def _metric_issue(metric: Any) -> str | None:
    if not isinstance(metric, str) or _known_metric(metric):
        return None
    names = list(CATALOGUE) + list(DERIVED_METRICS)
    return f"unknown metric {metric!r}{suggest_or_list(metric, sorted(names))} (see `workbench metrics`)"


def _check_objectives(cfg: SearchConfig, issues: _Issues) -> None:
    for i, obj in enumerate(cfg.objectives):
        path = ("objectives", i) if len(cfg.objectives) > 1 else ()
        problem = _metric_issue(obj.metric)
        if problem:
            issues.add(path + ("metric",), problem)
            continue
        if obj.metric in DERIVED_METRICS and obj.summary != "last":
            issues.add(path + ("summary",), f"{obj.metric} is already one number per run: leave 'summary' out")
        if obj.direction is None:
            if obj.metric in DERIVED_METRICS:
                obj.direction = DERIVED_METRICS[obj.metric][1]  # type: ignore[assignment]
            else:
                healthy = CATALOGUE[obj.metric].healthy
                if healthy in ("up", "down"):
                    obj.direction = "maximize" if healthy == "up" else "minimize"
                else:
                    issues.add(path + ("direction",), f"give direction: maximize or minimize ({obj.metric} "
                                                      f"has no better direction in the catalogue)")
    seen: dict[tuple[str, str], int] = {}
    for i, obj in enumerate(cfg.objectives):
        key = (obj.metric, obj.summary)
        if key in seen:
            issues.add(("objectives", i), f"repeats objective {seen[key]} ({obj.metric}, summary {obj.summary})")
        seen.setdefault(key, i)
    for i, con in enumerate(cfg.constraints):
        problem = _metric_issue(con.metric)
        if problem:
            issues.add(("constraints", i, "metric"), problem)
        if con.min is None and con.max is None:
            issues.add(("constraints", i), "give min and/or max")
        elif con.min is not None and con.max is not None and con.min > con.max:
            issues.add(("constraints", i), f"min {con.min} > max {con.max}")


def _probe(layered: dict[str, Any], path: str, value: Any) -> str | None:
    """Why ``value`` at ``path`` makes the variant's run config invalid (None if it is valid)."""
    raw = _copy_tree(layered)
    set_path(raw, path.split("."), value)
    try:
        RunConfig.model_validate(raw)
    except ValidationError as err:
        parts = tuple(path.split("."))
        problems = _config_issues(err)
        # the error at (or under, or above) the path itself, else the first one
        mine = [msg for loc, msg in problems
                if loc[: len(parts)] == parts or parts[: len(loc)] == loc]
        return (mine or [f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems])[0]
    return None


def _check_params(cfg: SearchConfig, layered: dict[str, Any], study: Study, issues: _Issues) -> None:
    axes = set(study.grid) | set(study.zip)
    for name, p in cfg.params.items():
        path = ("params", name)
        problem = config_path_error(name)
        if problem:
            issues.add(path, problem)
            continue
        if name in axes:
            issues.add(path, f"{name!r} is also a grid/zip axis of the study; `workbench tune` ignores grid/zip, "
                             f"so sample it here only")
        if isinstance(p, (FloatParam, IntParam)):
            if p.low > p.high:
                issues.add(path, f"low {p.low} > high {p.high}")
                continue
            if p.log and p.low <= 0:
                issues.add(path + ("low",), f"log: true needs low > 0, got {p.low}")
                continue
            if isinstance(p, FloatParam) and p.log and p.step is not None:
                issues.add(path + ("step",), "step and log: true cannot be combined (Optuna)")
                continue
            if isinstance(p, IntParam) and p.log and p.step != 1:
                issues.add(path + ("step",), "an int parameter with log: true needs step 1 (Optuna)")
                continue
            if p.step is not None:
                span = (p.high - p.low) / p.step
                if abs(span - round(span)) > 1e-6:
                    issues.add(path + ("step",), f"high - low = {p.high - p.low:g} is not a multiple of step "
                                                 f"{p.step:g}")
                    continue
            probes: list[tuple[str, Any]] = [("low", p.low), ("high", p.high)]
            if isinstance(p, FloatParam) and p.low < p.high:
                mid = math.sqrt(p.low * p.high) if p.log else (p.low + p.high) / 2
                probes.append(("", mid))  # a value inside the range, e.g. non-integral
            for key, value in probes:
                problem = _probe(layered, name, value)
                if problem:
                    issues.add(path + ((key,) if key else ()), f"{show_value(value)} is not a valid {name}: {problem}")
                    break
        else:
            seen: list[Any] = []
            for i, choice in enumerate(p.choices):
                if any(type(choice) is type(s) and choice == s for s in seen):
                    issues.add(path + (i,), f"choice {show_value(choice)} appears twice")
                seen.append(choice)
                problem = _probe(layered, name, choice)
                if problem:
                    issues.add(path + (i,), f"{show_value(choice)} is not a valid {name}: {problem}")


def _check_enqueue(cfg: SearchConfig, layered: dict[str, Any], issues: _Issues, skip: set[str]) -> None:
    for i, fixed in enumerate(cfg.enqueue):
        fixed = {k: v for k, v in fixed.items() if k not in skip}  # params reported invalid already
        if not cfg.enqueue[i]:
            issues.add(("enqueue", i), "empty: give values for some of the params")
        ok = True
        for name, value in fixed.items():
            path = ("enqueue", i, name)
            p = cfg.params.get(name)
            if p is None:
                issues.add(path, f"not a parameter of this search{suggest_or_list(name, sorted(cfg.params))}")
                ok = False
                continue
            if isinstance(p, CategoricalParam):
                if not any(type(value) is type(c) and value == c for c in p.choices):
                    issues.add(path, f"{show_value(value)} is not one of the choices {show_value(p.choices)}")
                    ok = False
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                issues.add(path, f"expected a number, got {show_value(value)}")
                ok = False
            elif isinstance(p, IntParam) and not float(value).is_integer():
                issues.add(path, f"{name} is an int parameter, got {show_value(value)}")
                ok = False
            elif not p.low <= value <= p.high:
                issues.add(path, f"{show_value(value)} is outside [{p.low}, {p.high}]")
                ok = False
        if ok and fixed:
            raw = _copy_tree(layered)
            for name, value in fixed.items():
                set_path(raw, name.split("."), value)
            try:
                RunConfig.model_validate(raw)
            except ValidationError as err:
                loc, msg = _config_issues(err)[0]
                issues.add(("enqueue", i), f"gives an invalid run config: {'.'.join(map(str, loc))}: {msg}")


def _option_issues(kind: str, spec: dict[str, Any], table: dict[str, str], issues: _Issues,
                   cfg: SearchConfig) -> None:
    name = spec.get("name")
    if name not in table:
        issues.add((kind, "name") if len(spec) > 1 else (kind,),
                   f"unknown {kind} {show_value(name)}{suggest_or_list(name, sorted(table))}")
        return
    import optuna

    module = optuna.samplers if kind == "sampler" else optuna.pruners
    cls = getattr(module, table[name])
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self" and p not in _NO_OPTIONS]
    bad = False
    for key in spec:
        if key != "name" and key not in accepted:
            what = f"valid for {name}: {', '.join(accepted)}" if accepted else f"{name} takes no options"
            issues.add((kind, key), f"unknown option of {kind} {name!r}{did_you_mean(key, accepted)} ({what})")
            bad = True
    if bad:
        return
    if kind == "sampler":
        if name == "grid":
            for pname, p in cfg.params.items():
                if grid_values(p) is None:
                    issues.add(("params", pname), "the grid sampler needs a finite set of values: give a step, "
                                                  "or a list of choices")
                    bad = True
        if name == "cmaes":
            if len(cfg.objectives) > 1:
                issues.add((kind,), "cmaes does not support multi-objective searches (use tpe or nsgaii)")
                bad = True
            if all(isinstance(p, CategoricalParam) for p in cfg.params.values()):
                issues.add((kind,), "cmaes needs at least one float or int parameter (its categorical "
                                    "parameters are sampled at random)")
                bad = True
            if importlib.util.find_spec("cmaes") is None:
                issues.add((kind,), "the cmaes sampler needs the 'cmaes' package: pip install cmaes")
                bad = True
    else:
        if len(cfg.objectives) > 1 and name != "none":
            issues.add((kind,), "Optuna cannot prune a multi-objective search: use pruner: none (health "
                                "failures still end a trial early)")
            bad = True
    if bad:
        return
    try:  # constructing it checks the option values (Optuna raises on bad ones)
        options = {k: v for k, v in spec.items() if k != "name"}
        if kind == "sampler" and name == "grid":
            cls(grid_space(cfg.params), **options)
        else:
            cls(**options)
    except (TypeError, ValueError) as err:
        issues.add((kind,), f"{kind} {name!r}: {' '.join(str(err).split())}")


def _schema_issue(e: dict[str, Any], raw: dict[str, Any]) -> tuple[tuple[Any, ...], str]:
    loc = tuple(e["loc"])
    if len(loc) >= 3 and loc[0] == "params":  # (params, name, type-tag, field...): drop the tag
        loc = loc[:2] + loc[3:]
    valid: list[str] | None = None  # the keys of the mapping holding an unknown key
    if e["type"] == "extra_forbidden":
        if len(loc) == 1:
            valid = list(SearchConfig.model_fields) + ["metric", "direction", "summary"]
        elif loc[0] == "params":
            valid = list(FloatParam.model_fields) + ["choices"]
        elif loc[0] in ("objectives", "constraints"):
            valid = list((Objective if loc[0] == "objectives" else Constraint).model_fields)
    msg = explain_pydantic_error(e, valid)
    if loc[:1] == ("objectives",) and "objectives" not in raw and len(loc) >= 2:
        loc = loc[2:] or ("metric",)  # written as metric/direction/summary
    return loc, msg


def _validate_schema(data: dict[str, Any], raw: dict[str, Any], issues: _Issues) -> tuple[SearchConfig, set[str]]:
    """The schema check, reporting every problem: failing fields (and single params) are reported,
    dropped and the rest validated again, so the semantic checks still run on what is valid."""
    data = dict(data)
    dropped_params: set[str] = set()
    seen: set[tuple[tuple[Any, ...], str]] = set()
    for _ in range(4):
        try:
            cfg = SearchConfig.model_validate(data)
            break
        except ValidationError as err:
            for e in err.errors():
                loc, msg = _schema_issue(e, raw)
                if (loc, msg) not in seen:
                    seen.add((loc, msg))
                    issues.add(loc, msg)
                head = e["loc"][0] if e["loc"] else None
                if head == "params" and len(e["loc"]) >= 2:
                    dropped_params.add(str(e["loc"][1]))
                elif head is not None:
                    data.pop(head, None)
            if isinstance(data.get("params"), dict):
                data["params"] = {k: v for k, v in data["params"].items() if k not in dropped_params}
            data.setdefault("objectives", [{"metric": "eval/accuracy"}])
            if not data.get("params"):  # nothing valid left: check the rest without parameters
                data["params"] = {"": {"type": "categorical", "choices": [None]}}
                dropped_params.add("")
    else:  # pragma: no cover - every round drops what failed
        issues.raise_if_any()
    cfg.params.pop("", None)
    return cfg, dropped_params


def parse_search(study: Study) -> SearchSpec:
    """Validate ``study.search`` against the study and the run-config schema.

    Raises ``StudyError`` with one ``FILE:LINE search.PATH: message`` line per problem.
    """
    issues = _Issues(study)
    raw = study.search
    if raw is None:
        issues.add((), "this study has no search: section (metric, params, n_trials: see `workbench tune --help` "
                       "and the docstring of workbench/search/schema.py)")
        issues.raise_if_any()
    if not isinstance(raw, dict):
        issues.add((), f"expected a mapping (metric, params, sampler, ...), got {show_value(raw)}")
        issues.raise_if_any()
    data = _normalise(raw, issues)
    cfg, dropped = _validate_schema(data, raw, issues)

    variant = cfg.variant or next(iter(study.variants))
    if variant not in study.variants:
        issues.add(("variant",), f"unknown variant {variant!r}{suggest_or_list(variant, sorted(study.variants))}")
        issues.raise_if_any()
    layered = _copy_tree(study.base)
    if study.health is not None:
        layered = deep_merge(layered, {"health": study.health})
    if study.tracking:
        layered = deep_merge(layered, {"tracking": study.tracking})
    layered = deep_merge(layered, _copy_tree(study.variants[variant]))
    tracking = dict(layered.get("tracking") or {})
    tracking.setdefault("experiment", study.name)
    layered["tracking"] = tracking
    experiment = tracking["experiment"] or study.name

    _check_objectives(cfg, issues)
    _check_params(cfg, layered, study, issues)
    _check_enqueue(cfg, layered, issues, skip=dropped)
    _option_issues("sampler", cfg.sampler, SAMPLERS, issues, cfg)
    if cfg.pruner is None:
        cfg.pruner = {"name": "median" if len(cfg.objectives) == 1 else "none"}  # Optuna's default
    else:
        _option_issues("pruner", cfg.pruner, PRUNERS, issues, cfg)
    if raw.get("n_trials") is None and raw.get("timeout") is None and cfg.sampler.get("name") != "grid":
        issues.add(("n_trials",), "give a budget: n_trials and/or timeout")
    seeds = cfg.seeds if cfg.seeds is not None else list(study.seeds)
    if not seeds:
        issues.add(("seeds",), "empty list: give at least one seed")
    elif len(set(seeds)) != len(seeds):
        issues.add(("seeds",), f"repeated seeds in {seeds}")
    issues.raise_if_any()
    return SearchSpec(study=study, config=cfg, variant=variant, seeds=list(seeds), layered=layered,
                      experiment=experiment, optuna_name=f"{study.name}:search")
