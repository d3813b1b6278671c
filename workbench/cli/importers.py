"""``workbench import FRAMEWORK ...``: another framework's runs into the current store as a study.

``workbench import workbench DIR``: a workbench study's export (``workbench export``, docs/export.md)
loaded back as it was, not mapped: its study name, run keys, tags, params, histories and artifacts
are the export's own. It is a source of this command (not a command of its own) because it is the
same act, runs from elsewhere into this store, with the same guarantees: everything checked before
the first write, and importing again adds nothing twice.

Registered on the main app by :func:`register` (``workbench/cli/main.py``). All reading and checking
happens before the first write: bad input prints one line and exits 2 with nothing written.
"""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.cli.output import console, fail
from workbench.tracking.check import check_store
from workbench.tracking.redact import redact_uri
from workbench.tracking.store import resolve_tracking_uri

__all__ = ["import_export", "import_runs", "register"]


def import_runs(
    framework: Annotated[
        str,
        typer.Argument(
            help="the framework that logged the runs (trl | verl), the tracker it logged to (tensorboard | wandb), "
            "or workbench (a study's export directory)"
        ),
    ],
    files: Annotated[
        list[str] | None,
        typer.Argument(
            help="one run each: TRL trainer_state.json, verl console or JSONL log, TensorBoard log directory, "
            "W&B offline run directory; with workbench: the export directory"
        ),
    ] = None,
    from_uri: Annotated[
        str | None,
        typer.Option(
            "--from", help="MLflow store the framework logged to (sqlite:///PATH, postgresql://..., http://...)"
        ),
    ] = None,
    experiment: Annotated[str | None, typer.Option(help="with --from: the experiment holding the runs")] = None,
    study: Annotated[str | None, typer.Option(help="name of the workbench study to create or extend")] = None,
    variant_by: Annotated[
        str | None,
        typer.Option("--variant-by", help="with --from: param:NAME or tag:NAME whose value is each run's variant"),
    ] = None,
    seed_by: Annotated[
        str | None, typer.Option("--seed-by", help="with --from: param:NAME or tag:NAME whose value is each run's seed")
    ] = None,
    variant: Annotated[str | None, typer.Option(help="with FILE...: the variant of these runs")] = None,
    seed: Annotated[
        list[int] | None, typer.Option(help="with FILE...: the seed (repeat it once per file for several files)")
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option("--tracking-uri", help="store to import into (default: $MLFLOW_TRACKING_URI, ./mlflow.db)"),
    ] = None,
    skip_bad_lines: Annotated[
        bool,
        typer.Option(
            "--skip-bad-lines",
            help="with FILE... or run directories: skip malformed lines or records (a TensorBoard "
            "CRC error, a W&B value beyond a float; counted in the output) instead of refusing "
            "the import",
        ),
    ] = False,
    rollouts: Annotated[
        list[str] | None,
        typer.Option(
            "--rollouts",
            help="with FILE...: the directory of the train completions the framework dumped, one per file "
            "(TRL: OUTPUT_DIR/completions, read unasked when beside the trainer state; verl: "
            "trainer.rollout_data_dir); `workbench rollouts` then shows them",
        ),
    ] = None,
    eval_rollouts: Annotated[
        list[str] | None,
        typer.Option("--eval-rollouts", help="with verl FILE...: trainer.validation_data_dir, one per file"),
    ] = None,
    logged_by: Annotated[
        str | None,
        typer.Option(
            "--framework",
            help="with tensorboard | wandb: the framework that logged the runs, trl | verl "
            "(default: guessed from the metric names)",
        ),
    ] = None,
) -> None:
    """Import TRL or verl runs (from their MLflow store, log files, TensorBoard or W&B offline runs) as a
    workbench study, with their metrics mapped onto the canonical names (docs/import.md), or a study
    exported by `workbench export` (docs/export.md); re-importing adds nothing twice, and a log that grew
    since its import replaces its run (one run per variant and seed)."""
    if framework == "workbench":
        given = [
            o
            for o, v in (
                ("--from", from_uri),
                ("--experiment", experiment),
                ("--study", study),
                ("--variant-by", variant_by),
                ("--seed-by", seed_by),
                ("--variant", variant),
                ("--seed", seed),
                ("--skip-bad-lines", skip_bad_lines),
                ("--framework", logged_by),
                ("--rollouts", rollouts),
                ("--eval-rollouts", eval_rollouts),
            )
            if v
        ]
        if given:
            raise fail(
                f"{', '.join(given)}: not for a workbench export, which names its study and runs itself "
                "(workbench import workbench DIR [--tracking-uri URI])"
            )
        if not files or len(files) != 1:
            raise fail("workbench import workbench DIR: give one export directory (`workbench export --to DIR`)")
        return import_export(files[0], tracking_uri)

    from workbench.importers import (  # deferred: pydantic
        ADAPTERS,
        TRACKER_READERS,
        ImportSourceError,
        runs_from_files,
        runs_from_mlflow,
        runs_from_tracker,
        write_study,
    )

    try:
        if not study:
            raise ImportSourceError("--study NAME is required (the workbench study the runs land in)")
        if logged_by is not None and framework not in TRACKER_READERS:
            raise ImportSourceError(f"--framework belongs to tensorboard | wandb imports, not {framework}")
        if (rollouts or eval_rollouts) and (framework in TRACKER_READERS or from_uri is not None):
            raise ImportSourceError(
                "--rollouts and --eval-rollouts go with FILE... (a TRL trainer state, a verl log), "
                "one directory per file"
            )
        if framework in TRACKER_READERS:
            given = [
                o
                for o, v in (
                    ("--from", from_uri),
                    ("--experiment", experiment),
                    ("--variant-by", variant_by),
                    ("--seed-by", seed_by),
                )
                if v
            ]
            if given:
                raise ImportSourceError(
                    f"{', '.join(given)} belong to MLflow imports; {framework} reads run directories"
                )
            missing = [o for o, v in (("--variant", variant), ("--seed", seed)) if not v]
            if missing:
                raise ImportSourceError(f"importing {framework} runs needs {' and '.join(missing)}")
            adapter, runs = runs_from_tracker(
                {n: ADAPTERS.get(n) for n in ADAPTERS.names()},
                framework,
                TRACKER_READERS[framework],
                files or [],
                logged_by,
                variant,
                list(seed),
                skip_bad_lines=skip_bad_lines,
            )
            note = {"tracker": framework, "files": [r.origin["workbench.source_file"] for r in runs]}
        elif from_uri is not None:
            adapter = ADAPTERS.get(framework)
            given = [o for o, v in (("FILE", files), ("--variant", variant), ("--seed", seed)) if v]
            if given:
                raise ImportSourceError(f"--from reads runs from a store; {', '.join(given)} belong to file imports")
            missing = [
                o
                for o, v in (("--experiment", experiment), ("--variant-by", variant_by), ("--seed-by", seed_by))
                if not v
            ]
            if missing:
                raise ImportSourceError(f"--from needs {', '.join(missing)}")
            runs = runs_from_mlflow(adapter, from_uri, experiment, variant_by, seed_by)
            note = {"uri": redact_uri(from_uri), "experiment": experiment, "variant_by": variant_by, "seed_by": seed_by}
        else:
            adapter = ADAPTERS.get(framework)
            if not files:
                raise ImportSourceError("give FILE... or --from URI --experiment NAME")
            given = [
                o for o, v in (("--experiment", experiment), ("--variant-by", variant_by), ("--seed-by", seed_by)) if v
            ]
            if given:
                raise ImportSourceError(f"{', '.join(given)} need --from URI")
            missing = [o for o, v in (("--variant", variant), ("--seed", seed)) if not v]
            if missing:
                raise ImportSourceError(f"importing files needs {' and '.join(missing)}")
            runs = runs_from_files(
                adapter,
                files,
                variant,
                list(seed),
                skip_bad_lines=skip_bad_lines,
                rollouts=rollouts or (),
                eval_rollouts=eval_rollouts or (),
            )
            note = {"files": [r.origin["workbench.source_file"] for r in runs]}
        uri = tracking_uri or resolve_tracking_uri()
        check_store(uri, create=True)  # a corrupt file, unwritable path, wrong password: one line, exit 2
        from workbench.importers.write import existing_keys  # deferred: pydantic

        existing_keys(uri, study)  # a name taken by a non-workbench experiment: refuse before writing
        from workbench.viz.mlflow_views import load_view_specs  # deferred: plotly, pydantic

        view_specs = load_view_specs()  # a broken dashboard spec (SpecError) fails before anything is written
        # validates every run (labels, steps, values, metric names) before its first write
        outcome = write_study(adapter, runs, uri, study, source_note=note, view_specs=view_specs)
    except (ImportSourceError, ValueError) as e:
        raise fail(str(e)) from None
    for line in outcome.bad_lines:
        console.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True)
    for label, run_id in outcome.imported:
        console.print(f"imported {label} -> run {run_id}", highlight=False)
    for line in outcome.completions:
        console.print(line, highlight=False, soft_wrap=True)
    for line in outcome.replaced:
        console.print(f"[yellow]updated {line}[/yellow]", highlight=False, soft_wrap=True)
    if outcome.skipped:
        console.print(f"already imported (skipped): {', '.join(outcome.skipped)}", highlight=False)
    if outcome.not_finished:
        console.print(
            f"[yellow]not imported, still running in the source (import again later): "
            f"{', '.join(outcome.not_finished)}[/yellow]",
            highlight=False,
        )
    updated = f" ({len(outcome.replaced)} updating a run whose source grew)" if outcome.replaced else ""
    console.print(
        f"study {study!r} in {redact_uri(uri)}: {len(outcome.imported)} imported{updated}, "
        f"{len(outcome.skipped)} already there. "
        f"Next: workbench health {study} --recheck; workbench compare {study}",
        highlight=False,
        soft_wrap=True,
    )


def import_export(directory: str, tracking_uri: str | None) -> None:
    """``workbench import workbench DIR``: the export checked whole, then loaded (runs already there skipped)."""
    from workbench.results.export import ExportError, load_export, read_export  # deferred: pyarrow

    uri = tracking_uri or resolve_tracking_uri()
    try:
        export = read_export(directory)  # bad input fails here, before the store is opened (or created)
        check_store(uri, create=True)  # a corrupt file, unwritable path, wrong password: one line, exit 2
        summary = load_export(export, uri)
    except ExportError as e:
        raise fail(str(e)) from None
    if summary.skipped:
        console.print(f"already in the store (skipped): {len(summary.skipped)} run(s)", highlight=False)
    if summary.not_finished:
        console.print(
            f"[yellow]not loaded, not finished in the export: {', '.join(summary.not_finished)}[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
    console.print(summary.line() + f". Next: workbench compare {summary.experiment}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``import`` to ``app``."""
    app.command("import")(import_runs)
