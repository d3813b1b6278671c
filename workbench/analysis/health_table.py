"""Runs × health rules, as data (used by ``workbench health``, the reports, the dashboards and the
notebook API):

* :func:`health_cells`: one row per run and rule (``state`` ok | warn | fail | off | unknown, the
  first-trigger ``step``, ``value``, ``threshold``, ``message``) from the runs' ``health.json``
  reports; a run without one (crashed, or logged before health rules existed) falls back to its
  ``workbench.health_reasons`` tag (steps, no values), else ``unknown``.
* :func:`health_events`: every event of every report, with the metrics its rule watches (for
  markers on curves).
* :func:`recheck_reports`: the rules re-applied to the logged metric history
  (``HealthMonitor.recheck``), with each run's own health config or another preset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.metrics.catalogue import unlogged_by_config

if TYPE_CHECKING:
    import pandas as pd

CELL_COLUMNS = (
    "run_id",
    "label",
    "variant",
    "seed",
    "rule",
    "state",
    "step",
    "value",
    "threshold",
    "message",
    "source",
)


def run_label(row: Mapping[str, Any]) -> str:
    """A run as the health table names it: ``<arm>/seed=N`` (``<arm>/cold_start=i/seed=N`` for cold start i > 0)."""
    from workbench.compare.checkpoints import CHECKPOINT_COLUMN, cold_start_segment  # deferred: pandas

    return f"{row.get('arm') or row['variant']}{cold_start_segment(row.get(CHECKPOINT_COLUMN))}/seed={row['seed']}"


def _rule_order(reports: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    from workbench.health import HEALTH_RULES  # deferred: pydantic

    names = set(HEALTH_RULES.names())
    for rep in reports.values():
        if rep:
            names |= set(rep.get("rules", {}))
    return sorted(names)


def health_cells(
    runs: pd.DataFrame, reports: Mapping[str, Mapping[str, Any] | None], rules: list[str] | None = None
) -> pd.DataFrame:
    """Runs × rules, tidy (see the module docstring); runs in ``runs`` order."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.health import HEALTH_RULES  # deferred: pydantic

    rules = rules or _rule_order(reports)
    out = []
    for row in runs.to_dict("records"):
        rid = row["run_id"]
        rep = reports.get(rid)
        base = {"run_id": rid, "label": run_label(row), "variant": row["variant"], "seed": row["seed"]}
        if rep:
            for rule in rules:
                r = rep.get("rules", {}).get(rule)
                cell = {
                    **base,
                    "rule": rule,
                    "state": "unknown",
                    "step": None,
                    "value": None,
                    "threshold": None,
                    "message": "",
                    "source": "health.json",
                }
                if r is None:
                    cell["message"] = "rule not in this run's report"
                elif not r.get("enabled", True):
                    cell["state"] = "off"
                elif r.get("not_applicable"):  # watches only metrics this run's config never logs
                    cell.update(state="off", message=r["not_applicable"])
                elif r.get("first_trigger"):
                    ft = r["first_trigger"]
                    cell.update(
                        state=r.get("severity", "warn"),
                        step=ft.get("step"),
                        value=_num(ft.get("value")),
                        threshold=_num(ft.get("threshold")),
                        message=ft.get("message", ""),
                    )
                elif r.get("not_evaluated"):  # its inputs were never logged: unknown, not passed
                    cell["message"] = r["not_evaluated"]
                else:
                    cell["state"] = "ok"
                out.append(cell)
            continue
        reasons = row.get("health_reasons")
        tagged = row.get("health") not in (None, "", "-") and reasons is not None and not pd.isna(reasons)
        fired = {}
        if tagged:
            for part in str(reasons).split(","):
                name, _, step = part.strip().partition("@")
                if name:
                    fired[name] = int(step) if step.isdigit() else None
        for rule in rules:
            cell = {
                **base,
                "rule": rule,
                "state": "ok" if tagged else "unknown",
                "step": None,
                "value": None,
                "threshold": None,
                "message": "",
                "source": "tags" if tagged else "none",
            }
            if rule in fired:
                try:
                    severity = HEALTH_RULES.get(rule).Params().severity
                except ValueError:
                    severity = "warn"
                cell.update(
                    state=severity,
                    step=fired[rule],
                    message=f"{rule} fired at step {fired[rule]} (from the workbench.health_reasons tag; "
                    "no health.json: use --recheck for values)",
                )
            out.append(cell)
    df = pd.DataFrame(out, columns=list(CELL_COLUMNS))
    df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
    for c in ("value", "threshold"):  # None (no value) stays distinct from a logged NaN
        df[c] = pd.Series([o[c] for o in out], dtype=object, index=df.index)
    return df


def health_events(reports: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """Every event of every report: ``run_id, rule, step, severity, metric, value, threshold,
    message, watches``."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    rows = []
    for rid, rep in reports.items():
        if not rep:
            continue
        rules = rep.get("rules", {})
        for e in rep.get("events", []):
            rows.append(
                {
                    "run_id": rid,
                    **{k: e.get(k) for k in ("rule", "step", "severity", "metric", "message")},
                    "value": _num(e.get("value")),
                    "threshold": _num(e.get("threshold")),
                    "watches": tuple(rules.get(e.get("rule"), {}).get("watches", ())),
                }
            )
    cols = ["run_id", "rule", "step", "severity", "metric", "message", "value", "threshold", "watches"]
    return pd.DataFrame(rows, columns=cols)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        return float(v)  # "nan"/"inf" strings of strict JSON too
    except (TypeError, ValueError):
        return None


def run_health_config(row: Mapping[str, Any], preset: str | None = None) -> dict[str, Any]:
    """The health config a run was logged with (its ``health.*`` params), or ``preset`` alone."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    if preset is not None:
        return {"preset": preset}
    cfg: dict[str, Any] = {}
    p = row.get("health.preset")
    if isinstance(p, str) and p:
        cfg["preset"] = p
    rules: dict[str, dict[str, Any]] = {}
    whole = row.get("health.rules")  # logged as one JSON param when empty ("{}")
    if isinstance(whole, str) and whole.strip() not in ("", "{}"):
        rules = json.loads(whole)
    for key, value in row.items():  # flattened: health.rules.<rule>.<param>
        if not key.startswith("health.rules.") or value is None or (isinstance(value, float) and pd.isna(value)):
            continue
        rule, _, param = key[len("health.rules.") :].partition(".")
        if param:
            rules.setdefault(rule, {})[param] = _param(value)
    if rules:
        cfg["rules"] = rules
    on_fail = row.get("health.on_fail")
    if isinstance(on_fail, str) and on_fail:
        cfg["on_fail"] = on_fail
    return cfg


def recheck_reports(history: pd.DataFrame, runs: pd.DataFrame, preset: str | None = None) -> dict[str, dict]:
    """``run_id -> health report`` recomputed from the logged metrics (same events as live)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.health import HealthMonitor  # deferred: pydantic

    by_run = {rid: g for rid, g in history.groupby("run_id", sort=False)}
    out = {}
    for row in runs.to_dict("records"):
        params = {k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and pd.isna(v))}
        monitor = HealthMonitor.from_config(run_health_config(row, preset), unlogged=unlogged_by_config(params))
        g = by_run.get(row["run_id"])
        series: dict[str, list[tuple[int, float]]] = {}
        if g is not None:
            for metric, m in g.groupby("metric", sort=False):
                series[metric] = list(zip(m["step"].tolist(), m["value"].tolist(), strict=True))
        out[row["run_id"]] = monitor.recheck(series).report()
    return out


def _param(v: Any) -> Any:
    """An MLflow param string back to a value: True/False, numbers (already numeric from the
    reader), JSON lists; anything else as is."""
    if isinstance(v, str):
        if v in ("True", "False"):
            return v == "True"
        if v[:1] in "[{":
            try:
                return json.loads(v)
            except ValueError:
                return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v
