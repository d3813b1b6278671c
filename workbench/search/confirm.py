"""Confirmation of the best trials on fresh seeds (``search.confirm: {top_k: 3, seeds: [...]}``).

A search picks its best trial from one noisy draw per trial (the mean over its ``seeds``), and the
trial it picks is the one whose draw was luckiest as often as the one that is best. So after the
budget, the ``top_k`` trials (by their search value) and the **baseline** (the search's variant as
the study defines it, without sampled values; a search has no run of it, so it is confirmed as one
more arm) each run once per confirmation seed: real runs through
:func:`workbench.execution.run.execute_run`, MLflow children of the search run like the trials
(``workbench.role=trial``, plus ``workbench.confirm=true`` and ``workbench.confirm_arm``). Each run's
objective value (the same per-run summary as a trial's) is recorded in the Optuna study's user
attribute ``workbench.confirmed`` under the run's ``run_key``; a run_key already there is not run
again, so re-running ``tune`` completes a confirmation and never duplicates one (two arms with the
same config share their runs).

Ranking (:func:`confirmed_arms`): the arms by their mean over the confirmation seeds, with the t
interval of :func:`workbench.compare.stats.mean_ci`; the best arm is compared with every other
(paired t-test on the shared seeds, :func:`~workbench.compare.stats.mean_difference`, Holm-corrected
with :func:`~workbench.compare.stats.adjust_pvalues`), worded as ``workbench compare`` words it
(:func:`workbench.compare.wording.verdict`: ``better``, ``inconclusive with 3 seeds``).
The results table, the report and ``--export-best`` rank the confirmed trials by this, before the
unconfirmed ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.compare import stats, wording
from workbench.search.objective import RunSummary, SearchContext
from workbench.search.spec import SearchSpec

__all__ = [
    "BASELINE",
    "CONFIRMED",
    "ConfirmedArm",
    "confirmation_lines",
    "confirmed_arms",
    "run_confirmation",
    "search_ranked",
]

CONFIRMED = "workbench.confirmed"  # study user attr: run_key -> {arm, seed, value, run_id}
BASELINE = "baseline"
ALPHA = 0.05


@dataclass
class ConfirmedArm:
    """One confirmed configuration: a trial's sampled values, or the baseline (no values)."""

    name: str  # "trial 3" | "baseline"
    trial: int | None
    params: dict[str, Any]
    search_value: float | None  # the trial's value in the search (None for the baseline)
    seeds: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)  # per confirmation seed, in seed order
    estimate: stats.Estimate | None = None  # mean and t interval over ``values``
    vs_best: str = ""  # the verdict of the best arm against this one ("" for the best itself)
    rank: int = 0  # 1 = best confirmed mean


def _feasible(trial) -> bool:
    """Optuna's rule: feasible when every constraint value (``Trial.set_constraint``) is <= 0."""
    return all(c <= 0 for c in (getattr(trial, "constraints", None) or {}).values())


def search_ranked(ostudy, spec: SearchSpec) -> list:
    """The COMPLETE trials of a single-objective search by their search value, best first
    (feasible ones first; ties by trial number)."""
    from optuna.trial import TrialState

    complete = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    sign = -1.0 if spec.directions[0] == "maximize" else 1.0
    return sorted(complete, key=lambda t: (not _feasible(t), sign * t.value, t.number))


def _arms_to_confirm(ostudy, spec: SearchSpec) -> list[tuple[str, int | None, dict[str, Any], float | None]]:
    """The ``top_k`` best trials by their search value, then the baseline."""
    top = search_ranked(ostudy, spec)[: spec.config.confirm.top_k]
    return [(f"trial {t.number}", t.number, dict(t.params), t.value) for t in top] + [(BASELINE, None, {}, None)]


def run_confirmation(
    ostudy,
    spec: SearchSpec,
    ctx: SearchContext,
    log: Callable[[str], None] = print,
    progress_factory: Callable | None = None,
) -> int:
    """Run every (arm, confirmation seed) not recorded yet; returns how many runs it started.
    A failed run is logged and left unrecorded (the next ``tune`` tries it again)."""
    from workbench.execution.run import execute_run  # deferred: torch, transformers

    confirm = spec.config.confirm
    if confirm is None or spec.multi_objective:
        return 0
    objective = spec.objectives[0]
    records: dict[str, dict[str, Any]] = dict(ostudy.user_attrs.get(CONFIRMED, {}))
    started = 0
    for name, number, params, _ in _arms_to_confirm(ostudy, spec):
        for seed in confirm.seeds:
            cfg = spec.trial_config(params, seed)
            key = cfg.run_key()
            if key in records:
                continue
            summary = RunSummary(cfg, include_step0=spec.config.include_step0)
            label = f"confirm-{name.replace(' ', '-')}/seed={seed}"
            tags = {"workbench.search": spec.optuna_name, "workbench.confirm": "true", "workbench.confirm_arm": name}
            if number is not None:
                tags["workbench.trial"] = str(number)
            log(f"confirming {name} on seed {seed}")
            started += 1
            bar = progress_factory(label) if progress_factory else None
            try:
                outcome = execute_run(
                    cfg,
                    study=spec.study.name,
                    variant=spec.variant,
                    label=label,
                    parent_run_id=ctx.parent_run_id,
                    progress=bar,
                    on_step=lambda step, metrics, s=summary: s.observe(step, metrics),
                    role="trial",
                    extra_tags=tags,
                )
            except Exception as error:  # noqa: BLE001 - e.g. preflight: the next tune tries again
                log(f"confirmation of {name} on seed {seed} failed: {type(error).__name__}: {error}")
                continue
            value = summary.value(objective.metric, objective.summary)
            if outcome.status != "FINISHED" or not math.isfinite(value):
                log(f"confirmation of {name} on seed {seed} failed: {outcome.error or outcome.status or 'no value'}")
                continue
            records[key] = {"arm": name, "trial": number, "seed": seed, "value": value, "run_id": outcome.run_id}
            ostudy.set_user_attr(CONFIRMED, records)  # after every run: an interrupted confirmation resumes
            try:
                ctx.client.set_tag(outcome.run_id, "workbench.confirm_value", repr(value))
            except Exception:  # noqa: BLE001 - a convenience; the Optuna study has the value
                pass
            log(f"confirmed {name} on seed {seed}: {spec.objective_names()[0]} = {value:.4g}")
    return started


def confirmed_arms(ostudy, spec: SearchSpec) -> list[ConfirmedArm]:
    """The arms with at least one confirmation run, best confirmed mean first, each with its t
    interval and the (Holm-corrected) verdict of the best arm against it."""
    confirm = spec.config.confirm
    records = ostudy.user_attrs.get(CONFIRMED, {})
    if confirm is None or not records or spec.multi_objective:
        return []
    arms = []
    for name, number, params, search_value in _arms_to_confirm(ostudy, spec):
        arm = ConfirmedArm(name, number, params, search_value)
        for seed in confirm.seeds:
            try:
                record = records.get(spec.trial_config(params, seed).run_key())
            except ValueError:
                record = None
            if record is not None:
                arm.seeds.append(seed)
                arm.values.append(float(record["value"]))
        if arm.values:
            arm.estimate = stats.mean_ci(arm.values)
            arms.append(arm)
    maximize = spec.directions[0] == "maximize"
    arms.sort(
        key=lambda a: (
            -a.estimate.value if maximize else a.estimate.value,
            a.name == BASELINE,
            a.trial if a.trial is not None else -1,
        )
    )
    for i, arm in enumerate(arms, 1):
        arm.rank = i
    if len(arms) < 2:
        return arms
    best, others = arms[0], arms[1:]
    diffs = [stats.mean_difference(best.values, o.values, x_seeds=best.seeds, y_seeds=o.seeds) for o in others]
    adjusted, divisors = stats.adjust_pvalues([d.p_value for d in diffs], "holm", alpha=ALPHA)
    for other, diff, p_adj, div in zip(others, diffs, adjusted, divisors, strict=True):
        level = 1.0 - ALPHA / div if math.isfinite(div) else 1.0 - ALPHA
        lo, hi = diff.interval(level)
        other.vs_best = wording.verdict(
            diff.delta,
            lo,
            hi,
            float(p_adj),
            alpha=ALPHA,
            higher_is_better=maximize,
            n_x=len(best.values),
            n_y=len(other.values),
        )
    return arms


def confirmation_lines(arms: list[ConfirmedArm], spec: SearchSpec) -> list[str]:
    """Sentences for the report, the CLI and the exported YAML: the best confirmed arm, and whether
    it is distinguishable from the runner-up and from the baseline."""
    if not arms:
        return []
    metric = spec.objective_names()[0]
    best = arms[0]
    e = best.estimate
    interval = f" [{e.lo:.4g}, {e.hi:.4g}]" if math.isfinite(e.lo) else f" ({e.note})"
    head = f"confirmed on {len(best.values)} fresh seed(s): best {best.name}, {metric} mean {e.value:.4g}"
    lines = [f"{head}{interval} (95% t interval)"]
    trials = [a for a in arms[1:] if a.name != BASELINE]
    if trials:
        runner = trials[0]
        if wording.status(runner.vs_best) == "inconclusive":
            lines.append(
                f"the top trials are not distinguishable from each other: {best.name} vs {runner.name}: "
                f"{runner.vs_best}"
            )
        else:
            lines.append(f"{best.name} vs {runner.name}: {runner.vs_best}")
    baseline = next((a for a in arms if a.name == BASELINE), None)
    if best.name == BASELINE:
        lines.append("the baseline (the variant without search values) ranks first: no trial beat it")
    elif baseline is not None:
        if wording.status(baseline.vs_best) == "inconclusive":
            lines.append(f"{best.name} is not distinguishable from the baseline: {baseline.vs_best}")
        else:
            lines.append(f"{best.name} vs the baseline: {baseline.vs_best}")
    unconfirmed = [a for a in arms if len(a.values) < len(spec.config.confirm.seeds)]
    if unconfirmed:
        names = ", ".join(a.name for a in unconfirmed)
        lines.append(f"confirmation incomplete for {names}: run tune again to finish it")
    return lines
