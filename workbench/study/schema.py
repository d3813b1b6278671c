"""The study schema: the ``Study`` model, the checks beyond types, and both reported per line.

Unknown top-level keys are rejected; names must be safe MLflow experiment names and variant
names identifiers; grid/zip axes must be run-config paths, disjoint, with distinct values; zip
lists paired (equal lengths); seeds distinct; exclude entries and ``compare.baseline`` must name
existing variants and paths. Every problem goes to a :class:`Reporter` (all of them, not the
first); checking each run's resolved config is the job of :mod:`workbench.study.expand`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from workbench.errors import did_you_mean, pydantic_issues, show_value, unknown_message
from workbench.metrics.catalogue import BY_NAME, is_fraction
from workbench.study.paths import config_path_error, is_int
from workbench.study.report import Origin, Reporter
from workbench.study.sequential_keys import FUTILITY_SIDES, SEQUENTIAL_KEYS

__all__ = [
    "ACTIVITY_KEYS",
    "COLD_START_PATH",
    "REPLICATE_KEYS",
    "STUDY_VERSION",
    "cold_starts",
    "Study",
    "activity_issues",
    "check_semantics",
    "same_value",
    "validate_fields",
]

STUDY_VERSION = 1
"""The study schema version this module reads (the ``version:`` field)."""


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Study(BaseModel):
    """One study file (after ``include:`` is resolved). Unknown top-level keys are rejected."""

    model_config = ConfigDict(extra="forbid")

    version: StrictInt = Field(STUDY_VERSION, description="study schema version (this workbench reads 1)")
    name: StrictStr = Field(description="the study's name, also its MLflow experiment: letters, digits, '_', '-', '.'")
    description: StrictStr = Field("", description="what question the study asks")
    include: StrictStr | None = Field(
        None, description="another study file (relative to this one) whose fields this file deep-overrides"
    )
    base: dict[str, Any] = Field(
        description="a full run config (model, task, sampler, learner, rollout, algorithm, ...)"
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"base": {}},
        description="named deep overrides of base, in run order (names are identifiers)",
    )
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted run-config path -> values; cartesian product"
    )
    zip: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="dotted run-config path -> equal-length lists, paired; one more grid axis",
    )
    seeds: list[StrictInt] = Field(default_factory=lambda: [0], description="one run per seed")
    replicate: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "{cold_start: k}: k independent cold starts (the tiny model's, or a priming SFT) per arm, the seeds nested "
            "in each; compare then takes the checkpoint as its unit (default 1: one cold start, as without it)"
        ),
    )
    exclude: list[dict[str, Any]] = Field(
        default_factory=list,
        description="drop combinations: each entry maps variant/seed/dotted path -> value; "
        "a run matching every key of an entry is dropped",
    )
    compare: dict[str, Any] = Field(default_factory=dict, description="comparison report settings")
    health: dict[str, Any] | None = Field(
        None, description="`health:` of every run (HealthConfig) unless a variant overrides it"
    )
    search: dict[str, Any] | None = Field(None, description="Optuna search settings")
    tracking: dict[str, Any] = Field(
        default_factory=dict, description="run config `tracking` (uri, experiment: default the name)"
    )
    execution: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "e.g. {parallel: 4}; or {executor: ray, ray: {address: auto, num_cpus: 1, num_gpus: 0, memory_gb: 4, "
            "max_retries: 3}} (docs/distributed.md)"
        ),
    )

    _origin: Origin | None = PrivateAttr(default=None)

    @field_validator("variants", mode="before")
    @classmethod
    def _empty_variant_is_base(cls, value: Any) -> Any:
        """``variants: {grpo: }`` (nothing after the colon) means no overrides."""
        if isinstance(value, dict):
            return {k: ({} if v is None else v) for k, v in value.items()}
        return value

    @field_validator("grid", "zip", "exclude", "compare", "tracking", "execution", "replicate", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any, info: Any) -> Any:
        """``grid:`` with everything below commented out means no grid."""
        if value is None:
            return [] if info.field_name == "exclude" else {}
        return value

    @property
    def source(self) -> str | None:
        """The file this study was loaded from (``None`` if built in code)."""
        return self._origin.file if self._origin else None


def study_fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    return list(Study.model_fields) if loc == () else None


STUDY_HINTS = {name: f.description or "" for name, f in Study.model_fields.items()}


def same_value(a: Any, b: Any) -> bool:
    """Value equality as a user means it: 1e-4 == 0.0001, [0.9, 0.99] == (0.9, 0.99)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def value_key(value: Any) -> Any:
    """A hashable key with ``value_key(a) == value_key(b)`` exactly when ``same_value(a, b)``: duplicate
    checks in one pass (a pairwise scan of a 10,000-entry list is 50 M comparisons)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        try:
            return ("num", float(value))
        except OverflowError:  # an int beyond float range: same_value would raise too; keep it exact
            return ("int", value)
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(value_key(v) for v in value))
    if isinstance(value, dict):
        return ("map", frozenset((k, value_key(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return ("other", value)


def check_semantics(data: dict[str, Any], rep: Reporter) -> None:
    """Checks beyond types. Defensive: runs on raw data even where the types are wrong."""
    _check_name(data.get("name"), rep)
    _check_version(data.get("version", STUDY_VERSION), rep)
    base = data.get("base")
    if isinstance(base, dict) and "seed" in base:
        rep.add(("base", "seed"), "the seed is set per run by the study's 'seeds:' list; remove it here")
    variants = data.get("variants", {"base": {}})
    names = _check_variants(variants, rep)
    _check_axes(data, rep)
    _check_seeds(data.get("seeds", [0]), rep)
    _check_replicate(data, rep)
    _check_exclude(data.get("exclude"), variants, names, rep)
    _check_execution(data.get("execution"), rep)
    compare = data.get("compare")
    if isinstance(compare, dict) and isinstance(variants, dict):
        baseline = compare.get("baseline")
        if isinstance(baseline, str) and baseline not in variants:
            rep.add(("compare", "baseline"), unknown_message(baseline, names, f"variant {baseline!r}"))
        _check_sequential(compare.get("sequential"), rep)
        for path, message in activity_issues(compare.get("activity"), names):
            rep.add(("compare", "activity", *path), message)
    if isinstance(compare, dict):
        _check_effect_sizes(compare, rep)
        _check_sesoi_pedigree(compare, rep)
        _check_primary(compare, rep)


def _check_sequential(sequential: Any, rep: Reporter) -> None:
    """``compare.sequential`` (``workbench run --until-decided``): ``looks``, increasing seed counts
    of at least 2, ``spending`` (its name is checked against the registry when the design is made) and
    ``futility``, the side a futility stop excludes."""
    if sequential is None:
        return
    if not isinstance(sequential, dict):
        rep.add(("compare", "sequential"), f"expected a mapping (looks, spending), got {show_value(sequential)}")
        return
    for key in sequential:
        if key not in SEQUENTIAL_KEYS:
            rep.add(("compare", "sequential", key), f"unknown key {key!r} (valid: {', '.join(SEQUENTIAL_KEYS)})")
    amendments = sequential.get("amendments", [])
    if not isinstance(amendments, list) or not all(isinstance(a, str) and a.strip() for a in amendments):
        rep.add(
            ("compare", "sequential", "amendments"),
            f"expected a list of sentences (what changed after a look, and why), got {show_value(amendments)}",
        )
    futility = sequential.get("futility", FUTILITY_SIDES[0])
    if futility not in FUTILITY_SIDES:
        rep.add(
            ("compare", "sequential", "futility"),
            f"expected {', '.join(FUTILITY_SIDES[:-1])} or {FUTILITY_SIDES[-1]}, got {show_value(futility)}",
        )
    looks = sequential.get("looks")
    if looks is None:
        return
    ok = isinstance(looks, list) and looks and all(is_int(n) and n >= 2 for n in looks)
    if not ok or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
        rep.add(
            ("compare", "sequential", "looks"),
            f"expected increasing seed counts of at least 2, e.g. [3, 5, 7, 10], got {show_value(looks)}",
        )


def _check_primary(compare: dict[str, Any], rep: Reporter) -> None:
    """``compare.primary``: the metrics whose questions the study was designed to decide (a non-empty list
    drawn from ``compare.metrics``); the others are reported as secondary."""
    primary = compare.get("primary")
    if primary is None:
        return
    metrics = compare.get("metrics")
    if not isinstance(primary, list) or not primary or not all(isinstance(m, str) for m in primary):
        rep.add(
            ("compare", "primary"),
            f"expected a non-empty list of metrics from compare.metrics, got {show_value(primary)}",
        )
        return
    if not isinstance(metrics, list):
        rep.add(("compare", "primary"), "needs compare.metrics: the primary metrics are some of the compared ones")
        return
    for m in primary:
        if m not in metrics:
            rep.add(
                ("compare", "primary"),
                unknown_message(m, [str(x) for x in metrics], f"primary metric {m!r} (not in compare.metrics)"),
            )


def _check_effect_sizes(compare: dict[str, Any], rep: Reporter) -> None:
    """``compare.sesoi`` (smallest effect of interest) and ``compare.noise_sd`` (SD of a run's value
    across seeds): each a mapping of metric name -> positive number, in the metric's units."""
    for key, what in (("sesoi", "smallest effect of interest"), ("noise_sd", "SD across seeds")):
        value = compare.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not value:
            rep.add(
                ("compare", key),
                f"expected a mapping of metric -> {what} (a positive number in the metric's "
                f"units), e.g. {{final_eval_accuracy: 0.03}}; got {show_value(value)}",
            )
            continue
        for metric, x in value.items():
            number = isinstance(x, (int, float)) and not isinstance(x, bool)
            if not (number and math.isfinite(x) and x > 0):
                rep.add(
                    ("compare", key, metric),
                    f"{what} of {metric!r} must be a positive number in the metric's units, got {show_value(x)}",
                )


#: Keys of one metric's ``compare.sesoi_pedigree`` entry (issue 52, docs/reports.md "SESOIs with a pedigree"):
#: ``phenomenon`` (the measured size of the effect an "equivalent" would deny, in the metric's units),
#: ``published`` (the published effect scaled to this setting, in words), ``set_before_data`` (whether the
#: SESOI was fixed before any data on this question were seen).
PEDIGREE_KEYS = ("phenomenon", "published", "set_before_data")


def _check_sesoi_pedigree(compare: dict[str, Any], rep: Reporter) -> None:
    """``compare.sesoi_pedigree``: ``{metric: {phenomenon: number > 0, published: text, set_before_data:
    true|false}}``, each metric one with a ``compare.sesoi``. Whether the SESOI is below the phenomenon is
    checked where SESOIs are resolved (``--sesoi`` may override them): analysis/comparison.py."""
    value = compare.get("sesoi_pedigree")
    if value is None:
        return
    if not isinstance(value, dict) or not value:
        rep.add(
            ("compare", "sesoi_pedigree"),
            f"expected a mapping of metric -> {{phenomenon, published, set_before_data}}, got {show_value(value)}",
        )
        return
    sesoi = compare.get("sesoi") if isinstance(compare.get("sesoi"), dict) else {}
    for metric, entry in value.items():
        where = ("compare", "sesoi_pedigree", metric)
        if metric not in sesoi:
            rep.add(where, f"no compare.sesoi for {metric!r}: a pedigree belongs beside a SESOI")
        if not isinstance(entry, dict):
            rep.add(
                where,
                f"expected {{phenomenon: <size>, published: <text>, set_before_data: true|false}}, "
                f"got {show_value(entry)}",
            )
            continue
        for key in entry:
            if key not in PEDIGREE_KEYS:
                rep.add((*where, key), unknown_message(key, PEDIGREE_KEYS))
        for key in PEDIGREE_KEYS:
            if key not in entry:
                rep.add(where, f"missing {key!r} (needs {', '.join(PEDIGREE_KEYS)})")
        size = entry.get("phenomenon")
        if "phenomenon" in entry and not (
            isinstance(size, (int, float)) and not isinstance(size, bool) and math.isfinite(size) and size > 0
        ):
            rep.add(
                (*where, "phenomenon"),
                f"the measured size of the phenomenon must be a positive number in "
                f"the metric's units, got {show_value(size)}",
            )
        text = entry.get("published")
        if "published" in entry and not (isinstance(text, str) and text.strip()):
            rep.add(
                (*where, "published"),
                f"expected the published effect scaled to this setting, in words, got {show_value(text)}",
            )
        if "set_before_data" in entry and not isinstance(entry["set_before_data"], bool):
            rep.add((*where, "set_before_data"), f"expected true or false, got {show_value(entry['set_before_data'])}")


#: Keys of one variant's ``compare.activity`` entry (docs/reports.md, "Knob activity").
ACTIVITY_KEYS = ("metric", "min", "unit")
_ACTIVITY_UNITS = ("tokens", "responses", "groups")
_NONZERO_FRAC = re.compile(r"reward/(?P<shaper>[A-Za-z0-9_]+)/nonzero_frac")


def _activity_metric_issue(metric: Any) -> str | None:
    """Why ``metric`` cannot show a knob acting (``None`` if it can): a logged fraction, i.e. a
    catalogued metric in [0, 1] or a shaping term's ``reward/<shaper>/nonzero_frac``."""
    if not isinstance(metric, str):
        return f"expected a metric name, got {show_value(metric)}"
    shaper = _NONZERO_FRAC.fullmatch(metric)
    if shaper:
        from workbench.reward import REWARD_SHAPERS  # deferred: torch

        name = shaper["shaper"]
        return (
            None
            if name in REWARD_SHAPERS
            else f"{metric!r}: unknown reward shaper {name!r}{did_you_mean(name, REWARD_SHAPERS.names())}"
        )
    if is_fraction(metric):
        return None
    if metric in BY_NAME:
        return (
            f"{metric!r} is not a fraction in [0, 1]; the activity of a knob is the fraction of tokens, "
            "responses or groups it touched (e.g. clip/frac_high)"
        )
    fractions = [m for m in BY_NAME if is_fraction(m)]
    return (
        f"unknown metric {metric!r}{did_you_mean(metric, fractions)} (a logged fraction: "
        "docs/metrics.md, or reward/<shaper>/nonzero_frac)"
    )


def activity_issues(value: Any, variants: list[str]) -> list[tuple[tuple[Any, ...], str]]:
    """Problems of a study's ``compare.activity`` (``{variant: {metric, min, unit} | false}``), as
    ``(path below compare.activity, message)``; empty when it is fine or absent."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [((), f"expected a mapping of variant -> {{metric, min}}, got {show_value(value)}")]
    issues: list[tuple[tuple[Any, ...], str]] = []
    for variant, entry in value.items():
        if variant not in variants:
            issues.append(((variant,), unknown_message(variant, variants, f"variant {variant!r}")))
            continue
        if entry is False:  # the gate is off for this variant
            continue
        if not isinstance(entry, dict):
            issues.append(((variant,), f"expected {{metric: M, min: X}} or false, got {show_value(entry)}"))
            continue
        for key in entry:
            if key not in ACTIVITY_KEYS:
                issues.append(((variant, key), unknown_message(key, ACTIVITY_KEYS)))
        if "metric" in entry:
            why = _activity_metric_issue(entry["metric"])
            if why:
                issues.append(((variant, "metric"), why))
        low = entry.get("min")
        if "min" in entry and (isinstance(low, bool) or not isinstance(low, (int, float)) or not 0.0 <= low <= 1.0):
            issues.append(((variant, "min"), f"must be a fraction in [0, 1] (0.01 = 1%), got {show_value(low)}"))
        if "unit" in entry and entry["unit"] not in _ACTIVITY_UNITS:
            issues.append(
                ((variant, "unit"), f"expected one of {', '.join(_ACTIVITY_UNITS)}, got {show_value(entry['unit'])}")
            )
    return issues


def _check_name(name: Any, rep: Reporter) -> None:
    """A safe MLflow experiment name (the study's name is its experiment)."""
    if not isinstance(name, str):
        return
    if not name.strip():
        rep.add(("name",), "must not be empty")
    elif not _NAME_RE.fullmatch(name):
        safe = re.sub(r"[^A-Za-z0-9_.\-]+", "-", name).strip("-._") or "my-study"
        rep.add(
            ("name",),
            f"{name!r} is not a safe MLflow experiment name: use letters, digits, '_', '-', '.' "
            f"(at most 200), starting with a letter or digit, e.g. {safe!r}",
        )


def _check_version(version: Any, rep: Reporter) -> None:
    if is_int(version) and version != STUDY_VERSION:
        rep.add(("version",), f"unsupported study version {version}; this workbench reads version {STUDY_VERSION}")


def _check_variants(variants: Any, rep: Reporter) -> list[str]:
    """At least one variant, each named by an identifier and without a seed; returns the valid names."""
    names: list[str] = []
    if not isinstance(variants, dict):
        return names
    if not variants:
        rep.add(("variants",), "no variants; omit 'variants:' for a single variant named 'base'")
    for vname, over in variants.items():
        if not isinstance(vname, str) or not _IDENT_RE.fullmatch(vname):
            fixed = re.sub(r"\W+", "_", str(vname)).strip("_") or "v"
            fixed = fixed if not fixed[0].isdigit() else f"v_{fixed}"
            rep.add(
                ("variants", vname),
                f"variant name {str(vname)!r} is not an identifier (letters, digits, '_'; "
                f"not starting with a digit), e.g. {fixed!r}",
            )
        else:
            names.append(vname)
        if isinstance(over, dict) and "seed" in over:
            rep.add(("variants", vname, "seed"), "the seed is set per run by 'seeds:'; remove it here")
    return names


def _check_axes(data: dict[str, Any], rep: Reporter) -> None:
    """``grid:`` and ``zip:`` axes: run-config paths, each once and disjoint from the others, with
    distinct values; zip lists of equal lengths."""
    axes: dict[str, str] = {}  # axis -> the field it is in
    lengths: dict[str, int] = {}
    for field in ("grid", "zip"):
        table = data.get(field)
        if not isinstance(table, dict):
            continue
        for key, values in table.items():
            if not isinstance(key, str):
                continue  # reported by the schema
            if not _check_axis_path(field, key, axes, rep):
                continue
            axes[key] = field
            if not isinstance(values, list):
                continue
            _check_axis_values(field, key, values, rep)
            if field == "zip":
                lengths[key] = len(values)
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        rep.add(("zip",), f"zip lists must have equal lengths (they are paired); got {desc}")


def _check_axis_path(field: str, key: str, axes: dict[str, str], rep: Reporter) -> bool:
    """Whether ``key`` is a run-config path (else reported); an overlap with an earlier axis is
    reported too, but the axis still counts."""
    path = (field, key)
    problem = config_path_error(key)
    if problem:
        rep.add(path, problem)
        return False
    for other, other_field in axes.items():
        if key == other:
            rep.add(path, f"{key!r} is already an axis in '{other_field}'; an axis appears once")
        elif key.startswith(other + ".") or other.startswith(key + "."):
            rep.add(path, f"overlaps the axis {other!r} in '{other_field}'; axes must be disjoint paths")
    return True


def _check_axis_values(field: str, key: str, values: list[Any], rep: Reporter) -> None:
    """At least one value, none repeating an earlier one (as a user means equal: :func:`same_value`)."""
    path = (field, key)
    if not values:
        rep.add(path, "empty list: an axis needs at least one value (a study with no runs is an error)")
    first: dict[Any, int] = {}  # value_key -> index of its first occurrence
    for j, value in enumerate(values):
        i = first.setdefault(value_key(value), j)
        if i != j:
            rep.add(path + (j,), f"value {show_value(value)} repeats {field}.{key}[{i}]")


def _check_seeds(seeds: Any, rep: Reporter) -> None:
    if not isinstance(seeds, list):
        return
    if not seeds:
        rep.add(("seeds",), "empty list: give at least one seed, e.g. [0]")
    seen: set[Any] = set()
    for j, seed in enumerate(seeds):
        key = value_key(seed)
        if key in seen:
            rep.add(("seeds", j), f"seed {seed} appears twice")
        seen.add(key)


#: Keys of ``replicate:``; each a count of independent replicates per arm at that level.
REPLICATE_KEYS = ("cold_start",)
#: The run-config path ``replicate.cold_start`` sets on each run (its index); nowhere else may set it.
COLD_START_PATH = ("model", "cold_start")


def cold_starts(study: Study) -> int:
    """How many independent cold starts per arm the study trains (``replicate.cold_start``, default 1)."""
    return int(study.replicate.get("cold_start", 1))


def _check_replicate(data: dict[str, Any], rep: Reporter) -> None:
    """``replicate: {cold_start: k}``, k an integer >= 1; the index it sets on each run (``model.cold_start``)
    is not set by ``base``, a variant, a grid or a zip axis (the label and the comparison read it as the
    replicate, not as an arm)."""
    replicate = data.get("replicate")
    compare = data.get("compare")
    if (
        isinstance(replicate, dict)
        and is_int(replicate.get("cold_start"))
        and replicate["cold_start"] > 1
        and isinstance(compare, dict)
        and compare.get("sequential") is not None
    ):
        rep.add(
            ("replicate", "cold_start"),
            "compare.sequential adds seeds at each look, and with several cold "
            "starts the unit compared is the checkpoint, which seeds do not add: "
            "drop compare.sequential or replicate.cold_start",
        )
    if isinstance(replicate, dict):
        for key, value in replicate.items():
            if key not in REPLICATE_KEYS:
                rep.add(("replicate", key), unknown_message(str(key), REPLICATE_KEYS))
            elif not is_int(value) or value < 1:
                rep.add(
                    ("replicate", key),
                    f"expected an integer >= 1 (independent cold starts per arm; 1 = "
                    f"one, as without it), got {show_value(value)}",
                )
    where = "set per run by replicate.cold_start; remove it here"
    base = data.get("base")
    if isinstance(base, dict) and isinstance(base.get("model"), dict) and "cold_start" in base["model"]:
        rep.add(("base", *COLD_START_PATH), f"the cold-start index is {where}")
    variants = data.get("variants")
    for name, over in variants.items() if isinstance(variants, dict) else ():
        if isinstance(over, dict) and isinstance(over.get("model"), dict) and "cold_start" in over["model"]:
            rep.add(("variants", name, *COLD_START_PATH), f"the cold-start index is {where}")
    for field in ("grid", "zip"):
        table = data.get(field)
        for key in table if isinstance(table, dict) else ():
            if key == "model.cold_start":
                rep.add((field, key), f"model.cold_start is {where} (replicate: {{cold_start: k}})")


def _check_exclude(exclude: Any, variants: Any, names: list[str], rep: Reporter) -> None:
    """Each ``exclude:`` entry is non-empty and its keys are ``variant`` (an existing one),
    ``seed`` (an integer) or run-config paths."""
    if not isinstance(exclude, list):
        return
    for i, entry in enumerate(exclude):
        if not isinstance(entry, dict):
            continue  # a type error, reported by the schema
        if not entry:
            rep.add(("exclude", i), "empty entry would drop every run; give variant/seed/path: value")
        for key, value in entry.items():
            problem = _exclude_key_issue(key, value, variants, names)
            if problem:
                rep.add(("exclude", i, key), problem)


def _exclude_key_issue(key: Any, value: Any, variants: Any, names: list[str]) -> str | None:
    if key == "variant":
        if isinstance(variants, dict) and value not in variants:
            return f"{unknown_message(value, names, 'variant ' + show_value(value))}"
        return None
    if key == "seed":
        return None if is_int(value) else f"expected an integer, got {show_value(value)}"
    problem = config_path_error(key)
    return f"{problem} (exclude keys are 'variant', 'seed' or run-config paths)" if problem else None


EXECUTORS = ("local", "ray")
# execution.ray: field -> (check, what it expects); the fields of workbench.execution.ray_executor.RayOptions
RAY_FIELDS = {
    "address": (lambda v: v is None or isinstance(v, str), "a Ray address (auto, ray://host:10001, host:6379)"),
    "num_cpus": (lambda v: _number(v) and v > 0, "a positive number"),
    "num_gpus": (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0"),
    "memory_gb": (lambda v: v is None or (_number(v) and v > 0), "a positive number of GiB"),
    "max_retries": (lambda v: is_int(v) and v >= 0, "an integer >= 0"),
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_execution(execution: Any, rep: Reporter) -> None:
    if not isinstance(execution, dict):
        return
    if "parallel" in execution:
        parallel = execution["parallel"]
        if not is_int(parallel) or parallel < 1:
            rep.add(("execution", "parallel"), f"expected a positive integer, got {show_value(parallel)}")
    executor = execution.get("executor", "local")
    if executor not in EXECUTORS:
        rep.add(("execution", "executor"), f"expected one of {', '.join(EXECUTORS)}, got {show_value(executor)}")
    ray = execution.get("ray")
    if ray is None:
        return
    if not isinstance(ray, dict):
        rep.add(("execution", "ray"), f"expected a mapping of {', '.join(RAY_FIELDS)}, got {show_value(ray)}")
        return
    for key, value in ray.items():
        if key not in RAY_FIELDS:
            rep.add(("execution", "ray", key), unknown_message(key, RAY_FIELDS))
        elif not RAY_FIELDS[key][0](value):
            rep.add(("execution", "ray", key), f"expected {RAY_FIELDS[key][1]}, got {show_value(value)}")


def validate_fields(data: Any, rep: Reporter) -> Study | None:
    """The ``Study`` of ``data`` (``None`` if its types are wrong), every problem reported to ``rep``.

    Raises ``StudyError`` at once if ``data`` is not a mapping (nothing else can be checked)."""
    if not isinstance(data, dict):
        rep.add((), f"a study is a mapping of fields (name, base, variants, ...), got {show_value(data)}")
        rep.raise_if_any()
    study: Study | None = None
    try:
        study = Study.model_validate(data)
    except ValidationError as err:
        for loc, msg in pydantic_issues(err, study_fields_at, STUDY_HINTS):
            if len(loc) == 2 and loc[0] in ("grid", "zip") and msg.startswith("expected a list"):
                msg += f" (an axis is a list of values, e.g. [{show_value(data[loc[0]][loc[1]])}])"
            rep.add(loc, msg)
    check_semantics(data, rep)
    return study
