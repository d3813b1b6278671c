"""The ``workbench`` command line: plan, run, metrics, ui.

Bad input (missing file, malformed YAML, unknown key, missing model path) prints one line
naming the problem and exits with code 2, before anything is written to MLflow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from workbench.analysis.selection import filter_specs
from workbench.cli.console import print_table
from workbench.cli.help_format import HelpGroup
from workbench.cli.invocation import workbench_command
from workbench.cli.output import console, err_console, fail
from workbench.cli.seed_plan import print_seed_plan
from workbench.errors import DEBUG_ENV, AnalysisError, show_debug_logs
from workbench.execution.interrupts import stopping_on
from workbench.execution.lock import StudyBusy
from workbench.metrics import CATALOGUE
from workbench.metrics.catalogue import markdown_table, range_text
from workbench.metrics.final import FINAL_EVAL_DEFINITION
from workbench.progress import PROGRESS_EVERY_ENV
from workbench.tracking.check import SERVER_SCHEMES, check_store, store_scheme
from workbench.tracking.redact import guard_output, redact_text, redact_uri, register_uri
from workbench.tracking.store import resolve_tracking_uri, sqlite_file
from workbench.tracking.study_runs import finished_elsewhere, run_statuses
from workbench.tracking.writer import DEFAULT_OUTAGE_DEADLINE_S, TrackingOutage, bound_mlflow_http_retries
from workbench.train.rank_env import is_follower, multi_rank

if TYPE_CHECKING:
    from workbench.analysis.seed_plan import MetricSeedPlan

# HelpGroup: unhandled errors as one line (GuardedGroup), plain help that wraps at any width (help_format.py)
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    cls=HelpGroup,
    rich_markup_mode=None,
    help="rl-workbench: ablate GRPO-family RL changes with tracked, comparable runs.",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("rl-workbench")
        except PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
            number = "unknown (not installed)"
        print(f"rl-workbench {number}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: Annotated[
        bool, typer.Option("--debug", help="show the full traceback of an unexpected error (also: WORKBENCH_DEBUG=1)")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"  # inherited by the processes a study starts
    show_debug_logs()  # --debug or WORKBENCH_DEBUG=1: the workbench's logs (store tracebacks too) on stderr


StudyArg = Annotated[Path, typer.Argument(help="study YAML file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a config path, e.g. learner.lr=3e-4")]
OnlyOpt = Annotated[str | None, typer.Option("--only", help="filter runs, e.g. variant=dapo,seed=0")]


ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="local (this machine: --parallel) or ray (each run a Ray task; docs/distributed.md); "
        "default: the study's execution.executor, else local",
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="with --executor ray: the cluster (auto, ray://host:10001; default $RAY_ADDRESS, "
        "else a cluster started here, else a new local one)",
    ),
]


def ray_options(study_obj, executor: str | None, address: str | None):
    """The Ray settings when the runs execute on Ray (``--executor``, else ``execution.executor``), else None."""
    from workbench.execution.ray_executor import RayOptions  # deferred: pydantic, torch, transformers

    chosen = executor or study_obj.execution.get("executor", "local")
    if chosen not in ("local", "ray"):
        raise fail(f"--executor: expected local or ray, got {chosen!r}")
    if chosen == "local":
        if address is not None:
            raise fail("--address needs --executor ray (or execution.executor: ray in the study)")
        return None
    return RayOptions.from_execution(study_obj.execution, address)


def load_specs(study_path: Path, overrides: list[str] | None, only: str | None):
    """Study -> filtered RunSpecs, or a one-line error and exit 2."""
    from workbench.study import StudyError, apply_overrides, expand, load_study  # deferred: pydantic

    try:
        study = load_study(study_path)
        if overrides:
            study = apply_overrides(study, overrides)
        specs = expand(study)
    except (StudyError, FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from None
    if only:
        try:
            specs = filter_specs(specs, only)
        except AnalysisError as e:
            raise fail(str(e)) from None
        if not specs:
            raise fail(f"--only {only!r} matches no run of {study_path}")
    return study, specs


def warn_inert_knobs(specs) -> None:
    """Config lint (workbench/analysis/lint.py): one stderr line per knob that cannot act, before anything runs."""
    from workbench.analysis.lint import lint_specs  # deferred: pydantic, torch

    for line in lint_specs(specs):
        print(line, file=sys.stderr)  # plain print: one line however long, no markup


@app.command()
def plan(
    study: StudyArg,
    set_: SetOpt = None,
    only: OnlyOpt = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Show the runs a study expands into, with their status in MLflow."""
    study_obj, specs = load_specs(study, set_, only)  # first: a refused study exits before torch is imported
    from workbench.execution.plan import plan_rows  # deferred: pydantic

    warn_inert_knobs(specs)
    statuses = _known_statuses(study_obj, specs)
    rows = plan_rows(specs, statuses)
    for row, spec in zip(rows, specs, strict=True):
        r = spec.config.rollout
        row["completions"] = r.steps * r.prompts_per_step * r.group_size
        row["max_tokens"] = row["completions"] * spec.config.sampler.max_new_tokens
    seeds = _seed_plan(study, study_obj, specs)
    if format == "json":
        print(
            json.dumps(
                {"study": study_obj.name, "runs": rows, "seed_plan": [p.as_dict() for p in seeds]},
                indent=2,
                default=str,
            )
        )
        return
    table = Table(title=f"{study_obj.name}: {len(rows)} runs")
    for col in ["label", "seed", "run_key", "status", "completions", "max_tokens"]:
        table.add_column(col)
    for row in rows:
        table.add_row(*(str(row[c]) for c in ["label", "seed", "run_key", "status", "completions", "max_tokens"]))
    console.print(table)
    print_seed_plan(seeds)
    _note_cold_starts(study_obj)
    _note_search_problems(study_obj)
    _note_paths(specs)


def _seed_plan(study: str, study_obj, specs) -> list[MetricSeedPlan]:
    """Seeds per arm for 80% power at the study's compare.sesoi (workbench/analysis/seed_plan.py)."""
    from workbench.analysis.seed_plan import seed_plan  # deferred: numpy, pandas (the study reader)
    from workbench.execution.plan import study_experiment, study_tracking_uri  # deferred: pydantic

    try:
        plans = seed_plan(study_obj, specs, study_tracking_uri(specs), study_experiment(study_obj, specs), where=study)
    except AnalysisError as e:
        raise fail(str(e)) from None
    return plans


def _note_paths(specs) -> None:
    """Model and data files the runs name that are missing here, or that `run` would refuse."""
    from workbench.cli.plan_paths import path_notes  # deferred: transformers

    for note in path_notes(specs):
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def _note_cold_starts(study_obj) -> None:
    """With replicate.cold_start > 1 the unit compared is the checkpoint: the seed plan above is not its plan."""
    k = int(study_obj.replicate.get("cold_start", 1))
    if k > 1:
        console.print(
            f"[yellow]note:[/] replicate.cold_start = {k}: compare tests over the {k} checkpoints of each "
            f"arm (each the mean of its {len(study_obj.seeds)} seeds), not over seeds; the seeds planned "
            "above assume seed noise only (compare.noise_sd), and more seeds do not add checkpoints "
            "(docs/reports.md, replication at the level of the treatment)",
            highlight=False,
            soft_wrap=True,
        )


def _note_search_problems(study_obj) -> None:
    """`run` ignores the search: section; say early what `workbench tune` will reject in it."""
    from workbench.search.spec import parse_search  # deferred: pydantic
    from workbench.study import StudyError  # deferred: pydantic

    if study_obj.search is None:
        return
    try:
        parse_search(study_obj)
    except StudyError as error:
        console.print(
            f"[yellow]note: `workbench tune` will reject this study's search: section:[/]\n{error}", highlight=False
        )


def _known_statuses(study_obj, specs) -> dict[str, str]:
    """Statuses from MLflow if the store already exists; never creates a store just to look."""
    from workbench.execution.plan import study_experiment, study_tracking_uri  # deferred: pydantic

    uri = study_tracking_uri(specs)
    if uri.startswith("sqlite:///") and not sqlite_file(uri).exists():
        return {}
    from mlflow import MlflowClient  # deferred: only a store that exists is read

    # a corrupt file, wrong password: one line; an unreachable server: retried until run's deadline, announced
    check_store(
        uri, create=False, deadline_s=specs[0].config.tracking.outage_deadline_s if specs else DEFAULT_OUTAGE_DEADLINE_S
    )
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study_experiment(study_obj, specs))
    statuses = run_statuses(client, experiment.experiment_id) if experiment else {}
    # what `run` would copy instead of computing (workbench/execution/reuse.py): a FINISHED run of the key elsewhere
    from workbench.execution.reuse import pick_source  # deferred: pandas, the export's writer

    missing = {s.run_key: s.label for s in specs if statuses.get(s.run_key) != "FINISHED"}
    for key, runs in finished_elsewhere(client, experiment.experiment_id if experiment else "", missing).items():
        source, _ = pick_source(client, runs, missing[key])  # the one `run` would take, checked as `run` checks it
        if source is not None:
            statuses[key] = f"reuse ({source.study})"
    return statuses


def _say(line: str) -> None:
    """A line of a sequential study's design and looks, as it comes (no markup)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def run(
    study: StudyArg,
    set_: SetOpt = None,
    only: OnlyOpt = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel",
            "-j",
            min=1,
            help="runs at a time, each in its own process (default: the study's execution.parallel, else 1)",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="run seeds in rounds (looks at 3, 5, 7, 10 seeds, or compare.sequential.looks) "
            "until every comparison is decided by a group-sequential design "
            "(docs/reports.md)",
        ),
    ] = False,
    max_seeds: Annotated[
        int | None,
        typer.Option("--max-seeds", min=2, help="with --until-decided: the last look (looks above it are dropped)"),
    ] = None,
    progress_every: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="off a terminal (nohup, CI): seconds between plain progress lines "
            "(default $WORKBENCH_PROGRESS_EVERY or 30; evals always print)",
        ),
    ] = None,
    executor: ExecutorOpt = None,
    address: AddressOpt = None,
    export_to: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="write the study's export (`workbench export`, docs/export.md) to this directory "
            "after each run ends and at the end",
        ),
    ] = None,
    export_rollouts: Annotated[
        bool,
        typer.Option(
            "--export-rollouts/--no-export-rollouts",
            help="with --export: keep the runs' stored completions in it (as `workbench export "
            "--rollouts/--no-rollouts`; leaving them out keeps an export small enough to commit)",
        ),
    ] = True,
    no_reuse: Annotated[
        bool,
        typer.Option(
            "--no-reuse",
            help="compute every run, even one whose run_key finished in another study of this "
            "store (by default such a run is copied into this study, not computed again; "
            "docs/running.md: Shared runs are computed once)",
        ),
    ] = False,
) -> None:
    """Execute a study's runs (skipping those already finished) and print a summary."""
    # the study first: a bad one fails before torch is imported (seconds and ~250 MB; every rank checks it)
    study_obj, specs = load_specs(study, set_, only)
    from workbench.execution.run import PreflightError  # deferred: pydantic, torch, transformers
    from workbench.execution.study import run_study  # deferred: pydantic, torch, transformers
    from workbench.train import ranks  # deferred: pydantic, torch

    if progress_every is not None:
        os.environ[PROGRESS_EVERY_ENV] = str(progress_every)

    if is_follower():  # several DeepSpeed ranks: rank 0 runs the study, this rank mirrors its learner
        from workbench.train.follower import follow  # deferred: pydantic, torch, transformers

        raise typer.Exit(follow())
    warn_inert_knobs(specs)  # rank 0 (or the only process) lints; followers mirror it
    check_study_store(specs)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # a server prints no links per run
    if parallel is None:
        parallel = int(study_obj.execution.get("parallel", 1))
    ray = ray_options(study_obj, executor, address)
    from workbench.execution.ray_executor import RayUnavailable  # deferred: pydantic, torch, transformers
    from workbench.execution.threads import oversubscription_warning  # deferred: keeps cli.main light

    if (busy := oversubscription_warning()) is not None and not quiet:
        err_console.print(f"[yellow]{busy}[/yellow]", highlight=False, soft_wrap=True)
    from workbench.viz.spec import SpecError  # deferred: plotly, pydantic, scipy

    if max_seeds is not None and not until_decided:
        raise fail("--max-seeds needs --until-decided")
    if export_to is not None and export_to.exists() and not export_to.is_dir():
        raise fail(f"--export {export_to}: not a directory")
    if export_to is None and not export_rollouts:
        raise fail("--no-export-rollouts needs --export DIR")
    if until_decided and only and any(p.partition("=")[0].strip() == "seed" for p in only.split(",")):
        raise fail("--until-decided chooses the seeds itself: drop seed= from --only")
    try:
        # Ctrl-C and `kill PID` stop the same way: runs and the study KILLED, lock released. SIGINT too, not
        # Python's own handler: a Ctrl-C whose KeyboardInterrupt lands in a finalizer is otherwise lost and an
        # in-process study trains on (seen: a study given SIGINT ran 3 more runs to FINISHED).
        with stopping_on(signal.SIGINT, signal.SIGTERM):
            if until_decided:
                from workbench.analysis.sequential import run_until_decided  # deferred: scipy, mlflow

                outcomes = run_until_decided(
                    study_obj,
                    max_seeds=max_seeds,
                    progress=not quiet,
                    say=_say,
                    select=(lambda s: filter_specs(s, only)) if only else None,
                    parallel=1 if multi_rank() else parallel,
                    ray=ray,
                    export_to=export_to,
                    export_rollouts=export_rollouts,
                    reuse=not no_reuse,
                )
            else:
                outcomes = run_study(
                    study_obj,
                    specs,
                    progress=not quiet,
                    parallel=1 if multi_rank() else parallel,
                    ray=ray,
                    export_to=export_to,
                    export_rollouts=export_rollouts,
                    reuse=not no_reuse,
                )
    except (AnalysisError, PreflightError, FileNotFoundError, ImportError, StudyBusy, SpecError, RayUnavailable) as e:
        raise fail(str(e)) from None
    except TrackingOutage as e:  # unreachable while the study was being opened: nothing ran, so a usage-level
        # exit 2 like every other command's unreachable store; MLflow lost mid-study FAILs runs (exit 1 below)
        raise fail(f"{e}; no run was started") from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: unfinished runs are marked KILLED; run again to resume[/yellow]")
        raise typer.Exit(130) from None
    finally:
        ranks.stop_followers()  # several ranks: followers return, however the study ended
    print_summary(study_obj.name, outcomes, _study_store(specs))
    if any(o.status == "FAILED" for o in outcomes):
        raise typer.Exit(1)


@app.command()
def worker(
    study: StudyArg,
    storage: Annotated[
        str,
        typer.Option(
            help="shared Optuna storage: postgresql://user:pw@host/db, sqlite:///optuna.db, or a journal file path"
        ),
    ],
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="MLflow tracking server all workers log to (default: $MLFLOW_TRACKING_URI, else the local store)"
        ),
    ] = None,
    set_: SetOpt = None,
    heartbeat: Annotated[int, typer.Option(min=1, help="seconds between a running trial's heartbeats")] = 30,
    grace: Annotated[
        int | None,
        typer.Option(
            min=1, help="seconds without a heartbeat after which a run's worker counts as lost (default 2 x heartbeat)"
        ),
    ] = None,
    max_retries: Annotated[int, typer.Option(min=0, help="re-runs of a run whose worker was lost")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads (default: torch's choice)")] = None,
    quiet: Annotated[bool, typer.Option(help="no per-run lines")] = False,
) -> None:
    """Execute a study together with any number of other workers, on any machines (see docs/distributed.md)."""
    from workbench.execution.run import PreflightError  # deferred: pydantic, torch, transformers
    from workbench.execution.worker import (  # deferred: pydantic, torch, transformers
        WorkerError,
        WorkerOptions,
        run_worker,
    )
    from workbench.viz.spec import SpecError  # deferred: plotly, pydantic, scipy

    if tracking_uri:
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri  # every run of this worker logs there
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run at" per run
    study_obj, specs = load_specs(study, set_, None)
    warn_inert_knobs(specs)
    check_study_store(specs)
    if "://" in storage:  # the shared Optuna storage (a journal file path is checked by the worker)
        check_store(
            storage,
            create=True,
            deadline_s=specs[0].config.tracking.outage_deadline_s if specs else DEFAULT_OUTAGE_DEADLINE_S,
            what="Optuna storage",
        )
    if threads:
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
    options = WorkerOptions(heartbeat_interval=heartbeat, grace_period=grace, max_retries=max_retries, log=log)
    with stopping_on(signal.SIGINT, signal.SIGTERM):  # Ctrl-C or `kill PID`: run KILLED, never lost (see `run`)
        try:
            report = run_worker(study_obj, specs, storage, options)
        except (WorkerError, PreflightError, FileNotFoundError, ImportError, StudyBusy, SpecError) as e:
            raise fail(str(e)) from None
        except KeyboardInterrupt:
            err_console.print(
                "[yellow]worker stopped: its run is KILLED and enqueued again for the other workers[/yellow]"
            )
            raise typer.Exit(130) from None
    if report.outcomes:
        print_summary(study_obj.name, report.outcomes, _study_store(specs))
    console.print(
        f"study {report.study}: {report.finished}/{report.total} runs finished; "
        f"this worker ({report.worker}) ran {len(report.outcomes)}",
        highlight=False,
    )
    if report.tracking_lost:  # more runs would only wait out the deadline again
        from rich.markup import escape

        err_console.print(
            f"[red]worker stopped: MLflow unreachable past tracking.outage_deadline_s[/red] "
            f"({escape(report.tracking_lost[:300])}); its run is enqueued again: start a worker "
            f"once MLflow is back",
            highlight=False,
        )
    if report.failed:
        err_console.print(f"[red]not finished:[/red] {', '.join(report.failed)}", highlight=False)
        raise typer.Exit(1)


def check_study_store(specs) -> None:
    """Before a study's lock or run: a path where no store can be created, a corrupt file, an
    unsupported scheme, a wrong database password are one line and exit 2 (workbench/tracking/check.py).
    An MLflow server is not probed here: `run` waits out its outage with its own announced retries."""
    uri = _study_store(specs)
    if store_scheme(uri) not in SERVER_SCHEMES:
        check_store(
            uri,
            create=True,
            deadline_s=specs[0].config.tracking.outage_deadline_s if specs else DEFAULT_OUTAGE_DEADLINE_S,
        )


def _study_store(specs) -> str:
    """The MLflow store a study's runs log to: $MLFLOW_TRACKING_URI, else its tracking.uri, else ./mlflow.db."""

    return resolve_tracking_uri(specs[0].config.tracking.uri if specs else None)


#: What "eval final" is, under every table that shows it (the one definition: workbench.metrics.final).
FINAL_CAPTION = (
    f"eval final: {FINAL_EVAL_DEFINITION} of eval/accuracy, as `workbench compare` computes "
    "final_eval_accuracy; Δ = final − first eval"
)


def print_summary(name: str, outcomes, uri: str) -> None:
    from rich.markup import escape

    table = Table(title=f"study {name}", caption=FINAL_CAPTION, caption_justify="left")
    for col in ["run", "status", "steps", "eval first", "eval final", "Δ", "health"]:
        # a label folds rather than ends in "…": off a terminal (a log file) rich lays out 80 columns
        table.add_column(
            col,
            justify="right" if col.startswith(("eval", "Δ", "steps")) else "left",
            overflow="fold" if col == "run" else "ellipsis",
        )
    for o in outcomes:
        delta = o.eval_final - o.eval_first
        fmt = lambda v: "-" if v != v else f"{v:.3f}"  # noqa: E731 - NaN prints as "-"
        table.add_row(
            o.label,
            o.status,
            str(o.steps or "-"),
            fmt(o.eval_first),
            fmt(o.eval_final),
            "-" if delta != delta else f"{delta:+.3f}",
            o.health,
        )
        if o.error:
            table.add_row("", f"[red]{o.error[:120]}", "", "", "", "", "")
        if o.reused_from:  # copied, not computed: say from where
            table.add_row("", f"[dim]from {escape(o.reused_from)}", "", "", "", "", "")
    console.print(table)
    _print_seed_matrix(outcomes)
    shown = escape(redact_uri(uri))  # never the store's password
    where = f"[bold]{escape(workbench_command())} ui[/bold]" if not uri.startswith("http") else f"[bold]{shown}[/bold]"
    console.print(f"Tracked in MLflow at [bold]{shown}[/bold]. Open the UI with: {where}", soft_wrap=True)


def _print_seed_matrix(outcomes) -> None:
    """With several seeds: final eval accuracy and health per variant/grid point and seed, with each
    arm's mean. The longer of the two runs down the rows (12 seeds of 3 arms would not fit as columns)."""
    from workbench.execution.study import seed_matrix  # deferred: pydantic, torch, transformers

    seeds, rows = seed_matrix(outcomes)
    if len(seeds) < 2:
        return

    def cell(o) -> str:
        if o is None:
            return ""
        return f"{o.eval_final:.3f} {o.health}" if o.eval_final == o.eval_final else o.status  # NaN: its status

    mean_text = lambda mean: "-" if mean != mean else f"{mean:.3f}"  # noqa: E731 - a one-line helper, named where it is used
    table = Table(title="final eval/accuracy (health) by seed", caption=FINAL_CAPTION, caption_justify="left")
    if len(seeds) <= len(rows):  # one row per arm, one column per seed
        table.add_column("run", overflow="fold")
        for seed in seeds:
            table.add_column(f"seed={seed}", justify="right")
        table.add_column("mean", justify="right")
        for group, by_seed, mean in rows:
            table.add_row(group, *(cell(by_seed.get(seed)) for seed in seeds), mean_text(mean))
    else:  # one row per seed, one column per arm, the means last
        table.add_column("seed", justify="right")
        for group, _, _ in rows:
            table.add_column(group, justify="right", overflow="fold")
        for seed in seeds:
            table.add_row(str(seed), *(cell(by_seed.get(seed)) for _, by_seed, _ in rows))
        table.add_section()
        table.add_row("mean", *(mean_text(mean) for _, _, mean in rows))
    console.print(table)


@app.command()
def metrics(
    format: Annotated[
        str, typer.Option(help="auto (table on a terminal, plain off one) | table | plain (tab-separated) | markdown")
    ] = "auto",
) -> None:
    """The canonical metric catalogue: definition, unit, healthy direction, range of values."""

    if format == "markdown":
        print(markdown_table(), end="")
        return
    if format not in ("auto", "table", "plain"):
        raise fail(f"--format: expected auto, table, plain or markdown, got {format!r}")
    rows = [(m.name, m.meaning, m.unit, m.healthy, range_text(m.bounds)) for m in CATALOGUE]
    plain = {"auto": None, "table": False}.get(format, True)  # auto: tab-separated when stdout is not a terminal
    print_table(
        ["name", "meaning", "unit", "healthy", "range"],
        rows,
        wrap=["meaning"],
        title="canonical metrics (MLflow step = RL step)",
        plain=plain,
    )


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
UI_READY_TIMEOUT_S = 180.0  # mlflow server answers /health in ~10 s idle; minutes on a loaded machine


@app.command()
def ui(
    study: Annotated[
        str | None,
        typer.Argument(
            help="study YAML file or name: list only its views and reports (default: every study in the store)"
        ),
    ] = None,
    port: Annotated[int, typer.Option(metavar="PORT", help="port to serve on (1 to 65535)")] = 5000,
    host: Annotated[
        str,
        typer.Option(
            metavar="HOST",
            help="address to listen on; anything but 127.0.0.1 lets other machines in, and MLflow "
            "has no authentication unless configured",
        ),
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="open the first link in a browser")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", help="show the server's own log and access log (default: kept in a file, shown if it fails)"
        ),
    ] = False,
    tracking_uri: Annotated[
        str | None, typer.Option(help="default: the study's tracking.uri, $MLFLOW_TRACKING_URI, ./mlflow.db")
    ] = None,
) -> None:
    """Serve the study's MLflow UI and print its links, the first line being the URL of the study's
    training-health view (curves grouped by variant).

    Then each study's saved views, its runs table and its HTML reports and dashboards (link into
    the UI, file on disk). The banner is printed once the server answers; Ctrl-C stops it."""
    from rich.markup import escape

    if not 1 <= port <= 65535:  # before anything is read or created
        raise fail(f"--port: expected a port from 1 to 65535, got {port}")
    problem = _listen_problem(host, port)
    if problem:
        raise fail(problem)
    uri, studies = _ui_studies(study, tracking_uri)
    if not uri.startswith(("sqlite:", "postgresql", "mysql")):
        raise fail(f"`workbench ui` serves a database store; {redact_uri(uri)} is already a server")
    exposed = host not in LOOPBACK_HOSTS
    url_host = _url_host(host)
    base = f"http://{url_host}:{port}"
    # the store URI (and its password) goes through the environment, not argv: `ps` shows argv to everyone
    env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_BACKEND_STORE_URI": uri}
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port), "--workers", "1"]
    if exposed:  # MLflow refuses Host headers outside localhost and private IPs: allow the one we print
        cmd += [
            "--allowed-hosts",
            ",".join(
                dict.fromkeys(
                    [url_host, f"{url_host}:{port}", "localhost", f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}"]
                )
            ),
        ]
    if not verbose:
        cmd += ["--uvicorn-opts", "--no-access-log"]  # one line per request otherwise (hundreds per page)
    log_path = None if verbose else _server_log_path(port)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill PID` must not orphan the server
    proc, stopped, relay = None, False, None
    register_uri(uri)  # the relay below masks its password in any spelling the server might print
    sink = sys.stderr if verbose else open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - the log file stays open for the server's life; closed in finally
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,  # own group
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        relay = _relay_redacted(proc.stdout, sink)
        _wait_until_serving(
            proc, f"http://{'127.0.0.1' if host in ('0.0.0.0', '', '::') else url_host}:{port}", log_path, relay
        )
        first = _first_link(base, studies)
        line = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731 - a one-line helper, named where it is used
        # `| head -1` reads the first line and leaves: later writes to the closed pipe must not stop the server
        _to_stdout(lambda: line(first))  # alone on the first line: `workbench ui | head -1`, a terminal's click
        _to_stdout(
            lambda: console.print(
                f"MLflow UI at [bold]{escape(base)}[/bold] (store {escape(redact_uri(uri))}"
                + (f"; server log {escape(str(log_path))}" if log_path else "")
                + "; Ctrl-C stops it)",
                highlight=False,
                soft_wrap=True,
            )
        )
        if exposed:
            err_console.print(
                f"[yellow]warning:[/yellow] listening on {escape(host)}: anyone who can reach this "
                "machine can read and change the store (MLflow has no authentication unless "
                "configured: `mlflow server --app-name basic-auth`)",
                highlight=False,
                soft_wrap=True,
            )
        for s in studies:
            _to_stdout(lambda s=s: _print_study_links(base, s))
        if open_browser:
            _open_browser(first)
        while proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        stopped = True
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        if relay is not None:
            relay.join(timeout=5)  # the server's last lines, before its log is read or removed
        if sink is not sys.stderr:
            sink.close()
    if stopped and log_path is not None:
        log_path.unlink(missing_ok=True)  # kept only when the server failed
    if not stopped:
        raise fail(
            f"mlflow server stopped by itself (exit code {proc.returncode})"
            + (f"; its log: {_log_tail(log_path)}" if log_path else "; see its messages above"),
            code=1,
        )


def _to_stdout(write: Callable[[], None]) -> None:
    """Run ``write`` (prints to stdout) and flush; when the reader has closed the pipe (`| head -1`),
    send stdout to /dev/null instead of failing, so a long-running command keeps running (#53)."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
    except SystemExit as exit_:  # rich's Console.on_broken_pipe: stdout already at /dev/null, then exit 1
        if not isinstance(exit_.__context__, BrokenPipeError):
            raise


def _stdout_to_devnull() -> None:
    """Point file descriptor 1 at /dev/null: the reader of our stdout is gone (a closed pipe), and
    every later write, the interpreter's last flush included, would raise BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _open_browser(url: str) -> None:
    """A graphical browser only: on a machine without a display, webbrowser would start a console
    browser (lynx, w3m) in this terminal, over the server's links."""
    import webbrowser

    graphical = sys.platform in ("darwin", "win32") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if not graphical or not webbrowser.open(url):
        err_console.print("--open: no graphical browser here; open the first link above in yours", highlight=False)


def _listen_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port`` (taken, or no such address), checked by
    binding it as the server will (SO_REUSEADDR, as uvicorn does); None when it can."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"--host {host!r}: not an address of this machine ({e.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use (another `workbench ui` or mlflow server?): "
                    f"stop it or choose another with --port"
                )
            return f"--host {host} --port {port}: cannot listen there ({e.strerror})"
    return None


def _url_host(host: str) -> str:
    """The host the printed links name: the one listened on, or this machine's address for a wildcard."""
    import socket

    if host in ("0.0.0.0", "", "::"):
        try:  # the address of the interface with the default route (a UDP connect sends nothing)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect(("10.255.255.255", 1))
                return probe.getsockname()[0]
        except OSError:
            return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def _server_log_path(port: int) -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / f"workbench-ui-{port}-{os.getpid()}.log"


def _log_tail(path: Path | None, lines: int = 5) -> str:
    if path is None or not path.exists():
        return "(empty)"
    tail = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()][-lines:]
    return " | ".join(tail)[-800:] or "(empty)"


def _relay_redacted(source, sink) -> threading.Thread:
    """Copy the server's output to ``sink`` (its log file, or stderr with --verbose) line by line through the
    redaction (tracking/redact.py): the store URI it gets in its environment, echoed in an error or a
    traceback, never reaches the terminal or the file."""

    def pump() -> None:
        for line in source:
            sink.write(redact_text(line))
            sink.flush()

    thread = threading.Thread(target=pump, name="mlflow-server-output", daemon=True)
    thread.start()
    return thread


def _wait_until_serving(
    proc: subprocess.Popen, local_base: str, log_path: Path | None, relay: threading.Thread | None = None
) -> None:
    """Return once ``GET /health`` answers 200; a server that exits first (or never answers) is an error."""
    import urllib.request
    from contextlib import nullcontext

    deadline = time.monotonic() + UI_READY_TIMEOUT_S
    with err_console.status("starting the MLflow server...") if err_console.is_terminal else nullcontext():
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                if relay is not None:
                    relay.join(timeout=5)  # its last lines are the reason: in the log before it is read
                raise fail(
                    f"mlflow server exited with code {proc.returncode} before serving"
                    + (f"; its log: {_log_tail(log_path)}" if log_path else ""),
                    code=1,
                )
            try:
                with urllib.request.urlopen(f"{local_base}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGTERM)
    raise fail(
        f"mlflow server not answering {local_base}/health after {UI_READY_TIMEOUT_S:.0f} s"
        + (f"; its log: {_log_tail(log_path)}" if log_path else ""),
        code=1,
    )


def _first_link(base: str, studies: list[dict]) -> str:
    """The first study's first saved view (training health, grouped by variant), else its runs
    table, else the UI's home page."""
    for s in studies:
        if s.get("views"):
            return s["views"][0].url(base)
    if studies:
        return _runs_link(base, studies[0]["experiment_id"])
    return base + "/"


def _runs_link(base: str, experiment_id: str) -> str:
    # workflowType: the model-training layout (MLflow 3 opens an experiment in its GenAI layout unless
    # the URL or the browser's last choice says otherwise); /runs: the runs table, not the traces overview
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _ui_studies(study: str | None, tracking_uri: str | None) -> tuple[str, list[dict]]:
    """The store to serve, and for each study in it with a parent run: ``{study, experiment_id,
    run_id, html: [(artifact path, local file or None)]}``. Read before the server starts, read-only."""

    if study is not None:
        from workbench.cli.common import resolve_target  # deferred: pydantic

        target = resolve_target(study, tracking_uri, allow_run=False, settings=False, cache_dir=False)
        uri, names, reader = target.tracking_uri, [target.study], target.reader
    else:
        uri = tracking_uri or resolve_tracking_uri()
        if not uri.startswith(("sqlite:", "postgresql", "mysql")):
            return uri, []
        from workbench.results.reader import StudyNotFound, StudyReader  # deferred: pandas

        try:
            check_store(uri, create=False)
            reader = StudyReader(uri, cache_dir=False)
        except StudyNotFound:  # no store yet: the server creates an empty one
            return uri, []
        names = sorted(reader.backend.experiment_names())
    studies = []
    for name in names:
        run_id = reader.parent_run_id(name)
        if run_id is None:  # not a workbench study (e.g. MLflow's "Default" experiment)
            continue
        info = reader.run_info(run_id)
        studies.append(
            {
                "study": name,
                "experiment_id": info["experiment_id"],
                "run_id": run_id,
                "views": _saved_views(uri, info["experiment_id"]),
                "html": _html_artifacts(uri, run_id, info["artifact_uri"]),
            }
        )
    return uri, studies


def _saved_views(uri: str, experiment_id: str) -> list:
    """The experiment's MLflow saved views (:mod:`workbench.viz.mlflow_views`), ours first."""
    from mlflow import MlflowClient

    from workbench.viz.mlflow_views import list_views  # deferred: plotly, pydantic

    return list_views(experiment_id, MlflowClient(uri).get_experiment(experiment_id).tags)


def _html_artifacts(uri: str, run_id: str, artifact_uri: str | None) -> list[tuple[str, str | None]] | str:
    """``(artifact path, local file)`` of every ``.html`` a run logged (reports/, dashboards/);
    the local file is None for a remote artifact store. A string says why they could not be listed."""
    from urllib.parse import unquote, urlparse

    if artifact_uri and artifact_uri.startswith("file:"):
        root = Path(unquote(urlparse(artifact_uri).path))
        return sorted((p.relative_to(root).as_posix(), str(p)) for p in root.rglob("*.html"))
    from mlflow import MlflowClient

    found, todo = [], [None]
    try:
        client = MlflowClient(uri)
        while todo:
            for a in client.list_artifacts(run_id, todo.pop()):
                if a.is_dir:
                    todo.append(a.path)
                elif a.path.endswith(".html"):
                    found.append((a.path, None))
    except Exception as e:  # noqa: BLE001 - a listing is a convenience; the server still starts
        return f"could not list the artifacts of run {run_id}: {str(e).splitlines()[0][:200]}"
    return sorted(found)


def _print_study_links(base: str, s: dict) -> None:
    def line(text: str) -> None:  # names and paths verbatim: no rich markup, one line however long
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    exp = f"{base}/#/experiments/{s['experiment_id']}"
    line(f"study {s['study']}: {_runs_link(base, s['experiment_id'])}  (parent run {s['run_id']})")
    # saved views first: the UI's own charts of the runs, grouped by variant
    for view in s.get("views", []):
        line(f"  view {view.name}: {view.url(base)}")
    if not s.get("views"):
        line(f"  no saved views yet: `{workbench_command()} dashboard {s['study']}` writes them")
    if isinstance(s["html"], str):
        line(f"  {s['html']}")
        return
    if not s["html"]:
        wb = workbench_command()
        line(f"  no reports or dashboards yet: `{wb} compare {s['study']}`, `{wb} dashboard {s['study']}`")
    width = max((len(path) for path, _ in s["html"]), default=0)
    for path, local in s["html"]:
        line(f"  {path:<{width}}  {exp}/runs/{s['run_id']}/artifactPath/{path}")
        if local:
            line(f"  {'':<{width}}  {local}")


from workbench.cli.report_commands import register as _register_report_commands  # noqa: E402 - after the app's own commands

_register_report_commands(app)  # health, compare, dashboard (workbench/cli/health.py, report.py)

from workbench.cli.search import register as _register_search_commands  # noqa: E402 - registered after the app's own commands

_register_search_commands(app)  # tune (workbench/search/)

from workbench.cli.importers import register as _register_import_command  # noqa: E402 - registered after the app's own commands

_register_import_command(app)  # import (workbench/importers/; a study's export: workbench/results/export.py)

from workbench.cli.export import register as _register_export_command  # noqa: E402 - registered after the app's own commands

_register_export_command(app)  # export (workbench/results/export.py)

from workbench.cli.rollouts import register as _register_rollouts_command  # noqa: E402 - registered after the app's own commands

_register_rollouts_command(app)  # rollouts (workbench/analysis/rollouts.py)

from workbench.cli.chat_model import register as _register_chat_model_command  # noqa: E402 - registered after the app's own commands

_register_chat_model_command(app)  # chat-model (workbench/models/local_chat.py)

from workbench.cli.algorithms import algorithms_app  # noqa: E402 - registered after the app's own commands

app.add_typer(algorithms_app, name="algorithms")  # presets and their citations


def main() -> None:
    guard_output()  # every line this process prints or logs passes the redaction (tracking/redact.py)
    bound_mlflow_http_retries()  # a failed MLflow call takes seconds, not MLflow's 4 min of silent retries
    app()


if __name__ == "__main__":
    main()
