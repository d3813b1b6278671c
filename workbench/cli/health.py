"""``workbench health STUDY_OR_RUN``: runs × health rules with each rule's first-trigger step (the table's
data: :mod:`workbench.analysis.health_table`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from workbench.analysis.health_table import health_cells, recheck_reports, run_label
from workbench.cli.common import TrackingOpt, resolve_target
from workbench.cli.output import console, fail, note
from workbench.tracking.redact import redact_uri

__all__ = ["health"]


def _styled(cell: Mapping[str, Any]) -> str:
    import pandas as pd  # deferred: keeps `workbench --help` light

    state, step = cell["state"], cell["step"]
    s = "" if pd.isna(step) else str(int(step))
    return {
        "ok": "[dim]·[/dim]",
        "off": "[dim]off[/dim]",
        "unknown": "[dim]?[/dim]",
        "warn": f"[yellow]{s or 'warn'}[/yellow]",
        "fail": f"[bold red]{s or 'fail'}[/bold red]",
    }.get(state, state)


def health(
    study_or_run: Annotated[str, typer.Argument(help="study YAML, study name, or run id")],
    recheck: Annotated[
        bool,
        typer.Option(
            "--recheck", help="recompute from the logged metrics with the health rules instead of reading health.json"
        ),
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            help="with --recheck: apply this preset (default | strict | off) instead of each run's own health config"
        ),
    ] = None,
    format: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    all_rules: Annotated[
        bool, typer.Option("--all-rules", help="a column for every rule, not only those that fired")
    ] = False,
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
            out_runs.append(
                {
                    "run_id": row["run_id"],
                    "label": run_label(row),
                    "variant": row["variant"],
                    "seed": None if pd.isna(row["seed"]) else int(row["seed"]),
                    "status": row["status"],
                    "health": rep.get("status", row.get("health")),
                    "health_label": rep.get("label", rep.get("status", row.get("health"))),
                    "reasons": rep.get("reasons", row.get("health_reasons")),
                    "source": c["source"].iloc[0] if len(c) else "none",
                    "rules": {
                        r["rule"]: {
                            "state": r["state"],
                            "step": None if pd.isna(r["step"]) else int(r["step"]),
                            "value": _jf(r["value"]),
                            "threshold": _jf(r["threshold"]),
                            "message": r["message"],
                        }
                        for r in c.to_dict("records")
                    },
                }
            )
        print(
            json.dumps(
                {
                    "study": target.study,
                    "tracking_uri": redact_uri(target.tracking_uri),
                    "source": source,
                    "rules": rules,
                    "runs": out_runs,
                },
                indent=2,
                default=str,
                allow_nan=False,
            )
        )
        return
    from rich.table import Table

    shown = (
        rules
        if all_rules
        else [r for r in rules if cells.loc[cells["rule"] == r, "state"].isin(["warn", "fail", "off", "unknown"]).any()]
    )
    quiet = [r for r in rules if r not in shown]
    what = target.run_id[:8] if target.run_id else f"study {target.study}"
    table = Table(
        title=f"health of {what} ({source}): step at which each rule first fired",
        caption="yellow: warn · red: fail · '·': did not fire · off: rule disabled · ?: no report or not evaluated",
        title_justify="left",
        caption_justify="left",
    )
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
        table.add_row(
            run_label(row),
            str(row["status"]).lower(),
            f"[{color}]{verdict}[/{color}]",
            *(_styled(c.loc[r]) if r in c.index else "" for r in shown),
        )
    console.print(table)
    if quiet:
        console.print(f"[dim]did not fire in any run: {', '.join(quiet)}[/dim]", highlight=False, soft_wrap=True)
    unevaluated = cells[(cells["state"] == "unknown") & cells["message"].str.startswith("not evaluated")]
    for (rule, message), group in unevaluated.groupby(["rule", "message"], sort=True):
        note(f"[yellow]{rule}: {message} ({len(group)} of {len(runs)} runs)[/yellow]")
    missing = [run_label(r) for r in runs.to_dict("records") if not reports.get(r["run_id"])]
    if missing and not recheck:
        note(
            f"[yellow]no health.json for {len(missing)} run(s) ({', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}): shown from tags; `--recheck` recomputes them[/yellow]"
        )


def _jf(v: Any) -> Any:
    """A float for strict JSON (non-finite as "nan"/"inf"/"-inf", as in health.json)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.health.events import json_float  # deferred: pydantic

    return None if v is None or v is pd.NA else json_float(v)
