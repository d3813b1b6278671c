"""A ``Study`` -> one ``RunSpec`` per run: variants x grid/zip points x cold starts x seeds, minus exclusions.

Precedence, lowest first: ``base`` < the study's ``health:``/``tracking:`` < the variant < the
grid/zip values < the seed. Expansion order: variants in file order, then grid points (grid axes
in file order, the zip as one last axis; the last axis varies fastest), then cold starts
(``replicate.cold_start``: k > 1 nests the seeds in k cold starts, each run's ``model.cold_start``
its index and its label ``<arm>/cold_start=<i>/seed=<s>``; k = 1 leaves runs as they were), then seeds. Every run's
config is validated; an invalid value is reported at the line of the study that set it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

from pydantic import ValidationError

from workbench.config import RunConfig, deep_merge
from workbench.engine.trl_mapping import inexpressible
from workbench.errors import pydantic_issues
from workbench.study.paths import MISSING, config_fields_at, get_path, is_int, set_path
from workbench.study.report import Path_, Reporter
from workbench.study.schema import Study, check_semantics, cold_starts, same_value

__all__ = ["COLD_START_SEGMENT", "RunSpec", "arm_of_label", "expand", "expand_runs", "validate_run_config"]

#: The label segment naming a run's cold start in a study with ``replicate.cold_start`` > 1.
COLD_START_SEGMENT = "/cold_start="


def arm_of_label(label: str) -> str:
    """The arm of a run label: without ``/seed=N``, and without ``/cold_start=I`` (a replicate of the arm's
    treatment, not another arm): ``worked/cold_start=2/seed=1`` -> ``worked``."""
    stem = label.rsplit("/seed=", 1)[0]
    head, sep, index = stem.rpartition(COLD_START_SEGMENT)
    return head if sep and index.isdigit() else stem


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a study: its resolved, validated config and its identity."""

    variant: str
    seed: int
    grid: dict[str, Any] = dataclasses.field(hash=False)  # this point's grid/zip values, dotted keys
    config: RunConfig = dataclasses.field(hash=False)  # seed set; tracking.experiment defaults to the study name
    run_key: str  # == config.run_key(): hash of everything that determines results
    label: str  # e.g. "dapo/lr=3e-05/seed=1"; unique within the study
    cold_start: int | None = None  # the run's cold start (replicate.cold_start > 1), None when not replicated


@dataclasses.dataclass(frozen=True)
class _Axis:
    field: str  # "grid" | "zip"
    keys: tuple[str, ...]  # one key for a grid axis, all zip keys for the zip axis
    points: tuple[tuple[Any, ...], ...]  # per point: one value per key


def _axes(study: Study) -> list[_Axis]:
    axes = [_Axis("grid", (key,), tuple((v,) for v in values)) for key, values in study.grid.items()]
    if study.zip:
        keys = tuple(study.zip)
        points = tuple(zip(*(study.zip[k] for k in keys), strict=True))
        axes.append(_Axis("zip", keys, points))
    return axes


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def _short_names(keys: list[str]) -> dict[str, str]:
    """Last path component for labels, the full path where two axes share a last component."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def _depth(layer: Any, loc: tuple[Any, ...]) -> int:
    """How many leading parts of ``loc`` the layer dict has."""
    d = 0
    for part in loc:
        if isinstance(layer, dict) and part in layer:  # noqa: SIM114 - a dict and a list step, each tested its own way
            layer = layer[part]
        elif isinstance(layer, list) and is_int(part) and 0 <= part < len(layer):
            layer = layer[part]
        else:
            break
        d += 1
    return d


def _blame(loc: tuple[Any, ...], study: Study, variant: str, point: list[tuple[_Axis, int]], seed_index: int) -> Path_:
    """The study path that set the config value at ``loc``: grid > seed > variant > health/tracking > base."""
    candidates: list[tuple[int, int, Path_]] = []
    for axis, index in point:
        for key in axis.keys:
            parts = tuple(key.split("."))
            n = min(len(parts), len(loc))
            if n and parts[:n] == loc[:n]:
                rest = loc[len(parts) :] if len(loc) > len(parts) else ()
                candidates.append((n, 4, (axis.field, key, index) + rest))
    if loc[:1] == ("seed",):
        candidates.append((1, 3, ("seeds", seed_index)))
    d = _depth(study.variants.get(variant, {}), loc)
    if d:
        candidates.append((d, 2, ("variants", variant) + loc))
    for section in ("health", "tracking"):
        layer = getattr(study, section)
        if loc[:1] == (section,) and layer:
            candidates.append((_depth({section: layer}, loc), 1, loc))
    candidates.append((_depth(study.base, loc), 0, ("base",) + loc))
    return max(candidates, key=lambda c: (c[0], c[1]))[2]


def _matches(entry: dict[str, Any], variant: str, seed: int, resolved: dict[str, Any]) -> bool:
    for key, wanted in entry.items():
        if key == "variant":
            ok = variant == wanted
        elif key == "seed":
            ok = same_value(seed, wanted)
        else:
            actual = get_path(resolved, key.split("."))
            ok = actual is not MISSING and same_value(actual, wanted)
        if not ok:
            return False
    return True


def _first_kept(study: Study, variant: str, resolved: dict[str, Any]) -> int:
    """The index of the first seed no ``exclude:`` entry drops (where a seed's problems are blamed)."""
    return next(
        i for i, s in enumerate(study.seeds) if not any(_matches(e, variant, s, resolved) for e in study.exclude)
    )


def validate_run_config(raw: dict[str, Any]) -> tuple[RunConfig | None, list[tuple[tuple[Any, ...], str]]]:
    """(config, []) or (None, problems as (run-config loc, message))."""
    try:
        return RunConfig.model_validate(raw), []
    except ValidationError as err:
        problems = pydantic_issues(err, config_fields_at)
    # An unknown preset stops the `algorithm` section early; check the rest of it under the
    # default preset so that every problem is reported at once.
    if any(loc == ("algorithm", "preset") and msg.startswith("unknown preset") for loc, msg in problems):
        algorithm = {k: v for k, v in raw["algorithm"].items() if k != "preset"}
        _, more = validate_run_config({**raw, "algorithm": algorithm})
        problems += [p for p in more if p[0][:1] == ("algorithm",) and p not in problems]
    return None, problems


def engine_problems(config: RunConfig, variant: str) -> list[tuple[tuple[Any, ...], str]]:
    """``engine: trl`` with a setting TRL cannot express (workbench.engine.trl_mapping): the first one, as one line that
    names the setting and the variant; nothing otherwise. One line: the others are of the same kind."""
    refused = inexpressible(config)
    if not refused:
        return []
    setting, why = refused[0]
    return [(tuple(setting.split(".")), f"engine: trl cannot express {setting} (variant {variant!r}): {why}")]


def expand_runs(study: Study, rep: Reporter) -> list[RunSpec]:
    """All runs of a study whose fields passed ``check_semantics``; issues go to ``rep``."""
    axes = _axes(study)
    short = _short_names([k for axis in axes for k in axis.keys])
    specs: list[RunSpec] = []
    first_label: dict[str, str] = {}  # run_key -> label
    for variant, override in study.variants.items():
        layered = dict(study.base)
        if study.health is not None:
            layered = deep_merge(layered, {"health": study.health})
        layered = deep_merge(layered, {"tracking": study.tracking}) if study.tracking else layered
        layered = deep_merge(layered, override)
        for point in itertools.product(*(list(enumerate(a.points)) for a in axes)):
            chosen = [(axis, index) for axis, (index, _) in zip(axes, point, strict=True)]
            values: dict[str, Any] = {}
            raw = dict(layered)
            for axis, (_, vals) in zip(axes, point, strict=True):
                for key, value in zip(axis.keys, vals, strict=True):
                    values[key] = value
                    set_path(raw, key.split("."), value)
            tracking = dict(raw.get("tracking") or {}) if isinstance(raw.get("tracking", {}), dict) else None
            if tracking is not None:
                tracking.setdefault("experiment", study.name)
                raw["tracking"] = tracking
            parts = [variant] + [f"{short[k]}={_fmt_value(v)}" for k, v in values.items()]
            base_label = "/".join(parts)

            config, problems = validate_run_config({**raw, "seed": study.seeds[0]})
            if config is not None and not problems:
                problems = engine_problems(config, variant)
            resolved = config.model_dump(mode="python") if config is not None else raw

            if problems or config is None:
                if not all(any(_matches(e, variant, s, resolved) for e in study.exclude) for s in study.seeds):
                    for loc, msg in problems:  # once: the same problems for every seed
                        rep.add(_blame(loc, study, variant, chosen, _first_kept(study, variant, resolved)), msg)
                continue
            replicated = cold_starts(study) > 1
            for cold_start in range(cold_starts(study)):
                replicate: RunConfig | None = config
                if replicated:  # only then: runs of a study that does not replicate keep their configs and keys
                    raw_model = {**config.model.model_dump(), "cold_start": cold_start}
                    replicate, issues = validate_run_config({**config.model_dump(), "model": raw_model})
                    for _, msg in issues:  # e.g. model.path without a priming stage has no cold start to repeat
                        rep.add(("replicate", "cold_start"), f"{base_label}: {msg}")
                    if replicate is None:
                        break
                stem = f"{base_label}{COLD_START_SEGMENT}{cold_start}" if replicated else base_label
                for seed in study.seeds:
                    if any(_matches(e, variant, seed, resolved) for e in study.exclude):
                        continue
                    cfg = replicate.model_copy(update={"seed": seed}, deep=True)  # no shared sub-configs
                    key = cfg.run_key()
                    label = f"{stem}/seed={seed}"
                    if key in first_label:
                        other = first_label[key]
                        rep.add(
                            ("variants", variant),
                            f"runs {other!r} and {label!r} have the same resolved config (run_key {key}); "
                            "make them differ or drop one",
                        )
                        continue
                    first_label[key] = label
                    specs.append(
                        RunSpec(variant, seed, dict(values), cfg, key, label, cold_start if replicated else None)
                    )
    if not specs and not rep.issues:
        rep.add(("exclude",) if study.exclude else (), "the study expands to no runs")
    return specs


def expand(study: Study) -> list[RunSpec]:
    """The study's runs: variants in file order, then grid points, then seeds, minus exclusions.

    Raises ``StudyError`` listing every invalid run config (at the line that set the bad value)
    and every pair of runs with the same ``run_key``.
    """
    rep = Reporter(study._origin)
    check_semantics(study.model_dump(), rep)
    rep.raise_if_any()
    specs = expand_runs(study, rep)
    rep.raise_if_any()
    return specs
