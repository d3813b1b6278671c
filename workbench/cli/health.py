"""``workbench health STUDY_OR_RUN``: runs × health rules with each rule's first-trigger step.

Data (pure functions, used by the reports and dashboards too):
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
from typing import TYPE_CHECKING, Annotated, Any

import typer

from workbench.cli.common import TrackingOpt, console, note, resolve_target
from workbench.cli.output import fail
from workbench.metrics.catalogue import unlogged_by_config
from workbench.tracking.redact import redact_uri

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["health", "health_cells", "health_events", "recheck_reports", "run_health_config"]

CELL_COLUMNS = ("run_id", "label", "variant", "seed", "rule", "state", "step", "value", "threshold", "message",
                "source")


def _label(row: Mapping[str, Any]) -> str:
    return f"{row.get('arm') or row['variant']}/seed={row['seed']}"  # arm = variant + grid point


def _rule_order(reports: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    from workbench.health import HEALTH_RULES  # deferred: pydantic

    names = set(HEALTH_RULES.names())
    for rep in reports.values():
        if rep:
            names |= set(rep.get("rules", {}))
    return sorted(names)


def health_cells(runs: pd.DataFrame, reports: Mapping[str, Mapping[str, Any] | None],
                 rules: list[str] | None = None) -> pd.DataFrame:
    """Runs × rules, tidy (see the module docstring); runs in ``runs`` order."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.health import HEALTH_RULES  # deferred: pydantic

    rules = rules or _rule_order(reports)
    out = []
    for row in runs.to_dict("records"):
        rid = row["run_id"]
        rep = reports.get(rid)
        base = {"run_id": rid, "label": _label(row), "variant": row["variant"], "seed": row["seed"]}
        if rep:
            for rule in rules:
                r = rep.get("rules", {}).get(rule)
                cell = {**base, "rule": rule, "state": "unknown", "step": None, "value": None, "threshold": None,
                        "message": "", "source": "health.json"}
                if r is None:
                    cell["message"] = "rule not in this run's report"
                elif not r.get("enabled", True):
                    cell["state"] = "off"
                elif r.get("not_applicable"):  # watches only metrics this run's config never logs
                    cell.update(state="off", message=r["not_applicable"])
                elif r.get("first_trigger"):
                    ft = r["first_trigger"]
                    cell.update(state=r.get("severity", "warn"), step=ft.get("step"), value=_num(ft.get("value")),
                                threshold=_num(ft.get("threshold")), message=ft.get("message", ""))
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
            cell = {**base, "rule": rule, "state": "ok" if tagged else "unknown", "step": None, "value": None,
                    "threshold": None, "message": "", "source": "tags" if tagged else "none"}
            if rule in fired:
                try:
                    severity = HEALTH_RULES.get(rule).Params().severity
                except ValueError:
                    severity = "warn"
                cell.update(state=severity, step=fired[rule],
                            message=f"{rule} fired at step {fired[rule]} (from the workbench.health_reasons tag; "
                                    "no health.json: use --recheck for values)")
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
            rows.append({"run_id": rid, **{k: e.get(k) for k in ("rule", "step", "severity", "metric", "message")},
                         "value": _num(e.get("value")), "threshold": _num(e.get("threshold")),
                         "watches": tuple(rules.get(e.get("rule"), {}).get("watches", ()))})
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
        rule, _, param = key[len("health.rules."):].partition(".")
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


def _styled(cell: Mapping[str, Any]) -> str:
    import pandas as pd  # deferred: keeps `workbench --help` light

    state, step = cell["state"], cell["step"]
    s = "" if pd.isna(step) else str(int(step))
    return {"ok": "[dim]·[/dim]", "off": "[dim]off[/dim]", "unknown": "[dim]?[/dim]",
            "warn": f"[yellow]{s or 'warn'}[/yellow]", "fail": f"[bold red]{s or 'fail'}[/bold red]"}.get(state, state)


def health(
    study_or_run: Annotated[str, typer.Argument(help="study YAML, study name, or run id")],
    recheck: Annotated[bool, typer.Option("--recheck", help="recompute from the logged metrics with the "
                                          "health rules instead of reading health.json")] = False,
    preset: Annotated[str | None, typer.Option(help="with --recheck: apply this preset (default | strict | off) "
                                               "instead of each run's own health config")] = None,
    format: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    all_rules: Annotated[bool, typer.Option("--all-rules", help="a column for every rule, "
                                            "not only those that fired")] = False,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Runs × health rules: the step each rule first fired (from health.json, or --recheck)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    if format not in ("table", "json"):
        raise fail(f"--format must be table or json, got {format!r}")
    if preset is not None:
        from workbench.health import HEALTH_PRESETS  # deferred: pydantic

        if preset not in HEALTH_PRESETS:
            raise fail(f"unknown health preset {preset!r} (valid: {', '.join(sorted(HEALTH_PRESETS))})")
        recheck = True
    target = resolve_target(study_or_run, tracking_uri, settings=False)
    reader = target.reader
    if recheck:
        frames = reader.load(target.study, run_ids=[target.run_id] if target.run_id else None)
        runs = frames.runs
        reports: dict[str, Any] = recheck_reports(frames.history, runs, preset)
        source = f"recheck ({preset or 'each run’s own health config'})"
    else:
        _, runs = reader.load_runs(target.study)
        if target.run_id:
            runs = runs[runs["run_id"] == target.run_id].reset_index(drop=True)
        reports = reader.health_reports(runs)
        source = "health.json"
    if runs.empty:
        raise fail(f"study {target.study!r} has no runs in {redact_uri(target.tracking_uri)}")
    cells = health_cells(runs, reports)
    rules = list(pd.unique(cells["rule"]))
    if format == "json":
        out_runs = []
        for row in runs.to_dict("records"):
            c = cells[cells["run_id"] == row["run_id"]]
            rep = reports.get(row["run_id"]) or {}
            out_runs.append({
                "run_id": row["run_id"], "label": _label(row), "variant": row["variant"],
                "seed": None if pd.isna(row["seed"]) else int(row["seed"]), "status": row["status"],
                "health": rep.get("status", row.get("health")),
                "health_label": rep.get("label", rep.get("status", row.get("health"))),
                "reasons": rep.get("reasons", row.get("health_reasons")),
                "source": c["source"].iloc[0] if len(c) else "none",
                "rules": {r["rule"]: {"state": r["state"], "step": None if pd.isna(r["step"]) else int(r["step"]),
                                      "value": _jf(r["value"]), "threshold": _jf(r["threshold"]),
                                      "message": r["message"]}
                          for r in c.to_dict("records")},
            })
        print(json.dumps({"study": target.study, "tracking_uri": redact_uri(target.tracking_uri), "source": source,
                          "rules": rules, "runs": out_runs}, indent=2, default=str, allow_nan=False))
        return
    from rich.table import Table

    shown = rules if all_rules else [r for r in rules if cells.loc[cells["rule"] == r, "state"]
                                     .isin(["warn", "fail", "off", "unknown"]).any()]
    quiet = [r for r in rules if r not in shown]
    what = target.run_id[:8] if target.run_id else f"study {target.study}"
    table = Table(title=f"health of {what} ({source}): step at which each rule first fired",
                  caption="yellow: warn · red: fail · '·': did not fire · off: rule disabled · ?: no report or "
                          "not evaluated",
                  title_justify="left", caption_justify="left")
    table.add_column("run", no_wrap=True)
    table.add_column("status")
    table.add_column("health")
    for r in shown:
        table.add_column(r.replace("_", " "), justify="right")
    for row in runs.to_dict("records"):
        c = cells[cells["run_id"] == row["run_id"]].set_index("rule")
        rep = reports.get(row["run_id"]) or {}
        verdict = rep.get("label") or rep.get("status") or row.get("health") or "?"
        color = {"ok": "green", "warn": "yellow", "fail": "red"}.get(verdict, "dim")  # "ok (k of n ...)": dim
        table.add_row(_label(row), str(row["status"]).lower(), f"[{color}]{verdict}[/{color}]",
                      *(_styled(c.loc[r]) if r in c.index else "" for r in shown))
    console.print(table)
    if quiet:
        console.print(f"[dim]did not fire in any run: {', '.join(quiet)}[/dim]", highlight=False, soft_wrap=True)
    unevaluated = cells[(cells["state"] == "unknown") & cells["message"].str.startswith("not evaluated")]
    for (rule, message), group in unevaluated.groupby(["rule", "message"], sort=True):
        note(f"[yellow]{rule}: {message} ({len(group)} of {len(runs)} runs)[/yellow]")
    missing = [_label(r) for r in runs.to_dict("records") if not reports.get(r["run_id"])]
    if missing and not recheck:
        note(f"[yellow]no health.json for {len(missing)} run(s) ({', '.join(missing[:5])}"
             f"{', ...' if len(missing) > 5 else ''}): shown from tags; `--recheck` recomputes them[/yellow]")


def _jf(v: Any) -> Any:
    """A float for strict JSON (non-finite as "nan"/"inf"/"-inf", as in health.json)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.health.events import json_float  # deferred: pydantic

    return None if v is None or v is pd.NA else json_float(v)


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
