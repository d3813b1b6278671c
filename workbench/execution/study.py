"""Execute a study's runs under one MLflow experiment, resumably, in one or N local processes.

The study's parent run (``workbench.role=study``) holds the YAML and the plan; each run is
a child. Runs whose ``run_key`` already FINISHED are skipped, so re-running a study resumes;
FAILED and KILLED runs are run again (a new MLflow run: the old one stays as history). A run whose
``run_key`` FINISHED in another study of the same store is copied from there, not computed
(:mod:`workbench.execution.reuse`; ``reuse=False``: ``workbench run --no-reuse``).

* ``parallel=1``: the runs execute one after another in this process.
* ``parallel=N>1``: N runs at a time, each in its own ``spawn``-ed process
  (:mod:`workbench.execution.pool`), so a crash or an OOM kill of one run never takes down the others.
* ``ray=RayOptions(...)``: each run is a Ray task on a Ray cluster (:mod:`workbench.execution.ray_executor`).
* Across machines without Ray: ``workbench worker`` (:mod:`workbench.execution.worker`).

Ctrl-C stops launching, ends the running runs KILLED, marks the study's parent run KILLED and
re-raises ``KeyboardInterrupt`` (the CLI exits 130). A run left RUNNING by a process that is gone
(``kill -9`` of the whole study) is marked FAILED when the study is run again, before its rerun.

One execution at a time: ``run_study`` holds the study's lock (:mod:`workbench.execution.lock`) from
before it opens MLflow until the parent run is closed; a second ``workbench run`` of the study
(or one while ``workbench worker`` processes on this machine execute it) exits 2 naming the holder.

The experiment is ``tracking.experiment`` when set, else the study's name: the parent run, the
child runs, the resume lookup and ``plan`` all use :func:`study_experiment`.

MLflow unreachable past ``tracking.outage_deadline_s`` (see :mod:`workbench.tracking.writer`):
the run in progress ends FAILED with its metrics spilled locally, no further run is started
(they would only wait out the deadline again), and the parent is closed if MLflow is back.

``export_to`` (``workbench run --export DIR``): the study's export (:mod:`workbench.results.export`) is
written again after each run ends and once more when the study stops, however it stops, so a study
interrupted part-way has an up-to-date export to resume from elsewhere (:class:`StudyExportHook`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.execution.lock import study_lock
from workbench.execution.plan import plan_rows, study_experiment, study_tracking_uri
from workbench.execution.pool import run_pool
from workbench.execution.ray_executor import RayOptions, connect, run_on_ray
from workbench.execution.reuse import Reused, reuse_runs
from workbench.execution.run import RunOutcome, eval_endpoints, execute_run, preflight
from workbench.execution.study_progress import StudyProgress
from workbench.execution.threads import threads_per_run
from workbench.metrics.names import EVAL_ACCURACY
from workbench.models import model_dir
from workbench.results.export import ExportSummary, export_study
from workbench.study import RunSpec, Study
from workbench.study.expand import arm_of_label
from workbench.tracking.redact import redact_text
from workbench.tracking.store import ensure_store, get_or_create_experiment
from workbench.tracking.study_runs import finished_runs, mark_orphaned_runs
from workbench.tracking.writer import (
    OutagePolicy,
    TrackingOutage,
    bound_mlflow_http_retries,
    call_with_retries,
    release_interrupted_statements,
    resend_spills,
    route_store_tracebacks_to_log,
)


@dataclass
class StudyContext:
    study: Study
    tracking_uri: str
    experiment_id: str
    parent_run_id: str


def study_outage_policy(specs: list[RunSpec]) -> OutagePolicy:
    return OutagePolicy(deadline_s=specs[0].config.tracking.outage_deadline_s) if specs else OutagePolicy()


def skipped_outcome(spec: RunSpec, run=None, client=None) -> RunOutcome:
    """The summary row of a run that already FINISHED earlier (values read back from MLflow; its
    first and final eval from the ``eval/accuracy`` history when a ``client`` is given)."""
    outcome = RunOutcome(spec.label, spec.variant, spec.seed, spec.run_key, "SKIPPED")
    if run is not None:
        outcome.run_id = run.info.run_id
        outcome.eval_last = run.data.metrics.get(EVAL_ACCURACY, math.nan)
        outcome.health = run.data.tags.get("workbench.health_label") or run.data.tags.get("workbench.health", "-")
    if run is not None and client is not None:
        evals = sorted(
            (m.step, m.timestamp, m.value) for m in client.get_metric_history(run.info.run_id, EVAL_ACCURACY)
        )
        last_per_step = {step: value for step, _, value in evals}  # a step logged twice: its last value
        outcome.eval_first, outcome.eval_last, outcome.eval_final = eval_endpoints(list(last_per_step.items()))
    return outcome


def reused_outcome(spec: RunSpec, reused: Reused, client) -> RunOutcome:
    """The summary row of a run copied from another study (values read back like a skipped run's)."""
    outcome = skipped_outcome(spec, client.get_run(reused.run_id), client)
    outcome.status, outcome.reused_from = "REUSED", reused.source.describe()
    return outcome


def open_study(study: Study, specs: list[RunSpec], *, log_plan: bool = True, views: bool = True) -> StudyContext:
    """Create (or find) the experiment and the study's parent run, and mark the parent RUNNING.

    Retries while MLflow is unreachable; raises ``TrackingOutage`` after the deadline.
    ``views``: also write the study's MLflow saved views, description and run colours
    (:mod:`workbench.viz.mlflow_views`), so the UI shows a study while it runs. The dashboard specs
    are validated first: a broken one raises ``SpecError`` before MLflow is touched."""
    from mlflow import MlflowClient

    from workbench.viz.mlflow_views import load_view_specs  # deferred: pandas, plotly

    dashboard_specs = load_view_specs() if views else []
    bound_mlflow_http_retries()
    route_store_tracebacks_to_log()  # this process's own store calls (closing lost runs after a Ctrl-C) too
    uri = study_tracking_uri(specs)
    policy = study_outage_policy(specs)

    def call(fn, *args, **kwargs):
        return call_with_retries(fn, *args, policy=policy, uri=uri, what="opening the study", **kwargs)

    ensure_store(uri)
    client = MlflowClient(uri)
    experiment_id = call(get_or_create_experiment, client, study_experiment(study, specs), uri)
    found = call(
        client.search_runs,
        [experiment_id],
        "tags.`workbench.role` = 'study'",
        max_results=1,
        order_by=["attributes.start_time ASC"],
    )
    if found:
        parent = found[0].info.run_id
        call(client.update_run, parent, status="RUNNING")
    else:
        parent = call(
            client.create_run,
            experiment_id,
            run_name=f"study:{study.name}",
            tags={"workbench.role": "study", "workbench.study": study.name},
        ).info.run_id
    if log_plan:
        if study.source:
            call(client.log_text, parent, redact_text(Path(study.source).read_text()), "study.yaml")  # no passwords
        call(client.log_text, parent, json.dumps(plan_rows(specs, {}), indent=2, default=str), "plan.json")
    if views:
        from workbench.viz.mlflow_views import layout_of, publish_study_views  # deferred: pandas, plotly

        call(
            publish_study_views,
            client,
            experiment_id,
            layout_of(study),
            dashboard_specs,
            starting_seeds={s.seed for s in specs},
        )  # `--only seed=0`: the description says seed 0
    return StudyContext(study, uri, experiment_id, parent)


def refresh_study_views(ctx: StudyContext) -> None:
    """At the end of a study: the views again (now knowing every logged metric) and each run's
    colour and health line. A failure here is reported, never allowed to hide the study's outcome."""
    import warnings

    from mlflow import MlflowClient

    from workbench.viz.mlflow_views import layout_of, load_view_specs, publish_study_views  # deferred: pandas, plotly

    try:
        publish_study_views(MlflowClient(ctx.tracking_uri), ctx.experiment_id, layout_of(ctx.study), load_view_specs())
    except Exception as e:  # noqa: BLE001 - the runs are tracked; only the views' refresh failed
        warnings.warn(f"could not refresh the study's MLflow views: {e}", stacklevel=2)


def close_parent(ctx: StudyContext, status: str, policy: OutagePolicy) -> None:
    """End the study's parent run; with MLflow gone past the deadline, say so (the next
    execution of the study reopens and closes it) rather than crash."""
    from mlflow import MlflowClient

    try:
        call_with_retries(
            MlflowClient(ctx.tracking_uri).set_terminated,
            ctx.parent_run_id,
            status=status,
            policy=policy,
            uri=ctx.tracking_uri,
            what="closing the study's parent run",
        )
    except TrackingOutage as error:
        policy.warn(f"the study's parent run {ctx.parent_run_id} stays RUNNING until the study is run again: {error}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class StudyExportHook:
    """Writes the study's export again each time it is called (after each run, at the end). A failed
    export never stops the study: it is said once and tried again at the next call."""

    tracking_uri: str
    experiment: str
    directory: Path
    rollouts: bool = True  # False: the runs' stored completions left out (`--no-export-rollouts`)
    say: Callable[[str], None] = _say
    exports: int = 0  # successful ones
    seconds: float = 0.0  # spent exporting, over all calls
    last: ExportSummary | None = None  # the last call's, None if it failed
    errors: list[str] = field(default_factory=list)

    def __call__(self, *_: object) -> None:
        t0 = time.perf_counter()
        self.last = None
        try:
            self.last = export_study(self.tracking_uri, self.experiment, self.directory, rollouts=self.rollouts)
            self.exports += 1
        except Exception as error:  # noqa: BLE001 - the runs are tracked; only their export failed
            line = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            if not self.errors:
                self.say(
                    f"warning: could not export the study to {self.directory} ({line}); trying again after each run"
                )
            self.errors.append(line)
        finally:
            self.seconds += time.perf_counter() - t0

    def final(self) -> None:
        """The last export, when the study stops, and one line saying what it holds."""
        self()
        if self.last is not None:
            self.say(f"{self.last.line()} (exports this session: {self.exports}, {self.seconds:.1f} s in all)")


def prebuild_models(specs: list[RunSpec], progress: bool = False) -> None:
    """Build each distinct tiny model once, here, before N processes would all wait on its lock."""

    seen: set[str] = set()
    for spec in specs:
        model, task, prime = spec.config.model, spec.config.task, spec.config.data.prime
        if model.builtin is None and prime is None:
            continue
        key = json.dumps(
            [
                model.model_dump(mode="json"),
                task.model_dump(mode="json"),
                None if prime is None else prime.model_dump(mode="json"),
            ],
            sort_keys=True,
        )
        if key not in seen:
            seen.add(key)
            model_dir(model, task, progress=progress, prime=prime)


def run_study(
    study: Study,
    specs: list[RunSpec],
    *,
    progress: bool = True,
    parallel: int = 1,
    ray: RayOptions | None = None,
    export_to: Path | None = None,
    export_rollouts: bool = True,
    reuse: bool = True,
) -> list[RunOutcome]:
    """Run every spec not yet FINISHED; returns one outcome per spec, in plan order. With ``ray``,
    the runs are Ray tasks (``parallel`` is then Ray's business: as many as the cluster places).
    ``export_to``: the study's export directory, written after each run and at the end (with the runs'
    stored completions unless ``export_rollouts`` is False).
    ``reuse``: copy a run that FINISHED in another study of the store rather than compute it.

    Raises ``KeyboardInterrupt`` after a clean stop (running runs KILLED, parent run KILLED),
    ``StudyBusy`` if another process executes the study.
    """
    for spec in specs:  # everything that can fail before training fails before MLflow is touched
        preflight(spec.config)
    if ray is not None:
        connect(ray.address)  # RayUnavailable (exit 2) before MLflow is touched
    with study_lock(study_tracking_uri(specs), study_experiment(study, specs)):  # StudyBusy: exit 2
        return _run_locked(
            study,
            specs,
            progress=progress,
            parallel=parallel,
            ray=ray,
            export_to=export_to,
            export_rollouts=export_rollouts,
            reuse=reuse,
        )


def _run_locked(
    study: Study,
    specs: list[RunSpec],
    *,
    progress: bool,
    parallel: int,
    ray: RayOptions | None = None,
    export_to: Path | None = None,
    export_rollouts: bool = True,
    reuse: bool = True,
) -> list[RunOutcome]:
    from mlflow import MlflowClient

    policy = study_outage_policy(specs)
    ctx = open_study(study, specs)
    export = (
        None
        if export_to is None
        else StudyExportHook(
            ctx.tracking_uri, study_experiment(study, specs), Path(export_to), rollouts=export_rollouts
        )
    )
    client = MlflowClient(ctx.tracking_uri)
    done = finished_runs(client, ctx.experiment_id)
    todo = [s for s in specs if s.run_key not in done]
    for spec in todo:  # first what an outage kept back: its runs then close with their real reason
        resend_spills(ctx.tracking_uri, spec.run_key, policy)
    mark_orphaned_runs(client, ctx.experiment_id, [s.run_key for s in todo])
    results: dict[str, RunOutcome] = {
        s.run_key: skipped_outcome(s, done[s.run_key], client) for s in specs if s.run_key in done
    }
    status = "FINISHED"
    current: str | None = None  # the run_key executing in this process, if any
    bar = StudyProgress(study.name, len(specs), enabled=progress, after_run=export)
    bar.add_done(len(specs) - len(todo))
    try:
        if todo and reuse:  # before the live display starts: its REUSED lines print as plain lines
            copied = reuse_runs(
                ctx.tracking_uri,
                todo,
                study=study.name,
                experiment_id=ctx.experiment_id,
                parent_run_id=ctx.parent_run_id,
                say=bar.note,
                warn=_say,
            )
            results |= {s.run_key: reused_outcome(s, copied[s.run_key], client) for s in todo if s.run_key in copied}
            todo = [s for s in todo if s.run_key not in copied]
            bar.add_done(len(copied), reused=True)
            if copied and export is not None:
                export()
        if todo and (parallel > 1 or ray is not None):
            prebuild_models(todo, progress=progress)  # (on Ray: for the nodes that share this machine's cache)
        with bar:
            if todo and ray is not None:
                results |= run_on_ray(ctx, todo, options=ray, progress=bar, log=bar.note)
            elif todo and parallel > 1:
                results |= run_pool(ctx, todo, parallel=parallel, progress=bar)
            else:
                if todo:  # torch's default (a thread per CPU) spin-waits beside busy processes: see threads.py
                    import torch  # deferred: only a run in this process needs it

                    torch.set_num_threads(threads_per_run(1))
                for spec in todo:
                    current = spec.run_key
                    results[spec.run_key] = outcome = execute_run(
                        spec.config,
                        study=study.name,
                        variant=spec.variant,
                        label=spec.label,
                        parent_run_id=ctx.parent_run_id,
                        progress=bar.run_view(spec.label),
                    )
                    current = None
                    if outcome.tracking_lost:  # every later run would wait out the deadline again
                        break
        if any(o.tracking_lost for o in results.values()):
            status = "FAILED"
            policy = OutagePolicy(deadline_s=0.0, warn=policy.warn)  # closing the parent: one try, no more waiting
        for spec in todo:
            if spec.run_key not in results:  # not started: MLflow was lost
                results[spec.run_key] = RunOutcome(
                    spec.label,
                    spec.variant,
                    spec.seed,
                    spec.run_key,
                    "FAILED",
                    error="not started: MLflow unreachable (run again to resume)",
                )
    except KeyboardInterrupt as interrupt:
        status = "KILLED"
        release_interrupted_statements(interrupt)
        if current is not None:  # interrupted while its MLflow run was being opened
            mark_orphaned_runs(client, ctx.experiment_id, [current], reason="interrupted", status="KILLED")
        raise
    finally:
        close_parent(ctx, status, policy)
        refresh_study_views(ctx)
        if export is not None:
            export.final()
    return [results[s.run_key] for s in specs]


def seed_matrix(outcomes: list[RunOutcome]) -> tuple[list[int], list[tuple[str, dict[int, RunOutcome], float]]]:
    """Outcomes as (seeds, rows): a row per variant/grid point (the label without its seed), with
    its outcome per seed and the mean final eval accuracy (:mod:`workbench.metrics.final`) over the
    seeds that have one."""
    seeds = sorted({o.seed for o in outcomes})
    groups: dict[str, dict[int, RunOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.label.rsplit("/seed=", 1)[0], {})[o.seed] = o  # a cold start's own row when replicated
    rows = []
    for group, by_seed in groups.items():
        values = [o.eval_final for o in by_seed.values() if o.eval_final == o.eval_final]
        rows.append((group, by_seed, sum(values) / len(values) if values else math.nan))
    return seeds, rows


# --------------------------------------------------------------------------------------------
# Sequential seeding (`workbench run --until-decided`): which seeds and runs each round needs
# --------------------------------------------------------------------------------------------


def seed_schedule(declared: list[int], n: int) -> list[int]:
    """The first ``n`` seeds of a sequential study: its declared seeds in file order, then
    ``max(declared) + 1, + 2, ...``. Deterministic, so a second ``--until-decided`` resumes on the
    same runs (same run_keys) and never duplicates one."""
    seeds = list(declared[:n])
    nxt = max(declared) + 1
    while len(seeds) < n:
        seeds.append(nxt)
        nxt += 1
    return seeds


def with_seeds(study: Study, seeds: list[int]) -> Study:
    """The study with its ``seeds:`` replaced (its source file and origin kept, for its YAML and errors)."""
    out = study.model_copy(update={"seeds": list(seeds)})
    out._origin = study._origin
    return out


def arm_of(spec: RunSpec) -> str:
    """A run's arm: its label without ``/seed=N`` and ``/cold_start=I`` (the unit ``compare`` compares)."""
    return arm_of_label(spec.label)


def round_specs(specs: list[RunSpec], seeds: list[int], arms: set[str]) -> list[RunSpec]:
    """The runs of one round: every run of ``arms`` at ``seeds`` (those already FINISHED are
    skipped by :func:`run_study`)."""
    wanted = set(seeds)
    return [s for s in specs if s.seed in wanted and arm_of(s) in arms]
