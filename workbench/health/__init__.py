"""Training health: rules that watch the per-step metric stream and a monitor that runs them.

Public surface::

    from workbench.health import HealthConfig, HealthMonitor

    monitor = HealthMonitor.from_config(HealthConfig(preset="default"))
    verdict = monitor.observe(step, metrics)   # StepVerdict(status 0/1/2, events, active)
    monitor.should_stop, monitor.run_status, monitor.reasons, monitor.report()
    HealthMonitor.from_config(cfg).recheck(history)   # after the fact, same events as live

Pure Python (pydantic only), no torch, no I/O except ``HealthMonitor.write_report``.
"""

from .config import HealthConfig, resolve_rule_params
from .events import (
    FAIL,
    OK,
    REPORT_ARTIFACT,
    STATUS_NAMES,
    TAG_LABEL,
    TAG_REASONS,
    TAG_STATUS,
    WARN,
    HealthEvent,
    Severity,
    StepVerdict,
)
from .monitor import HealthMonitor, History, iter_history, recheck
from .presets import HEALTH_PRESETS, preset_overrides
from .rules import HEALTH_RULES, HealthRule, Reading, RuleParams, StreakParams

__all__ = [
    "FAIL",
    "HEALTH_PRESETS",
    "HEALTH_RULES",
    "OK",
    "REPORT_ARTIFACT",
    "STATUS_NAMES",
    "TAG_LABEL",
    "TAG_REASONS",
    "TAG_STATUS",
    "WARN",
    "HealthConfig",
    "HealthEvent",
    "HealthMonitor",
    "HealthRule",
    "History",
    "Reading",
    "RuleParams",
    "Severity",
    "StepVerdict",
    "StreakParams",
    "iter_history",
    "preset_overrides",
    "recheck",
    "resolve_rule_params",
]
