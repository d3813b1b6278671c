"""The checks of a study's ``search:`` section, against its schema, the study and the run config.

Every problem is a :class:`workbench.study.StudyError` line ``FILE:LINE search.PATH: message``,
all of them at once, before any trial starts: unknown keys (with a did-you-mean), unknown
run-config paths, ``low > high``, ``log`` with ``low <= 0``, a value the run config rejects (an
unknown preset, a negative learning rate), a sampler that does not apply (grid over a continuous
range, CMA-ES for a multi-objective search), pruning of a multi-objective search.

:func:`workbench.search.spec.parse_search` runs them in order: :func:`normalise` (shorthands),
:func:`validate_schema`, then the semantic checks (``check_*``).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import types
import typing
import warnings
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from workbench.config import RunConfig
from workbench.errors import did_you_mean, explain_pydantic_error, pydantic_issues, show_value, suggest_or_list
from workbench.metrics.catalogue import BY_NAME
from workbench.metrics.names import EVAL_ACCURACY
from workbench.search.samplers import (
    NOT_OPTIONS,
    PRUNERS,
    SAMPLERS,
    WRAPPING,
    grid_cardinality,
    grid_size,
    grid_space,
    make_pruner,
    optuna_class,
)
from workbench.search.schema import (
    DERIVED_METRICS,
    CategoricalParam,
    Confirm,
    Constraint,
    FloatParam,
    IntParam,
    Objective,
    SearchConfig,
)
from workbench.study import Study, config_path_error
from workbench.study.limits import MAX_RUNS_ENV, max_runs
from workbench.study.paths import config_fields_at, copy_tree, set_path
from workbench.study.report import Reporter

__all__ = [
    "Issues",
    "check_budget",
    "check_confirm",
    "check_enqueue",
    "check_objectives",
    "check_params",
    "check_pruner",
    "check_sampler",
    "check_seeds",
    "config_issues",
    "normalise",
    "validate_schema",
]

Loc = tuple[Any, ...]  # a place under ``search:``, e.g. ("params", "learner.lr", "low")


class Issues(Reporter):
    """Collects ``search.*`` problems with the file and line they were written at."""

    def __init__(self, study: Study) -> None:
        super().__init__(getattr(study, "_origin", None))

    def add(self, path: Loc, message: str) -> None:  # type: ignore[override]  # narrower than the base's add: a search check names a path in the study
        super().add(("search",) + tuple(path), message)


def config_issues(error: ValidationError) -> list[tuple[Loc, str]]:
    """A run config's validation errors, explained as the study explains them."""
    return pydantic_issues(error, config_fields_at)


# ---------------------------------------------------------------------------------------------
# Shorthands
# ---------------------------------------------------------------------------------------------


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


def _range_type(raw: dict[str, Any]) -> str:
    """The ``type`` of a range written without one, on a free-form field: ints mean an int parameter."""
    ints = all(isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool) for k in ("low", "high") if k in raw)
    return "int" if ints and not isinstance(raw.get("step"), float) else "float"


def _normalise_param(name: str, raw: Any, issues: Issues) -> Any:
    """Shorthands -> an explicit ``type``: a list is categorical; a range's type follows the field."""
    path = ("params", name)
    kind = _leaf_kind(name)
    if isinstance(raw, list):
        return {"type": "categorical", "choices": raw}
    if not isinstance(raw, dict):
        issues.add(
            path,
            f"expected a range like {{low: 1.0e-5, high: 1.0e-3, log: true}} or a list of "
            f"choices, got {show_value(raw)}",
        )
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
        else:
            raw["type"] = _range_type(raw)
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


def _normalise_objectives(data: dict[str, Any], issues: Issues) -> None:
    """``metric``/``direction``/``summary`` (one objective) or a ``{metric: direction}`` mapping ->
    a list of ``objectives``; none given: the workbench's headline metric."""
    single = {k: data.pop(k) for k in ("metric", "direction", "summary") if k in data}
    if single:
        if "objectives" in data:
            issues.add(("objectives",), "give either metric/direction (one objective) or objectives (a list), not both")
        elif "metric" not in single:
            issues.add(("metric",), "missing: the metric to optimise, e.g. metric: eval/accuracy")
        else:
            data["objectives"] = [single]
    elif "objectives" not in data:
        data["objectives"] = [{"metric": EVAL_ACCURACY}]  # the workbench's headline metric
    if isinstance(data.get("objectives"), dict):  # {metric: direction} mapping shorthand
        data["objectives"] = [{"metric": m, "direction": d} for m, d in data["objectives"].items()]


def normalise(raw: dict[str, Any], issues: Issues) -> dict[str, Any]:
    """The section with its shorthands expanded (objectives, ``sampler: tpe``, ``timeout: 2h``,
    ``seeds: 3``, params without a ``type``); problems found on the way go to ``issues``."""
    data = dict(raw)
    _normalise_objectives(data, issues)
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


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


def _schema_issue(e: dict[str, Any], raw: dict[str, Any]) -> tuple[Loc, str]:
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
        elif loc[0] == "confirm":
            valid = list(Confirm.model_fields)
    msg = explain_pydantic_error(e, valid)
    if loc[:1] == ("objectives",) and "objectives" not in raw and len(loc) >= 2:
        loc = loc[2:] or ("metric",)  # written as metric/direction/summary
    return loc, msg


def validate_schema(data: dict[str, Any], raw: dict[str, Any], issues: Issues) -> tuple[SearchConfig, set[str]]:
    """The schema check, reporting every problem: failing fields (and single params) are reported,
    dropped and the rest validated again, so the semantic checks still run on what is valid.
    Returns the config and the names of the params dropped."""
    data = dict(data)
    dropped_params: set[str] = set()
    seen: set[tuple[Loc, str]] = set()
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
            data.setdefault("objectives", [{"metric": EVAL_ACCURACY}])
            if not data.get("params"):  # nothing valid left: check the rest without parameters
                data["params"] = {"": {"type": "categorical", "choices": [None]}}
                dropped_params.add("")
    else:  # pragma: no cover - every round drops what failed
        issues.raise_if_any()
    cfg.params.pop("", None)
    return cfg, dropped_params


# ---------------------------------------------------------------------------------------------
# Objectives and constraints
# ---------------------------------------------------------------------------------------------


def _metric_issue(metric: Any) -> str | None:
    if not isinstance(metric, str) or metric in BY_NAME or metric in DERIVED_METRICS:
        return None
    names = list(BY_NAME) + list(DERIVED_METRICS)
    return f"unknown metric {metric!r}{suggest_or_list(metric, sorted(names))} (see `workbench metrics`)"


def _fill_direction(obj: Objective, path: Loc, issues: Issues) -> None:
    """An objective without a direction takes its metric's better direction (catalogue or derived)."""
    if obj.metric in DERIVED_METRICS:
        obj.direction = DERIVED_METRICS[obj.metric][1]  # type: ignore[assignment]  # a derived metric's direction is one of the Literal's values
        return
    healthy = BY_NAME[obj.metric].healthy
    if healthy in ("up", "down"):
        obj.direction = "maximize" if healthy == "up" else "minimize"
    else:
        issues.add(
            path + ("direction",),
            f"give direction: maximize or minimize ({obj.metric} has no better direction in the catalogue)",
        )


def check_objectives(cfg: SearchConfig, issues: Issues) -> None:
    """Known metrics, a direction for each (filled in from the catalogue when left out), no
    objective twice, constraints with a sensible ``min``/``max``."""
    for i, obj in enumerate(cfg.objectives):
        path = ("objectives", i) if len(cfg.objectives) > 1 else ()
        problem = _metric_issue(obj.metric)
        if problem:
            issues.add(path + ("metric",), problem)
            continue
        if obj.metric in DERIVED_METRICS and obj.summary != "last":
            issues.add(path + ("summary",), f"{obj.metric} is already one number per run: leave 'summary' out")
        if obj.direction is None:
            _fill_direction(obj, path, issues)
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


# ---------------------------------------------------------------------------------------------
# Parameters and enqueued trials
# ---------------------------------------------------------------------------------------------


def _probe(layered: dict[str, Any], path: str, value: Any) -> str | None:
    """Why ``value`` at ``path`` makes the variant's run config invalid (None if it is valid)."""
    raw = copy_tree(layered)
    set_path(raw, path.split("."), value)
    try:
        RunConfig.model_validate(raw)
    except ValidationError as err:
        parts = tuple(path.split("."))
        problems = config_issues(err)
        # the error at (or under, or above) the path itself, else the first one
        mine = [msg for loc, msg in problems if loc[: len(parts)] == parts or parts[: len(loc)] == loc]
        return (mine or [f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems])[0]
    return None


def _range_issue(p: FloatParam | IntParam) -> tuple[Loc, str] | None:
    """What is wrong with a range by itself (sub-path under the param, message), if anything."""
    if p.low > p.high:
        return (), f"low {p.low} > high {p.high}"
    if p.log and p.low <= 0:
        return ("low",), f"log: true needs low > 0, got {p.low}"
    if isinstance(p, FloatParam) and p.log and p.step is not None:
        return ("step",), "step and log: true cannot be combined (Optuna)"
    if isinstance(p, IntParam) and p.log and p.step != 1:
        return ("step",), "an int parameter with log: true needs step 1 (Optuna)"
    if p.step is not None:
        span = (p.high - p.low) / p.step
        if abs(span - round(span)) > 1e-6:
            return ("step",), f"high - low = {p.high - p.low:g} is not a multiple of step {p.step:g}"
    return None


def _check_range(name: str, p: FloatParam | IntParam, layered: dict[str, Any], issues: Issues) -> None:
    """A range that is consistent and whose ends (and a value inside, for floats) the run config accepts."""
    path = ("params", name)
    problem = _range_issue(p)
    if problem:
        issues.add(path + problem[0], problem[1])
        return
    probes: list[tuple[str, Any]] = [("low", p.low), ("high", p.high)]
    if isinstance(p, FloatParam) and p.low < p.high:
        mid = math.sqrt(p.low * p.high) if p.log else (p.low + p.high) / 2
        probes.append(("", mid))  # a value inside the range, e.g. non-integral
    for key, value in probes:
        reason = _probe(layered, name, value)
        if reason:
            issues.add(path + ((key,) if key else ()), f"{show_value(value)} is not a valid {name}: {reason}")
            return


def _check_choices(name: str, p: CategoricalParam, layered: dict[str, Any], issues: Issues) -> None:
    """Choices that are distinct and each accepted by the run config."""
    path = ("params", name)
    seen: list[Any] = []
    for i, choice in enumerate(p.choices):
        if any(type(choice) is type(s) and choice == s for s in seen):
            issues.add(path + (i,), f"choice {show_value(choice)} appears twice")
        seen.append(choice)
        reason = _probe(layered, name, choice)
        if reason:
            issues.add(path + (i,), f"{show_value(choice)} is not a valid {name}: {reason}")


def check_params(cfg: SearchConfig, layered: dict[str, Any], study: Study, issues: Issues) -> None:
    """Every parameter is a run-config path, not also a grid/zip axis, and its values are valid there."""
    axes = set(study.grid) | set(study.zip)
    for name, p in cfg.params.items():
        path = ("params", name)
        problem = config_path_error(name)
        if problem:
            issues.add(path, problem)
            continue
        if name in axes:
            issues.add(
                path,
                f"{name!r} is also a grid/zip axis of the study; `workbench tune` ignores grid/zip, "
                f"so sample it here only",
            )
        if isinstance(p, (FloatParam, IntParam)):
            _check_range(name, p, layered, issues)
        else:
            _check_choices(name, p, layered, issues)


def _enqueued_value_issue(name: str, value: Any, params: dict[str, Any]) -> str | None:
    """Why an enqueued ``name: value`` is not a value of the search's parameter ``name``, if it is not."""
    p = params.get(name)
    if p is None:
        return f"not a parameter of this search{suggest_or_list(name, sorted(params))}"
    if isinstance(p, CategoricalParam):
        if not any(type(value) is type(c) and value == c for c in p.choices):
            return f"{show_value(value)} is not one of the choices {show_value(p.choices)}"
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {show_value(value)}"
    if isinstance(p, IntParam) and not float(value).is_integer():
        return f"{name} is an int parameter, got {show_value(value)}"
    if not p.low <= value <= p.high:
        return f"{show_value(value)} is outside [{p.low}, {p.high}]"
    return None


def check_enqueue(cfg: SearchConfig, layered: dict[str, Any], issues: Issues, skip: set[str]) -> None:
    """Every enqueued trial gives values of the search's parameters that make a valid run config
    (parameters in ``skip`` were reported invalid already and are left out)."""
    for i, given in enumerate(cfg.enqueue):
        fixed = {k: v for k, v in given.items() if k not in skip}
        if not given:
            issues.add(("enqueue", i), "empty: give values for some of the params")
        ok = True
        for name, value in fixed.items():
            problem = _enqueued_value_issue(name, value, cfg.params)
            if problem:
                issues.add(("enqueue", i, name), problem)
                ok = False
        if ok and fixed:
            raw = copy_tree(layered)
            for name, value in fixed.items():
                set_path(raw, name.split("."), value)
            try:
                RunConfig.model_validate(raw)
            except ValidationError as err:
                loc, msg = config_issues(err)[0]
                issues.add(("enqueue", i), f"gives an invalid run config: {'.'.join(map(str, loc))}: {msg}")


# ---------------------------------------------------------------------------------------------
# Sampler and pruner
# ---------------------------------------------------------------------------------------------


def _unknown_options(kind: str, spec: dict[str, Any], cls: type, at: Loc) -> list[tuple[Loc, str]]:
    name = spec["name"]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self" and p not in NOT_OPTIONS]
    if kind == "pruner" and name in WRAPPING:  # written `wrapped: median`, passed as wrapped_pruner=<object>
        key, argument = WRAPPING[name]
        accepted = [key if p == argument else p for p in accepted]
    what = f"valid for {name}: {', '.join(accepted)}" if accepted else f"{name} takes no options"
    return [
        (at + (key,), f"unknown option of {kind} {name!r}{did_you_mean(key, accepted)} ({what})")
        for key in spec
        if key != "name" and key not in accepted
    ]


def _sampler_fit_issues(name: str, cfg: SearchConfig) -> list[tuple[Loc, str]]:
    """Why sampler ``name`` does not apply to this search (grid over a continuous range, CMA-ES
    without a numeric parameter or with several objectives, ...)."""
    out: list[tuple[Loc, str]] = []
    if name == "grid":
        finite = "the grid sampler needs a finite set of values: give a step, or a list of choices"
        out += [(("params", pname), finite) for pname, p in cfg.params.items() if grid_cardinality(p) is None]
        points, limit = grid_size(cfg.params), max_runs()
        if not out and points > limit:  # Optuna's GridSampler lists every point: refuse before it does
            sizes = " x ".join(f"{grid_cardinality(p):,} {pname}" for pname, p in cfg.params.items())
            out.append(
                (
                    ("sampler",),
                    f"the grid has {points:,} points ({sizes}), over the limit of {limit:,}; "
                    f"use a larger step, fewer choices or another sampler, or raise the "
                    f"limit with {MAX_RUNS_ENV}=N",
                )
            )
    if name == "cmaes":
        if len(cfg.objectives) > 1:
            out.append((("sampler",), "cmaes does not support multi-objective searches (use tpe or nsgaii)"))
        if all(isinstance(p, CategoricalParam) for p in cfg.params.values()):
            out.append(
                (
                    ("sampler",),
                    (
                        "cmaes needs at least one float or int parameter (its categorical "
                        "parameters are sampled at random)"
                    ),
                )
            )
        if importlib.util.find_spec("cmaes") is None:
            out.append((("sampler",), "the cmaes sampler needs the 'cmaes' package: pip install cmaes"))
    return out


#: Settings a search with the wilcoxon pruner may not vary: the pruner pairs a trial's per-problem
#: results with the best trial's by (eval number, problem index), so every trial must score the same
#: eval problems, in the same order, at the same learner steps.
PAIRING_SETTINGS = ("task.", "rollout.eval_size", "rollout.eval_every")


def _pruner_fit_issues(name: str, cfg: SearchConfig, at: Loc = ("pruner",)) -> list[tuple[Loc, str]]:
    if len(cfg.objectives) > 1 and name != "none":
        return [
            (
                ("pruner",),
                (
                    "Optuna cannot prune a multi-objective search: use pruner: none (health "
                    "failures still end a trial early)"
                ),
            )
        ]
    if name == "wilcoxon" and at != ("pruner",):
        return [(at, "the wilcoxon pruner is fed per-problem results, not a learning curve: it cannot be wrapped")]
    if name == "wilcoxon":
        varied = [p for p in cfg.params if p.startswith(PAIRING_SETTINGS)]
        if varied:
            return [
                (
                    ("params", varied[0]),
                    (
                        f"the wilcoxon pruner pairs trials by eval problem, so every trial must score the same eval "
                        f"problems at the same steps; a search over {varied[0]} changes them (use median or threshold)"
                    ),
                )
            ]
    return []


def _construction_issue(
    kind: str, spec: dict[str, Any], cls: type, cfg: SearchConfig, at: Loc
) -> list[tuple[Loc, str]]:
    """Constructing the object checks the option values (Optuna raises on bad ones)."""
    options = {k: v for k, v in spec.items() if k != "name"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's "experimental" notes (PatientPruner): a check, not a use
            if kind == "sampler" and spec["name"] == "grid":
                cls(grid_space(cfg.params), **options)
            elif kind == "pruner":
                make_pruner(spec)  # builds a wrapped pruner too
            else:
                cls(**options)
    except (TypeError, ValueError) as err:
        return [(at, f"{kind} {spec['name']!r}: {' '.join(str(err).split())}")]
    return []


def _wrapped_issues(spec: dict[str, Any], cfg: SearchConfig, issues: Issues, at: Loc) -> bool:
    """Check a wrapping pruner's ``wrapped`` spec (a name or a mapping) as a pruner of its own,
    normalising a name to ``{name: ...}``; whether it was valid."""
    key = WRAPPING[spec["name"]][0]
    if key not in spec:
        return True
    wrapped = spec[key]
    if isinstance(wrapped, str):
        wrapped = spec[key] = {"name": wrapped}
    if not isinstance(wrapped, dict):
        issues.add(
            at + (key,),
            f"expected a pruner name or mapping like {{name: median, n_startup_trials: 2}}, got {show_value(wrapped)}",
        )
        return False
    before = len(issues.issues)
    _check_optuna_object("pruner", wrapped, cfg, issues, at + (key,))
    return len(issues.issues) == before


def _check_optuna_object(
    kind: str, spec: dict[str, Any], cfg: SearchConfig, issues: Issues, at: Loc | None = None
) -> None:
    """A known name, options its Optuna class takes, a fit to this search, and values Optuna
    accepts: each stage only when the one before found nothing. ``at``: where the spec is written
    (default ``(kind,)``; a wrapped pruner's is ``("pruner", "wrapped")``)."""
    at = at or (kind,)
    table = SAMPLERS if kind == "sampler" else PRUNERS
    name = spec.get("name")
    if name not in table:
        issues.add(
            at + ("name",) if len(spec) > 1 else at,
            f"unknown {kind} {show_value(name)}{suggest_or_list(name, sorted(table))}",
        )
        return
    cls = optuna_class(kind, name)
    problems = _unknown_options(kind, spec, cls, at)
    if not problems and kind == "pruner" and name in WRAPPING and not _wrapped_issues(spec, cfg, issues, at):
        return  # reported where the wrapped pruner is written
    if not problems:
        problems = _sampler_fit_issues(name, cfg) if kind == "sampler" else _pruner_fit_issues(name, cfg, at)
    if not problems:
        problems = _construction_issue(kind, spec, cls, cfg, at)
    for path, message in problems:
        issues.add(path, message)


def check_sampler(cfg: SearchConfig, issues: Issues) -> None:
    """The ``sampler:`` names a sampler that applies to this search, with valid options."""
    _check_optuna_object("sampler", cfg.sampler, cfg, issues)


def check_pruner(cfg: SearchConfig, issues: Issues) -> None:
    """The ``pruner:`` (given) names a pruner that applies to this search, with valid options."""
    _check_optuna_object("pruner", cfg.pruner or {}, cfg, issues)


# ---------------------------------------------------------------------------------------------
# Budget and seeds
# ---------------------------------------------------------------------------------------------


def check_budget(raw: dict[str, Any], cfg: SearchConfig, issues: Issues) -> None:
    """A search other than a grid's needs ``n_trials`` and/or ``timeout`` (as written)."""
    if raw.get("n_trials") is None and raw.get("timeout") is None and cfg.sampler.get("name") != "grid":
        issues.add(("n_trials",), "give a budget: n_trials and/or timeout")


def check_seeds(seeds: list[int], issues: Issues) -> None:
    """At least one seed, none twice."""
    if not seeds:
        issues.add(("seeds",), "empty list: give at least one seed")
    elif len(set(seeds)) != len(seeds):
        issues.add(("seeds",), f"repeated seeds in {seeds}")


def check_confirm(cfg: SearchConfig, seeds: list[int], issues: Issues) -> None:
    """``confirm:`` re-runs on fresh seeds (none twice, none of the search's own), of one objective
    (several have a Pareto front, not one ranking to confirm)."""
    if cfg.confirm is None:
        return
    if len(cfg.objectives) > 1:
        issues.add(
            ("confirm",),
            "confirmation ranks trials by one objective: a multi-objective search has "
            "a Pareto front instead (leave confirm out)",
        )
    fresh = cfg.confirm.seeds
    if len(set(fresh)) != len(fresh):
        issues.add(("confirm", "seeds"), f"repeated seeds in {fresh}")
    reused = sorted(set(fresh) & set(seeds))
    if reused:
        issues.add(
            ("confirm", "seeds"),
            f"seed(s) {', '.join(map(str, reused))} are seeds of the search itself: "
            f"a confirmation needs fresh seeds (the trials were selected on those)",
        )
