"""``workbench tune``: run, continue, report and export an Optuna search (the study's ``search:``).

Registered on the main app by :func:`register` (``workbench/cli/main.py``); heavy imports happen inside
the command so that ``workbench --help`` stays fast.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from workbench.cli.invocation import ui_base_url
from workbench.cli.output import console, err_console
from workbench.execution.interrupts import stopping_on
from workbench.tracking.store import resolve_tracking_uri

__all__ = ["register", "tune"]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def tune(
    study: Annotated[Path, typer.Argument(help="study YAML file with a search: section")],
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            help=("local worker processes, each running trials on the shared storage (1: in this process)"),
        ),
    ] = 1,
    storage: Annotated[
        str | None,
        typer.Option(
            help=(
                "Optuna storage shared by all workers: sqlite:///optuna.db (default, in the working directory), "
                "postgresql://user:pw@host/db for several machines, or a JournalStorage file path"
            )
        ),
    ] = None,
    report: Annotated[
        bool,
        typer.Option(
            "--report",
            help=(
                "run no trials: print the best trials and importances and write the HTML report (logged to the "
                "search's MLflow run)"
            ),
        ),
    ] = False,
    no_report: Annotated[
        bool,
        typer.Option(
            "--no-report", help=("do not write the HTML report at the end of the search (it is written by default)")
        ),
    ] = False,
    report_file: Annotated[
        Path | None, typer.Option(help=("where the HTML report is written (default: search-<study>.html)"))
    ] = None,
    export_best: Annotated[
        Path | None,
        typer.Option(
            "--export-best", help=("run no trials: write the best configuration as a study YAML variant to this file")
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a study path, e.g. rollout.steps=50 or search.n_trials=40"),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help=("MLflow tracking server all workers log to (default: $MLFLOW_TRACKING_URI, else the local store)")
        ),
    ] = None,
    heartbeat: Annotated[int, typer.Option(min=1, help="seconds between a running trial's heartbeats")] = 30,
    grace: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=("seconds without a heartbeat after which a trial's worker counts as lost (default 2 x heartbeat)"),
        ),
    ] = None,
    max_retries: Annotated[int, typer.Option(min=0, help="retries of a trial whose worker was lost")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads of an in-process worker")] = None,
    quiet: Annotated[bool, typer.Option(help="no per-trial lines")] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help=(
                "local (--workers processes here) or ray (trials as Ray tasks, --workers at a time; docs/distributed.md); "
                "default: the study's execution.executor, else local"
            ),
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help=(
                "with --executor ray: the cluster (auto, ray://host:10001; default $RAY_ADDRESS, else a cluster "
                "started here, else a new local one)"
            ),
        ),
    ] = None,
) -> None:
    """Optuna hyperparameter search over the study's run config: each trial is real runs (one per
    seed), pruned on its learning curve and on health failures; resumable and multi-worker.

    A study's search: section, e.g. (the schema: workbench/search/schema.py)

    search: {params: {learner.lr: {low: 1.0e-5, high: 1.0e-3, log: true}}, n_trials: 30}

    Several machines share one search when each runs this command with the same
    --storage postgresql://..."""
    from workbench.search.spec import parse_search  # deferred: pydantic
    from workbench.search.worker import SearchError, TuneOptions, default_storage, run_search  # deferred: pydantic
    from workbench.study import StudyError, apply_overrides, load_study  # deferred: pydantic

    if tracking_uri:
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri  # every worker logs there
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run at" per run
    try:
        study_obj = load_study(study)
        if set_:
            study_obj = apply_overrides(study_obj, set_)
        spec = parse_search(study_obj)
    except (StudyError, FileNotFoundError, ValueError) as e:
        raise _fail(str(e)) from None
    storage_url = storage or default_storage()
    chosen = executor or study_obj.execution.get("executor", "local")
    if chosen not in ("local", "ray"):
        raise _fail(f"--executor: expected local or ray, got {chosen!r}")
    if address is not None and chosen != "ray":
        raise _fail("--address needs --executor ray (or execution.executor: ray in the study)")
    if report and no_report:
        raise _fail("--report (report only, no trials) and --no-report contradict each other: give one")

    if report or export_best is not None:
        _report(spec, storage_url, report, report_file, export_best)
        return

    if threads and workers == 1:
        import torch

        torch.set_num_threads(threads)
    log = (
        (lambda line: None)
        if quiet
        else (
            lambda line: console.print(
                f"{time.strftime('%H:%M:%S')} {line}", markup=False, highlight=False, soft_wrap=True
            )
        )
    )
    options = TuneOptions(heartbeat_interval=heartbeat, grace_period=grace, max_retries=max_retries, log=log)
    budget = f"{spec.n_trials} trials" if spec.n_trials else ""
    if spec.timeout:
        budget += (" or " if budget else "") + f"{spec.timeout:.0f} s"
    console.print(
        f"search [bold]{spec.optuna_name}[/bold]: {budget}, {len(spec.seeds)} seed(s) per trial, "
        f"sampler {spec.sampler_name}, pruner {spec.pruner_name}; storage {_describe(storage_url)}",
        highlight=False,
        soft_wrap=True,
    )
    from workbench.execution.ray_executor import RayOptions, RayUnavailable  # deferred: torch, transformers
    from workbench.search.ray_trials import trials_on_ray  # deferred: torch, transformers

    with stopping_on(signal.SIGINT, signal.SIGTERM):  # Ctrl-C or `kill PID`, never lost (see `workbench run`)
        try:
            run_trials = (
                trials_on_ray(RayOptions.from_execution(study_obj.execution, address), workers)
                if chosen == "ray"
                else None
            )
            result = run_search(spec, storage_url, workers=workers, options=options, run_trials=run_trials)
        except (SearchError, FileNotFoundError, RayUnavailable) as e:
            raise _fail(str(e)) from None
        except KeyboardInterrupt:
            err_console.print(
                "[yellow]interrupted: running trials end FAIL (their runs KILLED) and are enqueued "
                "again; run tune again to continue the search[/yellow]",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
    from workbench.search.report import open_search  # deferred: pydantic

    ostudy = open_search(spec, storage_url)
    print_best(ostudy, spec)
    print_importances(ostudy, spec)
    mlflow_lost = result.stopped == "tracking"  # MLflow is unreachable: the report stays local, no views
    if not no_report:
        _write_report(ostudy, spec, report_file, log_to_mlflow=not mlflow_lost)
    if not mlflow_lost:
        _refresh_views(ostudy, spec)
    c = result.counts
    done = f"{c['done']}/{spec.n_trials}" if spec.n_trials else str(c["done"])
    console.print(
        f"search {spec.optuna_name}: {done} trials done ({c['COMPLETE']} complete, {c['PRUNED']} pruned), "
        f"{c['FAIL'] - c['over_budget']} failed or lost; stopped: {result.stopped}. "
        f"Reprint (no trials): workbench tune {study} --report",
        highlight=False,
        soft_wrap=True,
    )
    if result.stopped not in ("budget", "timeout"):
        raise typer.Exit(1)


def _describe(url: str) -> str:
    from workbench.execution.worker import describe_storage  # deferred: pydantic, torch, transformers

    return describe_storage(url)


def _report(spec, storage_url: str, report: bool, report_file: Path | None, export_best: Path | None) -> None:
    from workbench.search.report import export_best as export  # deferred: pydantic
    from workbench.search.report import open_search  # deferred: pydantic
    from workbench.search.worker import SearchError  # deferred: pydantic

    try:
        ostudy = open_search(spec, storage_url)
    except SearchError as e:
        raise _fail(str(e)) from None
    print_best(ostudy, spec)
    if report:
        print_importances(ostudy, spec)
        _write_report(ostudy, spec, report_file)
    if export_best is not None:
        try:
            names = export(ostudy, spec, export_best)
        except SearchError as e:
            raise _fail(str(e)) from None
        console.print(
            f"best configuration written to [bold]{export_best}[/bold] as variant(s) {', '.join(names)}",
            highlight=False,
            soft_wrap=True,
        )


def _write_report(ostudy, spec, report_file: Path | None, *, log_to_mlflow: bool = True) -> None:
    from workbench.search.report import write_report  # deferred: pydantic

    path = report_file or Path(f"search-{spec.study.name}.html")
    write_report(ostudy, spec, path, log_to_mlflow=log_to_mlflow)
    where = "also logged to the search's MLflow run" if log_to_mlflow else "not logged: MLflow is unreachable"
    console.print(f"report: [bold]{path}[/bold] ({where})", highlight=False, soft_wrap=True)


def _refresh_views(ostudy, spec) -> None:
    """The search's MLflow saved views, rewritten now that its runs logged their metrics; a
    failure is one line (the views are a convenience, the search is in Optuna)."""
    from workbench.search.history import refresh_views  # deferred: pydantic
    from workbench.search.worker import PARENT  # deferred: pydantic

    try:
        links = refresh_views(spec, ostudy.user_attrs.get(PARENT))
    except Exception as error:  # noqa: BLE001 - e.g. the tracking server went away
        console.print(
            f"could not rewrite the search's MLflow views: {type(error).__name__}: {error}",
            highlight=False,
            soft_wrap=True,
        )
        return
    base = ui_base_url(resolve_tracking_uri())  # a full URL, not a bare #/experiments/... fragment
    for link in links:
        console.print(f"MLflow view {link.name}: {link.url(base)}", highlight=False, soft_wrap=True)


def print_importances(ostudy, spec) -> None:
    """Optuna's parameter importances as a table, or one line saying why there are none."""
    from workbench.search.importance import param_importances  # deferred: pydantic

    importances, reason = param_importances(ostudy, spec)
    if not importances:
        console.print(f"parameter importances: not computed: {reason}", highlight=False, soft_wrap=True)
        return
    names = spec.objective_names()
    title = f"{spec.optuna_name}: parameter importances"
    table = Table(title=title, caption="over the complete trials; sums to 1", min_width=len(title))  # title unwrapped
    table.add_column("parameter", justify="left")
    for name in names:
        table.add_column(name, justify="right")
    for param, values in importances.items():
        table.add_row(param, *(f"{v:.3f}" for v in values))
    console.print(table)


def print_best(ostudy, spec, top: int = 5) -> None:
    from workbench.search.confirm import confirmation_lines, confirmed_arms  # deferred: pydantic
    from workbench.search.report import CONFIRMED_COLUMNS, best_trials, search_gain, trial_rows  # deferred: pydantic
    from workbench.search.worker import trial_counts  # deferred: pydantic

    arms = confirmed_arms(ostudy, spec)
    rows = trial_rows(best_trials(ostudy, spec, top), spec, arms)
    c = trial_counts(ostudy.get_trials(deepcopy=False))
    title = "Pareto-optimal trials" if spec.multi_objective else "best trials"
    if not rows:
        console.print(
            f"{spec.optuna_name}: no complete trial yet ({c['PRUNED']} pruned, {c['FAIL']} failed, "
            f"{c['RUNNING']} running)",
            highlight=False,
            soft_wrap=True,
        )
        return
    gain = search_gain(ostudy, spec, arms)
    if gain.found is False:
        title = "trials (none beat the start)"
    started = ["start", "gain"] if any("start" in row for row in rows) else []
    columns = [
        "trial",
        *spec.objective_names(),
        *started,
        *(CONFIRMED_COLUMNS if arms else ()),
        *spec.params,
        "learner steps",
    ]
    table = Table(title=f"{spec.optuna_name}: {title}")
    for col in columns:
        table.add_column(col, justify="left" if col == "trial" else "right")
    for row in rows:
        table.add_row(*("-" if row.get(col) is None else str(row.get(col)) for col in columns))
    console.print(table)
    for line in confirmation_lines(arms, spec):
        console.print(line, highlight=False, soft_wrap=True)
    if gain.line:
        console.print(gain.line, highlight=False, soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``tune`` to ``app``."""
    app.command("tune")(tune)
