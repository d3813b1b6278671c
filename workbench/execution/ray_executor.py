"""``workbench run --executor ray``: a study's pending runs as Ray tasks on a Ray cluster.

The study itself is handled as for a local run (:func:`workbench.execution.study.run_study`: the
lock, the parent MLflow run, skipping FINISHED runs, the summary); only where each run executes
changes. Each run is one Ray task that calls :func:`workbench.execution.job.execute_job` (the
function a local run process calls), with resources from the run's config
(:func:`run_resources`): ``num_cpus`` (= its torch threads), ``num_gpus`` (1 for a CUDA learner)
and ``memory``. A run that needs more than one GPU gets a placement group (one bundle, one node).
Ray's scheduler places the tasks; the driver shows the same progress lines as a local run, fed by
the tasks through a small inbox actor.

Exactly once. A run's identity is its ``run_key``. A task whose worker dies (node lost, OOM kill,
``ray stop`` on a node) is retried by Ray, at most ``max_retries`` times; the retry first closes
the lost attempt's MLflow run FAILED and resumes from its last checkpoint where one exists
(``learner.checkpoint_every`` with a checkpoint directory every node sees, e.g.
``$WORKBENCH_CHECKPOINT_DIR`` on a shared disk). A retry that finds the run already FINISHED in
MLflow (the worker died after closing it) reports it and runs nothing. A run that fails by itself
(an exception) is a FAILED run, not a Ray failure: it is not retried (as with ``workbench worker``,
running the study again does).

Ctrl-C on the driver cancels every task (Ray raises ``KeyboardInterrupt`` in a running one, which
closes its run KILLED), waits ``STOP_GRACE_S`` for them, force-cancels the rest and marks any run
still RUNNING KILLED; running the study again resumes.

Paths. The tasks log to the driver's MLflow store and chdir to the driver's working directory
when the node has it (the same machine, or a shared filesystem), so that relative paths in the
study (``task.path``, ``model.path``) and a local ``sqlite:///`` store mean the same everywhere;
a multi-machine cluster needs a tracking server and shared paths, as ``workbench worker`` does.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field

from workbench.config import RunConfig
from workbench.execution.interrupts import noting_ctrl_c, stop_requested, stopping_on
from workbench.execution.job import RunJob, execute_job, progress_metrics
from workbench.execution.pool import close_left_running, record_lost_run
from workbench.execution.run import RunOutcome
from workbench.metrics.names import EVAL_ACCURACY
from workbench.study import RunSpec
from workbench.tracking.study_runs import finished_runs, mark_orphaned_runs
from workbench.tracking.writer import release_interrupted_statements

STOP_GRACE_S = 30.0  # how long cancelled tasks get to close their runs KILLED before a forced cancel
POLL_S = 0.2
LOST_REASON = "its Ray worker was lost (node died, OOM kill or `ray stop`) while running it; retried by Ray"
RAY_NODE_TAG = "workbench.ray_node"
FORWARDED_ENV_PREFIXES = ("WORKBENCH_", "MLFLOW_")  # the driver's settings the tasks must share


@dataclass(frozen=True)
class RayOptions:
    """Where and how runs execute on Ray (``execution.ray`` in a study, ``--address`` on the CLI)."""

    address: str | None = None  # None: $RAY_ADDRESS, else a cluster running here, else a new local instance
    num_cpus: float = 1.0  # per run; also its torch threads
    num_gpus: float | None = None  # per run; None: 1 when learner.device is cuda*, else 0
    memory_gb: float | None = None  # per run, for Ray's scheduler (it does not limit the process)
    max_retries: int = 3  # re-runs of a run whose Ray worker died; a run that fails by itself is not retried

    @classmethod
    def from_execution(cls, execution: dict, address: str | None = None) -> RayOptions:
        """From a study's ``execution.ray`` mapping (validated by the study schema); ``address`` wins."""
        ray = dict(execution.get("ray") or {})
        if address is not None:
            ray["address"] = address
        return cls(**ray)


def run_resources(cfg: RunConfig, options: RayOptions) -> dict:
    """Ray resources for one run: ``num_cpus``, ``num_gpus``, ``memory`` (bytes)."""
    gpus = options.num_gpus
    if gpus is None:
        gpus = 1.0 if cfg.learner.device.startswith("cuda") else 0.0  # the sampler shares the learner's device
    resources = {"num_cpus": float(options.num_cpus), "num_gpus": float(gpus)}
    if options.memory_gb:
        resources["memory"] = int(options.memory_gb * 2**30)
    return resources


def forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}


# ------------------------------------------------------------------------------------- task side
@dataclass
class RayJob:
    run: RunJob
    experiment_id: str
    cwd: str
    env: dict[str, str] = field(default_factory=dict)


class _InboxReporter:
    """The ``RunProgress`` interface ``execute_run`` drives, sent to the driver's inbox actor."""

    def __init__(self, inbox, key: str) -> None:
        self.inbox = inbox
        self.key = key

    def start_run(self, label: str, steps: int) -> None:
        self.inbox.put.remote(self.key, ("start", steps))

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        self.inbox.put.remote(self.key, ("step", step, progress_metrics(metrics)))

    def end_run(self, label: str, status: str, detail: str = "") -> None:
        pass  # the driver ends the line when the task's result arrives


def ray_task(job: RayJob, inbox) -> RunOutcome:
    """Body of a run's Ray task (also of its retries). A cancel (Ray's ``KeyboardInterrupt``) is
    remembered, so that one Python swallows still stops the run at its next step."""
    with stopping_on(signal.SIGINT):
        return _ray_task(job, inbox)


def _ray_task(job: RayJob, inbox) -> RunOutcome:
    from mlflow import MlflowClient

    os.environ.update(job.env)
    if os.path.isdir(job.cwd):
        os.chdir(job.cwd)
    spec = job.run.spec
    client = MlflowClient(job.run.tracking_uri)
    done = finished_runs(client, job.experiment_id).get(spec.run_key)
    if done is not None:  # an earlier attempt finished it, then its worker died before reporting
        return finished_outcome(spec, done)
    # an earlier attempt's worker died mid-run: close its MLflow run (the first attempt finds none:
    # the driver closed every leftover before submitting)
    mark_orphaned_runs(client, job.experiment_id, [spec.run_key], reason=LOST_REASON)
    import ray  # deferred: ray (here on a Ray worker, where it is installed)

    job.run.tags = {RAY_NODE_TAG: ray.get_runtime_context().get_node_id()}  # the dashboard's node id
    return execute_job(job.run, _InboxReporter(inbox, spec.run_key))


def finished_outcome(spec: RunSpec, run) -> RunOutcome:
    """The outcome of a run found FINISHED in MLflow (values read back)."""
    metrics, tags = run.data.metrics, run.data.tags
    return RunOutcome(
        spec.label,
        spec.variant,
        spec.seed,
        spec.run_key,
        "FINISHED",
        run_id=run.info.run_id,
        eval_last=metrics.get(EVAL_ACCURACY, math.nan),
        health=tags.get("workbench.health_label") or tags.get("workbench.health", "-"),
    )


class Inbox:
    """A Ray actor holding the tasks' progress messages until the driver takes them."""

    def __init__(self) -> None:
        self.messages: list = []

    def put(self, key: str, message: tuple) -> None:
        self.messages.append((key, message))

    def take(self) -> list:
        out, self.messages = self.messages, []
        return out


def start_inbox(ray):
    """The inbox actor, on the driver's node when it can be (a lost worker node must not take the
    progress channel with it), restarted by Ray if its node dies all the same."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # deferred: ray

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return (
        ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(Inbox).options(scheduling_strategy=here).remote()
    )


# ----------------------------------------------------------------------------------- driver side
_dashboard = [""]  # the Ray dashboard's host:port, as ray.init reported it (empty: none)


class RayUnavailable(ValueError):
    """Ray is not installed, or the cluster cannot be reached (exit code 2, before MLflow is touched)."""


def unreachable_address(address: str | None, timeout_s: float = 5.0) -> str:
    """Why ``host:port`` (or ``ray://host:port``) accepts no TCP connection; "" if it does, or for
    ``auto``/None (Ray's own lookup fails fast)."""
    import socket

    if not address or address == "auto" or address == "local":
        return ""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return "expected auto, host:port or ray://host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return ""
    except OSError as error:
        return f"{host}:{port} does not answer ({error.strerror or error})"


def connect(address: str | None):
    """``ray.init`` for a driver: quiet (the tasks' logs stay on the cluster: the dashboard shows them)."""
    try:
        import ray  # deferred: ray is an optional extra
    except ImportError:
        raise RayUnavailable("--executor ray needs Ray: pip install 'rl-workbench[ray]'") from None
    if not ray.is_initialized():
        unreachable = unreachable_address(address)
        if unreachable:  # ray.init would retry a dead address for minutes
            raise RayUnavailable(f"cannot connect to a Ray cluster at {address}: {unreachable}")
        try:
            context = ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=True)
            _dashboard[0] = getattr(context, "dashboard_url", "") or ""
        except (ConnectionError, ValueError, RuntimeError) as error:
            where = f"at {address}" if address else "(no address: $RAY_ADDRESS, a local cluster, or a new one)"
            raise RayUnavailable(
                f"cannot connect to a Ray cluster {where}: {' '.join(str(error).split())[:300]}"
            ) from None
    return ray


def cluster_line(ray) -> str:
    total = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    gpus = f", {total.get('GPU', 0):g} GPUs" if total.get("GPU") else ""
    dashboard = f"; dashboard http://{_dashboard[0]}" if _dashboard[0] else ""
    return f"Ray cluster: {nodes} node(s), {total.get('CPU', 0):g} CPUs{gpus}{dashboard}"


class _RayStudy:
    def __init__(self, ctx, specs: list[RunSpec], options: RayOptions, progress, log) -> None:
        self.ctx = ctx
        self.specs = specs
        self.options = options
        self.progress = progress
        self.log = log
        self.ray = connect(options.address)
        self.refs: dict = {}  # ObjectRef -> RunSpec, in flight
        self.started: dict[str, int] = {}  # run_key -> attempts seen starting
        self.results: dict[str, RunOutcome] = {}
        self.placement_groups: list = []
        self.interrupted = False

    def submit_all(self) -> None:
        ray = self.ray
        self.log(cluster_line(ray))
        self.inbox = start_inbox(ray)
        remote = ray.remote(ray_task)
        cwd, env = os.getcwd(), forwarded_env() | {"MLFLOW_TRACKING_URI": self.ctx.tracking_uri}
        for spec in self.specs:
            resources = run_resources(spec.config, self.options)
            threads = max(1, int(resources["num_cpus"]))
            job = RayJob(
                RunJob(spec, self.ctx.study.name, self.ctx.parent_run_id, self.ctx.tracking_uri, threads),
                self.ctx.experiment_id,
                cwd,
                env,
            )
            ref = remote.options(
                **resources,
                **self._placement(resources),
                max_retries=self.options.max_retries,
                retry_exceptions=False,
                name=f"workbench-run {spec.label}",
            ).remote(job, self.inbox)
            self.refs[ref] = spec

    def _placement(self, resources: dict) -> dict:
        """A run needing more than one GPU: its own placement group (one bundle: all on one node)."""
        if resources["num_gpus"] <= 1:
            return {}
        from ray.util.placement_group import placement_group  # deferred: ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # deferred: ray

        bundle = {"CPU": resources["num_cpus"], "GPU": resources["num_gpus"]}
        group = placement_group([bundle], strategy="STRICT_PACK")
        self.placement_groups.append(group)
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)}

    # ------------------------------------------------------------------------------ loop
    def run(self) -> dict[str, RunOutcome]:
        with noting_ctrl_c(self):
            try:
                self.submit_all()
                while self.refs:
                    ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=POLL_S)
                    self._drain()
                    for ref in ready:
                        self._finished(ref)
                    if self.interrupted or stop_requested():  # Ctrl-C, or SIGTERM (cli run)
                        raise KeyboardInterrupt
            except KeyboardInterrupt as interrupt:
                release_interrupted_statements(interrupt)
                self._stop()
                raise
            finally:
                self._release()
        return self.results

    def _drain(self) -> None:
        from ray.exceptions import RayError  # deferred: ray

        try:
            messages = self.ray.get(self.inbox.take.remote())
        except RayError:  # the inbox's node died: Ray restarts it; the lines lost are only progress
            return
        for key, message in messages:
            spec = next((s for s in self.refs.values() if s.run_key == key), None)
            if spec is None or key in self.results:
                continue  # its result came first: the run's line is closed
            if message[0] == "start":
                self.started[key] = self.started.get(key, 0) + 1
                if self.started[key] > 1:  # Ray retried it: its lost attempt's line goes
                    self.progress.run_restarted(spec.label, "its Ray worker was lost; retried by Ray")
                self.progress.run_started(spec.label, message[1])
            elif message[0] == "step":
                self.progress.run_step(spec.label, message[1], message[2])

    def _finished(self, ref) -> None:
        from ray.exceptions import RayError  # deferred: ray

        spec = self.refs.pop(ref)
        try:
            outcome: RunOutcome = self.ray.get(ref)
        except RayError as error:  # retries used up (or the task could not run): the run is lost
            reason = f"Ray task failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
            outcome = RunOutcome(spec.label, spec.variant, spec.seed, spec.run_key, "FAILED", error=reason)
            try:
                outcome.run_id = record_lost_run(self.ctx, spec, "FAILED", reason)
            except Exception as lost:  # noqa: BLE001 - the study goes on; the summary says what happened
                outcome.error += f" (and MLflow could not be updated: {lost})"
        self.results[spec.run_key] = outcome
        if outcome.status != "FINISHED":  # e.g. interrupted while opening its MLflow run: close it
            close_left_running(self.ctx, spec.run_key, outcome)
        if outcome.tracking_lost:  # MLflow gone past the deadline: runs not yet started would only wait it out
            self._cancel_unstarted()
        detail = f"health {outcome.health}" if outcome.status == "FINISHED" else outcome.error_line
        if spec.run_key not in self.started:  # finished before its start message was read
            self.progress.run_started(spec.label, spec.config.rollout.steps)
        self.progress.run_ended(spec.label, outcome.status, detail)

    def _cancel_unstarted(self) -> None:
        for ref, spec in list(self.refs.items()):
            if spec.run_key not in self.started:
                self.ray.cancel(ref, force=True)
                del self.refs[ref]  # _run_locked records it "not started: MLflow unreachable"

    # ----------------------------------------------------------------------------- Ctrl-C
    def _stop(self) -> None:
        """Cancel every task (a running one gets KeyboardInterrupt and closes its run KILLED), wait
        for them, then close whatever is still RUNNING as KILLED."""
        in_flight = dict(self.refs)
        try:
            for ref in in_flight:
                self.ray.cancel(ref)
            deadline = time.monotonic() + STOP_GRACE_S
            while self.refs and time.monotonic() < deadline:
                ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=POLL_S)
                for ref in ready:
                    spec = self.refs.pop(ref)
                    self.progress.run_ended(spec.label, "KILLED", "stopped by Ctrl-C")
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            pass
        for ref in self.refs:
            self.ray.cancel(ref, force=True)
        from mlflow import MlflowClient

        try:
            mark_orphaned_runs(
                MlflowClient(self.ctx.tracking_uri),
                self.ctx.experiment_id,
                [s.run_key for s in in_flight.values()],
                reason="stopped by Ctrl-C on the driver",
                status="KILLED",
            )
        except Exception:  # noqa: BLE001 - best effort; the next run of the study closes them too
            pass

    def _release(self) -> None:
        if self.placement_groups:
            from ray.util.placement_group import remove_placement_group  # deferred: ray

            for group in self.placement_groups:
                remove_placement_group(group)


def run_on_ray(ctx, specs: list[RunSpec], *, options: RayOptions, progress, log=print) -> dict[str, RunOutcome]:
    """Run ``specs`` as Ray tasks; run_key -> outcome. Raises ``KeyboardInterrupt`` after a clean stop."""
    return _RayStudy(ctx, specs, options, progress, log).run()
