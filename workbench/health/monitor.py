"""``HealthMonitor``: runs the configured rules over the per-step metric stream.

Use in the training loop, once per RL step, after the step's metrics are computed::

    monitor = HealthMonitor.from_config(cfg.health)
    for step in range(steps):
        metrics = ...                                  # canonical names -> numbers
        verdict = monitor.observe(step, metrics)
        metrics |= verdict.as_metrics()                # {"health/status": 0|1|2}
        for event in verdict.events: log.warning(event.message)
        tracker.log_metrics(metrics, step=step)
        if monitor.should_stop: break
    tracker.set_tags(monitor.tags())                   # workbench.health, workbench.health_reasons
    tracker.log_dict(monitor.report(), "health.json")

Semantics:

* ``StepVerdict.status`` (the ``health/status`` metric) is the worst severity among the rules
  *active* at that step, so the curve shows when a problem was present and when it cleared.
* ``run_status`` is sticky: the worst severity of any event fired so far (a run that warned and
  recovered is still ``warn``). ``reasons`` lists each rule that fired, at its first step.
* ``should_stop`` is sticky too: true once any ``fail``-severity event fired and
  ``on_fail == "stop"``.
* Steps must strictly increase: merge a step's train and eval metrics into one dict and call
  ``observe`` once per step. Rule state lives in memory; after resuming a run rebuild it with
  ``HealthMonitor.from_config(cfg).recheck(logged_history)``.

A long finished history (an import of a million steps) is judged a block of steps at a time
instead: ``observe_all(history)``, or ``columns()`` to feed it step by step as it streams
(health/columns.py); same events, report and state as ``observe`` on each step, with numpy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from workbench.metrics.names import HEALTH_STATUS

from .columns import BLOCK_STEPS, Block, StepColumns
from .config import HealthConfig
from .events import (
    FAIL,
    OK,
    REPORT_ARTIFACT,
    SEVERITY_CODE,
    STATUS_NAMES,
    TAG_LABEL,
    TAG_REASONS,
    TAG_STATUS,
    HealthEvent,
    StepVerdict,
    json_float,
)
from .rules import HEALTH_RULES, HealthRule

__all__ = ["History", "HealthMonitor", "iter_history", "recheck"]

# Either MLflow-style per-metric history ({name: [(step, value), ...]} or objects with .step and
# .value, as returned by MlflowClient.get_metric_history), or an iterable of (step, metrics).
History = Mapping[str, Iterable[Any]] | Iterable[tuple[int, Mapping[str, Any]]]


def _step_value(item: Any) -> tuple[int, Any]:
    if hasattr(item, "step") and hasattr(item, "value"):
        return int(item.step), item.value
    step, value = item
    return int(step), value


def iter_history(history: History) -> Iterator[tuple[int, dict[str, Any]]]:
    """Normalise a finished run's history to ``(step, metrics)`` pairs in replay order.

    A mapping is read as per-metric history and regrouped by step (ascending; a metric logged
    twice at a step keeps its last value; ``health/status`` is dropped, being this module's own
    output). Any other iterable is taken as ``(step, metrics)`` pairs, replayed in the given order.
    """
    if isinstance(history, Mapping):
        by_step: dict[int, dict[str, Any]] = {}
        for key, series in history.items():
            if key == HEALTH_STATUS:
                continue
            for item in series:
                step, value = _step_value(item)
                by_step.setdefault(step, {})[key] = value
        for step in sorted(by_step):
            yield step, by_step[step]
    else:
        for step, metrics in history:
            yield int(step), dict(metrics)


class HealthMonitor:
    """Applies a set of health rules to a stream of per-step metric dicts."""

    def __init__(
        self,
        rules: Iterable[HealthRule],
        *,
        on_fail: str = "stop",
        config: HealthConfig | None = None,
        unlogged: Mapping[str, str] | None = None,
    ) -> None:
        # metric -> the setting that keeps this run from logging it (metrics.unlogged_by_config)
        self.unlogged: dict[str, str] = dict(unlogged or {})
        if on_fail not in ("stop", "continue"):
            raise ValueError(f"on_fail must be 'stop' or 'continue', got {on_fail!r}")
        self._rules: dict[str, HealthRule] = {}
        for rule in sorted(rules, key=lambda r: r.name):
            if rule.name in self._rules:
                raise ValueError(f"health rule {rule.name!r} given twice")
            self._rules[rule.name] = rule
        self.on_fail = on_fail
        self.config = config
        self._reset_run()

    @classmethod
    def from_config(
        cls,
        cfg: HealthConfig | Mapping[str, Any] | str | None = None,
        *,
        unlogged: Mapping[str, str] | None = None,
    ) -> HealthMonitor:
        """A monitor with every registered rule, configured by ``cfg``.

        ``cfg`` may be a ``HealthConfig``, its dict form (validated), a preset name, or ``None``
        for the ``default`` preset.
        """
        if cfg is None:
            cfg = HealthConfig()
        elif isinstance(cfg, str):
            cfg = HealthConfig(preset=cfg)
        elif isinstance(cfg, Mapping):
            cfg = HealthConfig.model_validate(dict(cfg))
        elif not isinstance(cfg, HealthConfig):
            raise TypeError(f"expected HealthConfig, dict, preset name or None; got {type(cfg).__name__}")
        rules = [HEALTH_RULES.get(name)(params) for name, params in cfg.resolved().items()]
        return cls(rules, on_fail=cfg.on_fail, config=cfg, unlogged=unlogged)

    # -- state -------------------------------------------------------------------------------

    def _reset_run(self) -> None:
        self._events: list[HealthEvent] = []
        self._first: dict[str, HealthEvent] = {}
        self._counts: dict[str, int] = {name: 0 for name in self._rules}
        self._steps = 0
        self._first_step: int | None = None
        self._last_step: int | None = None
        self._worst = OK
        self._status = OK
        self._seen: set[str] = set()  # metric names observed with a value: what an unevaluated rule lacked

    def reset(self) -> None:
        """Forget everything observed (all rules and the run's verdict)."""
        for rule in self._rules.values():
            rule.reset()
        self._reset_run()

    def fresh(self) -> HealthMonitor:
        """A new monitor with the same rules and parameters and no observations."""
        rules = [type(r)(r.params) for r in self._rules.values()]
        return type(self)(rules, on_fail=self.on_fail, config=self.config, unlogged=self.unlogged)

    # -- the per-step call -------------------------------------------------------------------

    def observe(self, step: int, metrics: Mapping[str, Any]) -> StepVerdict:
        """Feed one RL step's metrics; returns the step's status and the events that fired.

        Metrics a rule needs but that are absent (or non-finite, for rules other than
        ``non_finite``) are skipped by that rule. ``step`` must be greater than the previous one.
        """
        if isinstance(step, bool) or not isinstance(step, int):
            try:
                as_int = int(step)
            except (TypeError, ValueError):
                raise TypeError(f"step must be an int, got {step!r}") from None
            if as_int != step:
                raise TypeError(f"step must be an int, got {step!r}")
            step = as_int
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of metric name -> value, got {type(metrics).__name__}")
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(
                f"health monitor steps must strictly increase: got step {step} "
                f"after {self._last_step} "
                "(merge a step's metrics into one dict and call observe once per step)"
            )
        self._seen.update(metrics)
        events: list[HealthEvent] = []
        for rule in self._rules.values():
            event = rule.observe(step, metrics)
            if event is not None:
                events.append(event)
                self._counts[rule.name] += 1
                self._first.setdefault(rule.name, event)
                self._worst = max(self._worst, SEVERITY_CODE[event.severity])
        self._events.extend(events)
        self._steps += 1
        if self._first_step is None:
            self._first_step = step
        self._last_step = step
        active = tuple(name for name, rule in self._rules.items() if rule.enabled and rule.active)
        status = max((SEVERITY_CODE[self._rules[n].params.severity] for n in active), default=OK)
        self._status = status
        return StepVerdict(step=step, status=status, events=tuple(events), active=active)

    # -- run-level verdict -------------------------------------------------------------------

    @property
    def rules(self) -> dict[str, HealthRule]:
        """The monitor's rules by name (enabled or not)."""
        return dict(self._rules)

    @property
    def events(self) -> list[HealthEvent]:
        """All events fired so far, in order."""
        return list(self._events)

    @property
    def status(self) -> int:
        """The last observed step's status (0/1/2); 0 before any step."""
        return self._status

    @property
    def run_status(self) -> str:
        """``ok`` | ``warn`` | ``fail``: the worst severity of any event so far (sticky)."""
        return STATUS_NAMES[self._worst]

    @property
    def run_status_code(self) -> int:
        return self._worst

    @property
    def coverage(self) -> tuple[int, int]:
        """``(evaluated, checkable)``: of the enabled rules that apply to this run (not those whose
        every input the run's config never logs), how many evaluated at least once."""
        checkable = [r for r in self._rules.values() if r.enabled and not self._not_applicable(r)]
        return sum(1 for r in checkable if r.evaluated), len(checkable)

    @property
    def run_label(self) -> str:
        """The run's status as every output shows it: ``ok`` only when every checkable rule was
        evaluated, else ``ok (k of n rules evaluated)``; ``warn`` / ``fail`` as ``run_status`` (a rule
        fired: that verdict stands whatever the others could see)."""
        evaluated, checkable = self.coverage
        if self._worst != OK or evaluated == checkable:
            return self.run_status
        return f"{self.run_status} ({evaluated} of {checkable} rules evaluated)"

    @property
    def reasons(self) -> str:
        """``rule@first_step`` for every rule that fired, by first step: the reasons tag."""
        firsts = sorted(self._first.values(), key=lambda e: (e.step, e.rule))
        return ",".join(e.short() for e in firsts)

    @property
    def should_stop(self) -> bool:
        """True once a ``fail``-severity event has fired and ``on_fail == 'stop'`` (sticky)."""
        return self.on_fail == "stop" and self._worst == FAIL

    def tags(self) -> dict[str, str]:
        """The MLflow tags ``workbench.health`` (ok/warn/fail), ``workbench.health_reasons`` and
        ``workbench.health_label`` (``run_label``)."""
        return {TAG_STATUS: self.run_status, TAG_REASONS: self.reasons, TAG_LABEL: self.run_label}

    def report(self) -> dict[str, Any]:
        """A strict-JSON-serialisable summary for the ``health.json`` artifact."""
        rules: dict[str, Any] = {}
        for name, rule in self._rules.items():
            first = self._first.get(name)
            rules[name] = {
                "enabled": rule.enabled,
                "severity": rule.params.severity,
                "params": rule.params.model_dump(mode="json"),
                "watches": list(rule.watches),
                "count": self._counts[name],
                "evaluated": rule.evaluated,
                "not_evaluated": self._not_evaluated(rule),
                "not_applicable": self._not_applicable(rule),
                "active": rule.enabled and rule.active,
                "first_trigger": None
                if first is None
                else {
                    "step": first.step,
                    "metric": first.metric,
                    "value": json_float(first.value),
                    "threshold": json_float(first.threshold),
                    "message": first.message,
                },
            }
        fails = [e.step for e in self._events if e.severity == "fail"]
        return {
            "status": self.run_status,
            "status_code": self.run_status_code,
            "label": self.run_label,
            "rules_evaluated": self.coverage[0],
            "rules_checkable": self.coverage[1],
            "reasons": self.reasons,
            "should_stop": self.should_stop,
            "first_fail_step": fails[0] if fails else None,
            "on_fail": self.on_fail,
            "config": None if self.config is None else self.config.model_dump(mode="json"),
            "steps_observed": self._steps,
            "first_step": self._first_step,
            "last_step": self._last_step,
            "rules": rules,
            "events": [e.to_dict() for e in self._events],
        }

    def _not_applicable(self, rule: HealthRule) -> str | None:
        """Why a rule cannot apply to this run at all: every metric it watches is one the run's own
        config never logs (``unlogged``: e.g. kl/ref with kl_coef 0). None otherwise."""
        watched = [w for w in rule.watches if w != "*"]
        if not rule.enabled or rule.evaluated or not watched or any(w not in self.unlogged for w in watched):
            return None
        return "not applicable: " + "; ".join(f"{w} is not logged when {self.unlogged[w]}" for w in watched)

    def _not_evaluated(self, rule: HealthRule) -> str | None:
        """Why an enabled rule never evaluated ("not evaluated: needs X"), so a rule whose inputs
        were never logged does not read as passed; None once it evaluated, if it is off, or if it
        does not apply to the run's config."""
        if not rule.enabled or rule.evaluated or self._steps == 0 or self._not_applicable(rule):
            return None
        watched = [w for w in rule.watches if w != "*"]
        missing = [w for w in watched if w not in self._seen]
        if missing:
            return f"not evaluated: needs {', '.join(missing)}"
        return (
            f"not evaluated: needs ≥ {rule.min_observations} finite observations of {', '.join(watched)} "
            f"(this run has {self._steps} steps)"
        )

    def report_json(self, indent: int | None = 2) -> str:
        """``report()`` as strict JSON text (no NaN literals)."""
        return json.dumps(self.report(), indent=indent, allow_nan=False, ensure_ascii=False)

    def write_report(self, path: str | os.PathLike[str]) -> str:
        """Write ``report_json()`` to ``path`` (a directory gets ``health.json``); returns it."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, REPORT_ARTIFACT)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.report_json())
        return path

    # -- after the fact ----------------------------------------------------------------------

    def observe_block(self, block: Block) -> list[HealthEvent]:
        """Feed a block of steps (after every step observed so far): the same events, status and
        report as ``observe`` on each of its steps in turn, each rule judging the block at once."""
        if not len(block):
            return []
        first, last = int(block.steps[0]), int(block.steps[-1])
        if self._last_step is not None and first <= self._last_step:
            raise ValueError(
                f"health monitor steps must strictly increase: got step {first} after {self._last_step} "
                "(merge a step's metrics into one dict and call observe once per step)"
            )
        self._seen.update(block.names)
        found = []
        for order, rule in enumerate(self._rules.values()):  # within a step, events in rule order, as observe
            found += [(position, order, event) for position, event in rule.observe_block(block)]
        found.sort(key=lambda f: (f[0], f[1]))
        events = [event for _, _, event in found]
        for event in events:
            self._counts[event.rule] += 1
            self._first.setdefault(event.rule, event)
            self._worst = max(self._worst, SEVERITY_CODE[event.severity])
        self._events.extend(events)
        self._steps += len(block)
        if self._first_step is None:
            self._first_step = first
        self._last_step = last
        active = [rule for rule in self._rules.values() if rule.enabled and rule.active]
        self._status = max((SEVERITY_CODE[rule.params.severity] for rule in active), default=OK)
        return events

    def columns(self, block_steps: int = BLOCK_STEPS) -> StepColumns:
        """A collector that feeds this monitor ``block_steps`` at a time: ``add(step, metrics)``
        for each step (ascending), ``finish()`` after the last."""
        enabled = [rule for rule in self._rules.values() if rule.enabled]
        names = [name for rule in enabled for name in rule.columns()]
        return StepColumns(
            names, self.observe_block, keep_rows=not all(r.has_column_form for r in enabled), size=block_steps
        )

    def observe_all(self, history: History, block_steps: int = BLOCK_STEPS) -> HealthMonitor:
        """Observe a whole history (see ``iter_history``) block by block; returns ``self``."""
        collector = self.columns(block_steps)
        for step, metrics in iter_history(history):
            collector.add(step, metrics)
        collector.finish()
        return self

    def recheck(self, history: History) -> HealthMonitor:
        """Apply this monitor's rules to a finished run's ``history``; returns a new monitor.

        ``self`` is not modified. Gives the same events as live observation of the same steps
        (see ``iter_history`` for the accepted forms).
        """
        monitor = self.fresh()
        for step, metrics in iter_history(history):
            monitor.observe(step, metrics)
        return monitor

    def __repr__(self) -> str:
        enabled = [n for n, r in self._rules.items() if r.enabled]
        return (
            f"HealthMonitor(status={self.run_status!r}, reasons={self.reasons!r}, "
            f"on_fail={self.on_fail!r}, enabled={enabled})"
        )


def recheck(history: History, cfg: HealthConfig | Mapping[str, Any] | str | None = None) -> HealthMonitor:
    """``HealthMonitor.from_config(cfg).recheck(history)``: re-run the rules on a finished run."""
    return HealthMonitor.from_config(cfg).recheck(history)
