"""The knob-activity gate: a comparison whose knob barely acted and whose test did not reject is
"not testable", not "inconclusive".

A variant that changes a knob can only change results through what the knob touches. When the
upper clip bound binds on 0.1% of tokens, a comparison that finds no difference says little about
ε_high 0.28 against 0.2: the verdict is ``not testable: clip_high acted on 0.12% of tokens (min 1%);
|Δ| > x excluded`` (the effect the corrected interval rules out). The activity qualifies a verdict,
it never overrules one (#52): a test that rejects stays better / worse / higher / lower, with the
knob's activity beside it in the row (``activity``) and its note. A change acting on few tokens can
still move a result (a toy PPO-clip model: the upper bound binding on 0.2-0.3% of samples, entropy
differing at p ≤ 5e-4 over 32 paired seeds), and the family-wise error of the test already bounds
how often a "better" is noise; replacing it would turn a controlled decision into an uncontrolled one.

**Which knobs a comparison changes** comes from the runs' logged config (their MLflow params): the
keys whose values differ between the arm and its baseline arm. Each maps to a registered unit,
which declares how to see it act (:class:`workbench.registry.Activity`):

* ``algorithm.clip_low`` / ``clip_high`` (and a loss's other keyword parameters): the loss's
  ``params`` (``clip/frac_low`` / ``clip/frac_high``: tokens);
* ``algorithm.correction``: the correction's (``mismatch/is_reweighted_frac``: tokens whose weight
  differs from 1); ``correction_cap``: its cap's (``mismatch/is_clipped_frac``: tokens it truncated);
* ``algorithm.batch_filter`` / ``filter_on`` / ``max_sampling_rounds``: the filter's
  (``batch/filtered_frac``: groups);
* ``algorithm.token_filters``: each filter added or removed (``overlong``: ``length/truncated_frac``, responses);
* ``reward.shaping``: each term added, removed or changed (``reward/<name>/nonzero_frac``: responses).

Any other difference (the estimator, the loss, the aggregation, the learning rate, the sampler's
precision, ...) acts on every token, so the comparison is tested as usual: the gate only speaks when
**every** knob that differs has an activity metric and **every** one is below its minimum.

**How activity is measured**: a run's activity is its metric's mean over the steps it logged; an
arm's is the mean over its runs (seeds). A knob's is the larger of the arm's and its baseline
arm's: a change can only matter where either setting acts (an ablation's arm has the knob off and
logs nothing for it; a wider clip bound clips less than the narrower one it replaces).

**The minimum** is 1% (:data:`DEFAULT_MIN`) unless the study says otherwise per variant::

    compare:
      activity:
        eps_high_028: {metric: clip/frac_high, min: 0.005}   # this metric shows its knob acting
        no_overlong: {min: 0.02}                             # the built-in knobs, another minimum
        no_dynamic_sampling: false                           # no gate for this variant

A row whose metric *is* the knob's activity (``final:clip/frac_high`` for a clip bound) is never
gated: comparing it measures the mechanism itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.registry import Activity

from . import arms as _arms

__all__ = [
    "DEFAULT_MIN",
    "REJECTING",
    "Gate",
    "Knob",
    "Reading",
    "Setting",
    "activity_gates",
    "apply_gate",
    "arm_configs",
    "changed_knobs",
    "gate_metrics",
    "gate_plans",
    "markdown_activity_table",
    "parse_settings",
    "percent",
]

#: Activity below which a knob counts as not acting (a fraction: 1% of its tokens/responses/groups).
DEFAULT_MIN = 0.01
#: Config sections whose values can change a run's numbers (``tracking`` cannot).
RESULT_SECTIONS = ("model", "task", "sampler", "learner", "rollout", "reward", "algorithm", "health")
#: Keys that never change a run's numbers, or only name what other keys resolve (the preset).
NOT_A_KNOB = frozenset({"learner.checkpoint_every", "reward.overlap", "algorithm.preset"})
NOT_TESTABLE = "not testable"
#: The statuses of a test that rejected: the gate never replaces them (module docstring).
REJECTING = ("better", "worse", "higher", "lower")


@dataclass(frozen=True)
class Knob:
    """One setting a comparison changes: its label in a verdict and how it shows it acted."""

    label: str  # "clip_high", "correction tis", "token filter overlong", "shaping overlong_soft"
    activity: Activity | None  # None: not a registered unit (nothing says how it acts)

    @property
    def gated(self) -> bool:
        return self.activity is not None and self.activity.metric is not None


@dataclass(frozen=True)
class Setting:
    """One variant's ``compare.activity`` entry: ``off``, or a metric (``None``: the built-in knobs) and min."""

    metric: str | None = None
    min: float = DEFAULT_MIN
    unit: str = ""
    off: bool = False


@dataclass(frozen=True)
class Reading:
    """One knob measured for one comparison: ``value`` (NaN when no run logged its metric)."""

    label: str
    metric: str
    unit: str
    value: float
    min: float
    in_arm: float
    in_baseline: float

    @property
    def below(self) -> bool:
        return math.isfinite(self.value) and self.value < self.min

    def phrase(self, first: bool) -> str:
        """``clip_high acted on 0.12% of tokens (min 1%)`` (``first``: with "acted")."""
        verb = "acted on " if first else "on "
        of = f" of {self.unit}" if self.unit else f" ({self.metric})"
        return f"{self.label} {verb}{percent(self.value)}{of} (min {percent(self.min)})"


@dataclass(frozen=True)
class Gate:
    """The activity gate of one arm against its baseline arm."""

    baseline_arm: str
    readings: tuple[Reading, ...] = ()
    why_open: str = ""  # why the gate cannot speak although knobs were gated (a metric not logged)
    metrics: frozenset[str] = field(default_factory=frozenset)  # the activity metrics (rows of these are not gated)

    @property
    def not_testable(self) -> bool:
        return bool(self.readings) and not self.why_open and all(r.below for r in self.readings)

    def verdict(self) -> str:
        return f"{NOT_TESTABLE}: " + ", ".join(r.phrase(i == 0) for i, r in enumerate(self.readings))

    def note(self) -> str:
        """How the activity was measured, in the row's note."""
        parts = [
            f"{r.label}: {r.metric} {percent(r.in_arm)} here, {percent(r.in_baseline)} in {self.baseline_arm}"
            for r in self.readings
        ]
        return "activity (mean over steps, then seeds; the larger counts): " + "; ".join(parts)


def percent(x: float) -> str:
    """``0.12%``, ``1%``, ``<0.001%``, ``—`` (NaN): two significant digits."""
    if not math.isfinite(x):
        return "—"
    if x == 0.0:
        return "0%"
    if x * 100 < 0.001:
        return "<0.001%"
    return f"{x * 100:.2g}%"


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def parse_settings(compare_cfg: Mapping[str, Any], variants: Sequence[str]) -> dict[str, Setting]:
    """The study's ``compare.activity`` per variant; ``ValueError`` naming the field on bad input
    (the checks of :func:`workbench.study.schema.activity_issues`, also run when a study loads)."""
    from workbench.study.schema import activity_issues  # deferred: pydantic (compare itself is numpy/pandas/scipy)

    value = compare_cfg.get("activity")
    issues = activity_issues(value, list(variants))
    if issues:
        path, message = issues[0]
        raise ValueError(".".join(["compare", "activity", *map(str, path)]) + f": {message}")
    out = {}
    for variant, entry in (value or {}).items():
        if entry is False:
            out[variant] = Setting(off=True)
        else:
            out[variant] = Setting(
                metric=entry.get("metric"),
                min=float(entry.get("min", DEFAULT_MIN)),
                unit=entry.get("unit") or _declared_unit(entry.get("metric")),
            )
    return out


def _declared_unit(metric: str | None) -> str:
    """The unit a registered unit declares for ``metric`` ("" when none does)."""
    if metric is None:
        return ""
    for activity in _all_activities():
        if activity.metric == metric:
            return activity.unit
    return ""


def _all_activities() -> list[Activity]:
    """Every activity the registered units declare, their parameters' included."""
    registries = unit_registries()
    found = []
    for registry in registries.values():
        for name in registry.names():
            activity = registry.activity(name)
            if activity is not None:
                found += [activity, *activity.params.values()]
    return found


def unit_registries() -> dict[str, Any]:
    """The registries a run config selects units from, by kind (each says which key selects its units)."""
    from workbench.algorithms import IS_CORRECTIONS, POLICY_LOSSES  # deferred: torch
    from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS  # deferred: torch
    from workbench.reward import REWARD_SHAPERS  # deferred: torch

    return {
        "loss": POLICY_LOSSES,
        "correction": IS_CORRECTIONS,
        "batch filter": BATCH_FILTERS,
        "token filter": TOKEN_FILTERS,
        "shaping": REWARD_SHAPERS,
    }


# --------------------------------------------------------------------------------------------
# Which knobs a comparison changes
# --------------------------------------------------------------------------------------------


def gated_keys() -> frozenset[str]:
    """Config keys that select or tune a registered unit with an activity metric (others are not gated), from
    what the units declare where they register: a kind's ``Registry.selected_by`` when one of its units logs an
    activity metric of its own (a loss acts on every token: choosing one is not gated), its ``settings``, and a
    loss's parameters stored as ``algorithm`` fields (``LOSS_PARAM_FIELDS``; the rest are ``loss_params.*``)."""
    from workbench.algorithms.params import LOSS_PARAM_FIELDS  # deferred: torch

    keys = {f"algorithm.{name}" for name in LOSS_PARAM_FIELDS}
    for registry in unit_registries().values():
        activities = [registry.activity(name) for name in registry.names()]
        if any(a is not None and a.metric is not None for a in activities):
            keys |= {registry.selected_by, *registry.settings}
    return frozenset(keys)


def _value(v: Any) -> Any:
    """A logged param as the config value it was: JSON lists/mappings parsed, NaN/"None" as None."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def arm_configs(runs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``arm -> {config key: value}`` from the runs' logged params (a key whose value differs
    between an arm's runs is kept as ``("varies", n)``: it is no single setting)."""
    keys = [c for c in runs.columns if c.split(".", 1)[0] in RESULT_SECTIONS and c not in NOT_A_KNOB]
    if not keys:
        return {str(a): {} for a in pd.unique(_arms.arm_column(runs))}
    params = runs[keys].astype(object).where(runs[keys].notna(), None)  # NaN and None alike: unset
    grouped = params.groupby(_arms.arm_column(runs).to_numpy(), sort=False)
    distinct = grouped.nunique(dropna=False)  # logged params are text or numbers: hashable
    first = grouped.head(1).set_axis(list(distinct.index))
    return {
        str(arm): {
            k: _value(first.at[arm, k]) if distinct.at[arm, k] <= 1 else ("varies", int(distinct.at[arm, k]))
            for k in keys
        }
        for arm in distinct.index
    }


def _differs(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str)


def changed_knobs(arm: Mapping[str, Any], base: Mapping[str, Any]) -> list[Knob]:
    """The knobs whose settings differ between two arms' configs (``arm_configs`` values), each
    with the activity its registered unit declares (``None`` for a setting no unit measures)."""
    knobs: dict[str, Knob] = {}
    for key in sorted(set(arm) | set(base)):
        a, b = arm.get(key), base.get(key)
        if not _differs(a, b):
            continue
        for knob in _knobs_of(key, a, b, arm, base):
            knobs.setdefault(knob.label, knob)
    return list(knobs.values())


def _knobs_of(key: str, a: Any, b: Any, arm: Mapping[str, Any], base: Mapping[str, Any]) -> list[Knob]:
    """The knob(s) one differing config key changes."""
    from workbench.algorithms.params import LOSS_PARAM_FIELDS  # deferred: torch

    loss_param = key.startswith("algorithm.loss_params.") or key in {f"algorithm.{n}" for n in LOSS_PARAM_FIELDS}
    if not (loss_param or key in gated_keys()) or isinstance(a, tuple) or isinstance(b, tuple):
        return [Knob(key, None)]
    reg = unit_registries()

    def unit(kind: str, name: Any) -> Knob:
        registry = reg[kind]
        label = f"{kind} {name}"
        return Knob(label, registry.activity(name)) if isinstance(name, str) and name in registry else Knob(label, None)

    if loss_param:
        loss = arm.get("algorithm.loss")
        if _differs(loss, base.get("algorithm.loss")) or not isinstance(loss, str) or loss not in reg["loss"]:
            return [Knob(key, None)]
        param = key.rsplit(".", 1)[1]
        return [Knob(param, reg["loss"].activity(loss).params.get(param))]
    correction, batch_filter = reg["correction"], reg["batch filter"]
    if key == correction.selected_by:
        return [unit("correction", v) for v in (a, b) if v is not None]
    if key in correction.settings:  # a setting with an activity of its own (the cap's clipped tokens)
        setting = key.rsplit(".", 1)[1]
        names = sorted(
            {
                v
                for v in (arm.get(correction.selected_by), base.get(correction.selected_by))
                if isinstance(v, str) and v in correction
            }
        )
        return [Knob(f"{setting} ({n})", correction.activity(n).params.get(setting)) for n in names] or [
            Knob(key, None)
        ]
    if key == batch_filter.selected_by or key in batch_filter.settings:
        return [
            unit("batch filter", v)
            for v in {arm.get(batch_filter.selected_by), base.get(batch_filter.selected_by)}
            if v is not None
        ] or [Knob(key, None)]
    if key == reg["token filter"].selected_by:
        return [unit("token filter", n) for n in sorted(set(a or []) ^ set(b or []))] or [Knob(key, None)]
    # reward.shaping: each term in one list and not the other (added, removed, or its weight/params changed)
    terms_a = {json.dumps(t, sort_keys=True): t for t in (a or []) if isinstance(t, dict)}
    terms_b = {json.dumps(t, sort_keys=True): t for t in (b or []) if isinstance(t, dict)}
    names = sorted({str(t.get("name")) for k, t in (terms_a | terms_b).items() if (k in terms_a) != (k in terms_b)})
    return [unit("shaping", n) for n in names] or [Knob(key, None)]


# --------------------------------------------------------------------------------------------
# Measuring and gating
# --------------------------------------------------------------------------------------------


def run_activity(history: pd.DataFrame, metrics: set[str]) -> pd.Series:
    """Each run's activity per metric: the metric's mean over the steps it logged, indexed
    ``(run_id, metric)``."""
    part = history[history["metric"].isin(metrics)]
    return part.groupby(["run_id", "metric"], sort=False)["value"].mean()


def _arm_mean(per_run: pd.Series, run_ids: Sequence[str], metric: str) -> float:
    """Mean over an arm's runs (seeds) of their activity on ``metric``; NaN if none logged it."""
    values = [per_run.get((rid, metric), math.nan) for rid in run_ids]
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


@dataclass(frozen=True)
class _Plan:
    """What one arm's gate reads: ``(label, metric, unit, min)`` per knob, or why there is no gate."""

    baseline_arm: str
    knobs: tuple[tuple[str, str, str, float], ...] = ()


def _plans(runs: pd.DataFrame, baseline: str, settings: Mapping[str, Setting]) -> dict[str, _Plan]:
    """The gate plan of every compared arm (arms whose comparison changes only gated knobs, or
    whose variant declares a metric)."""
    if runs.empty:
        return {}
    arm_variant = _arms.arm_variants(runs)
    baselines = _arms.match_baselines(arm_variant, baseline)
    configs = None
    plans = {}
    for arm, base_arm in baselines.items():
        if base_arm is None or base_arm == arm:
            continue
        setting = settings.get(arm_variant[arm], Setting())
        if setting.off:
            continue
        if setting.metric is not None:
            label = f"{arm_variant[arm]}'s knob"
            plans[arm] = _Plan(base_arm, ((label, setting.metric, setting.unit, setting.min),))
            continue
        configs = configs if configs is not None else arm_configs(runs)
        knobs = changed_knobs(configs[arm], configs[base_arm])
        if knobs and all(k.gated for k in knobs):
            plans[arm] = _Plan(
                base_arm, tuple((k.label, k.activity.metric, k.activity.unit, setting.min) for k in knobs)
            )
    return plans


def gate_plans(runs: pd.DataFrame, baseline: str, settings: Mapping[str, Setting] | None = None) -> dict[str, _Plan]:
    """What each arm's gate will read (for :func:`gate_metrics` and :func:`activity_gates`)."""
    return _plans(runs, baseline, settings or {})


def gate_metrics(plans: Mapping[str, _Plan]) -> set[str]:
    """The activity metrics the gates read (to load with the study's history)."""
    return {metric for plan in plans.values() for _, metric, _, _ in plan.knobs}


def activity_gates(
    runs: pd.DataFrame,
    history: pd.DataFrame,
    baseline: str,
    settings: Mapping[str, Setting] | None = None,
    *,
    plans: Mapping[str, _Plan] | None = None,
    read_more: Callable[[list[str]], pd.DataFrame] | None = None,
) -> dict[str, Gate]:
    """``arm -> Gate`` for every compared arm the gate applies to (see the module docstring).

    ``runs``: the runs frame of :mod:`workbench.results.reader` (its params give the configs);
    ``history``: at least the :func:`gate_metrics` of those runs, or ``read_more(metrics)`` returns
    the history of those it lacks; ``baseline`` as for :func:`workbench.compare.compare_variants`;
    ``settings`` from :func:`parse_settings`; ``plans``: :func:`gate_plans` of the same, when already made."""
    plans = gate_plans(runs, baseline, settings) if plans is None else plans
    if not plans:
        return {}
    lacking = sorted(gate_metrics(plans) - set(history["metric"].unique()))
    if lacking and read_more is not None:  # activity metrics the comparison itself did not load
        history = pd.concat([history, read_more(lacking)], ignore_index=True)
    per_run = run_activity(history, gate_metrics(plans))
    run_ids = runs.groupby(_arms.arm_column(runs).to_numpy(), sort=False)["run_id"].agg(list).to_dict()
    gates = {}
    for arm, plan in plans.items():
        readings, missing = [], []
        for label, metric, unit, low in plan.knobs:
            here, there = (
                _arm_mean(per_run, run_ids[arm], metric),
                _arm_mean(per_run, run_ids[plan.baseline_arm], metric),
            )
            value = float(np.nanmax([here, there])) if math.isfinite(here) or math.isfinite(there) else math.nan
            if not math.isfinite(value):
                missing.append(f"no run of {arm} or {plan.baseline_arm} logged {metric}")
            readings.append(Reading(label, metric, unit, value, low, here, there))
        gates[arm] = Gate(
            plan.baseline_arm,
            tuple(readings),
            why_open="; ".join(missing),
            metrics=frozenset(m for _, m, _, _ in plan.knobs),
        )
    return gates


def apply_gate(row: dict[str, Any], gate: Gate | None, reads: Sequence[str] = ()) -> None:
    """Make a compared row's verdict "not testable" when its arm's knob acted below the minimum
    and its test did not reject.

    ``reads``: the logged metrics the row's summary reads (a row of the knob's own activity metric
    is not gated). The row's ``activity``/``activity_min`` get the deciding knob's reading; when
    it is not testable, the test's own verdict moves to the note and the effect the corrected
    interval excludes is added when it is finite. A rejecting row keeps its verdict (the activity
    in its columns and note); "no data" stays."""
    if gate is None or not gate.readings or set(reads) & gate.metrics or row.get("verdict") == "no data":
        return
    decider = max(gate.readings, key=lambda r: r.value / r.min if r.min > 0 else math.inf)
    row["activity"], row["activity_min"] = decider.value, decider.min
    notes = [row.get("note") or "", gate.note()]
    if gate.why_open:
        notes.append(f"activity gate open: {gate.why_open}")
    from . import wording  # deferred: scipy (plan's lint reads unit_registries from this module without it)

    tested_status = row.get("status") or wording.status(row.get("verdict", ""))
    if gate.not_testable and tested_status in REJECTING:
        notes.append(
            f"{gate.verdict().removeprefix(NOT_TESTABLE + ': ')}, yet the test rejected: "
            f"the verdict stands (an activity qualifies a verdict, it does not overrule it)"
        )
    elif gate.not_testable:
        tested, verdict = row.get("verdict", ""), gate.verdict()
        lo, hi = row.get("delta_lo", math.nan), row.get("delta_hi", math.nan)
        if _finite(lo) and _finite(hi) and lo <= 0.0 <= hi:
            verdict += f"; |Δ| > {_round_up(max(abs(lo), abs(hi)))} excluded"
        row["verdict"], row["status"] = verdict, NOT_TESTABLE
        notes.append(f"the test alone: {tested}")
    row["note"] = "; ".join(n for n in notes if n)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _round_up(x: float) -> str:
    """``x`` to 2 significant digits, rounded away from 0, so the excluded bound stated is never
    tighter than the interval's (``0.03536`` -> ``0.036``)."""
    if x == 0.0:
        return "0"
    digits = 1 - math.floor(math.log10(abs(x)))
    return f"{math.ceil(x * 10**digits) / 10**digits:.{max(digits, 0)}f}"


# --------------------------------------------------------------------------------------------
# The defaults, as the table in docs/reports.md and docs/compare.md (``make docs``)
# --------------------------------------------------------------------------------------------


def markdown_activity_table() -> str:
    """The built-in knobs and the activity metric each registered unit declares, as markdown."""
    from workbench.algorithms.params import LOSS_PARAM_FIELDS  # deferred: torch

    reg = unit_registries()
    rows: dict[tuple[str, str, str], list[str]] = {}  # (setting, metric, counts) -> units
    for loss in reg["loss"].names():
        for param, activity in reg["loss"].activity(loss).params.items():
            setting = f"`algorithm.{param}`" if param in LOSS_PARAM_FIELDS else f"`algorithm.loss_params.{param}`"
            rows.setdefault(_row(setting, activity), []).append(f"`{loss}`")
    correction = reg["correction"]
    for name in correction.names():
        rows.setdefault(_row(f"`{correction.selected_by}`", correction.activity(name)), []).append(f"`{name}`")
        for key in correction.settings:
            param = correction.activity(name).params.get(key.rsplit(".", 1)[1])
            rows.setdefault(_row(f"`{key}`", param), []).append(f"`{name}`")
    for kind in ("batch filter", "token filter", "shaping"):  # a setting of these acts through the unit's own metric
        setting = ", ".join(
            [f"`{reg[kind].selected_by}`", *(f"`{key.rsplit('.', 1)[1]}`" for key in reg[kind].settings)]
        )
        for name in reg[kind].names():
            rows.setdefault(_row(setting, reg[kind].activity(name)), []).append(f"`{name}`")
    lines = ["| setting | units | activity metric | counts |", "|---|---|---|---|"]
    lines += [f"| {s} | {', '.join(units)} | {m} | {c} |" for (s, m, c), units in rows.items()]
    lines.append(
        "| anything else (estimator, loss, aggregation, KL, learning rate, epochs, sampler, task, ...) "
        "| - | none: acts on every token | always tested |"
    )
    return "\n".join(lines) + "\n"


def _row(setting: str, activity: Activity | None) -> tuple[str, str, str]:
    if activity is None or activity.metric is None:
        return setting, f"none: {activity.reason if activity else 'not declared'}", "always tested"
    return setting, f"`{activity.metric}`", activity.unit
