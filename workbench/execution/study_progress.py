"""Study-level progress: runs done/total with an ETA, and one line per running run with its step.

Fed either directly by :func:`workbench.execution.run.execute_run` (through :meth:`StudyProgress.run_view`,
which speaks :class:`workbench.execution.run_progress.RunProgress`'s interface) or by the local process pool,
which forwards its children's step reports. Disabled = silent (``--quiet``, tests).

The ETA extrapolates from the fraction of this session's work done, counting each running run's
finished steps, so it moves between run completions too. Its clock starts at the first step
reported: what comes before (loading, a cold-start SFT, the step-0 eval) happens once and would
otherwise be extrapolated over every step (a 4-minute demo showed "ETA 4:29:33" after step 1).

Off a terminal (``nohup``, CI logs, ``> log.txt``) a live bar cannot redraw, so the display prints plain
lines instead, flushed at once: one per running run every ``WORKBENCH_PROGRESS_EVERY`` seconds
(default 30; ``workbench run --progress-every``) and one at each eval, e.g.::
    22:10:05 progress grpo/seed=0 step 120/400 reward 0.53 acc 0.50 eval 0.41@100 | study 3/9 ETA 12:40
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from workbench.metrics.final import final_eval_value
from workbench.metrics.names import ACCURACY_TRAIN, EVAL_ACCURACY, HEALTH_STATUS, REWARD_MEAN
from workbench.progress import Heartbeat, line_printed, progress_interval


@dataclass
class _Running:
    task: TaskID
    steps: int
    done_steps: int = 0
    started: float = 0.0
    eval: str = ""
    stats: str = ""  # plain text: reward, acc, eval, health
    evals: list[tuple[int, float]] = field(default_factory=list)  # (RL step, eval/accuracy), for "final"


class _EtaColumn(ProgressColumn):
    def __init__(self, owner: StudyProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task) -> Text:
        return Text(self.owner.eta_text() if task.fields.get("study") else "", style="progress.remaining")


class StudyProgress:
    """``with StudyProgress(name, total) as p: p.run_started(label, steps); p.run_step(...); ...``"""

    def __init__(
        self,
        name: str,
        total: int,
        enabled: bool = True,
        console: Console | None = None,
        plain_every: float | None = None,
        after_run: Callable[[str, str], None] | None = None,
    ) -> None:
        self.name = name
        self.after_run = after_run  # called with (label, status) once a run has ended, however it was executed
        self.total = total
        self.enabled = enabled
        console = console or Console()
        # No terminal: no live bar (it would only render at the end), plain lines instead.
        self.plain = enabled and not console.is_terminal
        self.plain_every = progress_interval() if plain_every is None else plain_every
        self._last_plain = float("-inf")
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.completed:.0f}/{task.total:.0f}"),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            _EtaColumn(self),
            console=console,
            disable=not enabled or self.plain,
        )
        self.running: dict[str, _Running] = {}
        self.skipped = 0  # not computed this session: finished in an earlier one, or reused
        self.reused = 0  # ... of which copied from another study (workbench.execution.reuse)
        self.finished = 0  # ended this session, any status
        self.failed = 0
        self.started = time.monotonic()
        self._anchor: tuple[float, float] | None = None  # (time, fraction done) at the first step reported
        self._study = self.progress.add_task(f"study {name}", total=max(total, 1), stats="", study=True)
        self._lines = threading.Lock()  # the heartbeat's thread prints too
        # a step (an eval) longer than the interval: the heartbeat prints every running run's last state
        self._heartbeat = Heartbeat(self.plain_every if self.plain else 0.0, self._periodic_lines)

    def __enter__(self) -> StudyProgress:
        self.progress.start()
        self.started = time.monotonic()
        self._last_plain = self.started  # the first periodic lines come one interval in
        self._heartbeat.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._heartbeat.__exit__(*exc)
        self.progress.stop()

    # ----------------------------------------------------------------------------------- study
    def add_done(self, n: int, *, reused: bool = False) -> None:
        """Runs that already finished in an earlier session (skipped now), or, ``reused``, in another study."""
        self.skipped += n
        self.reused += n if reused else 0
        self._refresh()

    def fraction(self) -> float:
        """Fraction of this session's work done (running runs count their finished steps)."""
        todo = self.total - self.skipped
        if todo <= 0:
            return 1.0
        partial = sum(r.done_steps / r.steps for r in self.running.values() if r.steps)
        return min(1.0, (self.finished + partial) / todo)

    def eta_seconds(self) -> float | None:
        """Seconds left: the rate since the first reported step, applied to the work left."""
        if self._anchor is None:
            return None
        since, frac_then = self._anchor
        frac = self.fraction()
        if frac <= frac_then:
            return None
        return (time.monotonic() - since) * (1 - frac) / (frac - frac_then)

    def eta_text(self) -> str:
        eta = self.eta_seconds()
        return "ETA -:--" if eta is None else f"ETA {format_duration(eta)}"

    def _refresh(self) -> None:
        parts = [f"{len(self.running)} running"] if self.running else []
        if self.skipped - self.reused:
            parts.append(f"{self.skipped - self.reused} skipped")
        if self.reused:
            parts.append(f"{self.reused} reused")
        if self.failed:
            parts.append(f"[red]{self.failed} failed[/red]")
        self.progress.update(self._study, completed=self.skipped + self.finished, stats="  ".join(parts))

    # ------------------------------------------------------------------------------------ runs
    def run_started(self, label: str, steps: int) -> None:
        task = self.progress.add_task(f"  {label}", total=max(steps, 1), stats="starting", study=False)
        self.running[label] = _Running(task, steps, started=time.monotonic())
        self._refresh()
        self._plain_line(f"start {label} ({steps} steps) | {self._study_text()}")

    def run_step(self, label: str, step: int, metrics: dict[str, float]) -> None:
        run = self.running.get(label)
        if run is None:
            return
        run.done_steps = min(step + 1, run.steps)
        if self._anchor is None:
            self._anchor = (time.monotonic(), self.fraction())
        evaluated = EVAL_ACCURACY in metrics
        if evaluated:
            run.eval = f"eval {metrics[EVAL_ACCURACY]:.2f}@{step}"  # accuracy at RL step
            run.evals.append((step, float(metrics[EVAL_ACCURACY])))
        parts = [
            f"reward {metrics[REWARD_MEAN]:.2f}" if REWARD_MEAN in metrics else "",
            f"acc {metrics[ACCURACY_TRAIN]:.2f}" if ACCURACY_TRAIN in metrics else "",
            run.eval,
        ]
        health = metrics.get(HEALTH_STATUS, 0)
        if health > 0:
            parts.append("[yellow]health!" if health == 1 else "[red]health FAIL")
        stats = "  ".join(p for p in parts if p)
        self.progress.update(run.task, completed=run.done_steps, stats=stats)
        run.stats = " ".join(Text.from_markup(stats).plain.split())
        if self.plain:
            self._plain_progress(label, evaluated)

    def _plain_progress(self, label: str, evaluated: bool) -> None:
        """Off a terminal: this run's line at an eval; every running run's line once per interval."""
        if evaluated:
            self._plain_line(self._run_text(label, self.running[label]))
        now = time.monotonic()
        if now - self._last_plain >= self.plain_every:
            self._periodic_lines(skip=label if evaluated else None)

    def _periodic_lines(self, skip: str | None = None) -> None:
        """Every running run's line (``skip``'s was just printed), or the study's when none runs yet."""
        self._last_plain = time.monotonic()
        running = list(self.running.items())
        for label, run in running:
            if label != skip:
                self._plain_line(self._run_text(label, run))
        if not running:
            self._plain_line(f"waiting | {self._study_text()}")

    def run_ended(self, label: str, status: str, detail: str = "") -> None:
        run = self.running.pop(label, None)
        self.finished += 1
        if status not in ("FINISHED", "SKIPPED"):
            self.failed += 1
        if run is not None:
            self.progress.remove_task(run.task)
            took = format_duration(time.monotonic() - run.started)
            colour = {"FINISHED": "green", "KILLED": "yellow"}.get(status, "red")
            shown = _final_text(run) if status == "FINISHED" else run.eval
            if self.plain:
                self._plain_line(
                    f"{status} {label} {shown} {detail} ({took}) | "
                    f"study {self.skipped + self.finished}/{self.total}".replace("  ", " ")
                )
            elif self.enabled:
                self.progress.console.print(
                    f"  [{colour}]{status:<8}[/{colour}] {label}  {shown}  {detail}  ({took})", highlight=False
                )
        self._refresh()
        if self.after_run is not None:
            self.after_run(label, status)

    def run_restarted(self, label: str, reason: str) -> None:
        """A run whose process was lost starts again elsewhere (a Ray retry): its line goes, uncounted."""
        run = self.running.pop(label, None)
        if run is not None:
            self.progress.remove_task(run.task)
        self.note(f"RETRY {label}: {reason}")
        self._refresh()

    def note(self, text: str) -> None:
        """One line about the study (not a run): a plain line off a terminal, printed above the bars on one."""
        if self.plain:
            self._plain_line(text)
        elif self.enabled:
            self.progress.console.print(text, markup=False, highlight=False)

    # ------------------------------------------------------------------------------ plain lines
    def _study_text(self) -> str:
        return f"study {self.skipped + self.finished}/{self.total} {self.eta_text()}"

    def _run_text(self, label: str, run: _Running) -> str:
        stats = f" {run.stats}" if run.stats else ""
        return f"progress {label} step {run.done_steps}/{run.steps}{stats} | {self._study_text()}"

    def _plain_line(self, text: str) -> None:
        """One timestamped line, flushed (a log file read while the study runs shows it at once)."""
        if not self.plain:
            return
        stream = self.progress.console.file
        with self._lines:
            stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            stream.flush()
        line_printed()

    def run_view(self, label: str) -> RunView:
        """A :class:`~workbench.execution.run_progress.RunProgress`-like view of one run, for ``execute_run``."""
        return RunView(self, label)


class RunView:
    """What ``execute_run`` calls: ``start_run``, ``on_step``, ``end_run``."""

    def __init__(self, owner: StudyProgress, label: str) -> None:
        self.owner = owner
        self.label = label

    def start_run(self, label: str, steps: int) -> None:
        self.owner.run_started(self.label, steps)

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        self.owner.run_step(self.label, step, metrics)

    def end_run(self, label: str, status: str, detail: str = "") -> None:
        # execute_run passes the health verdict ("ok"/"warn"/"fail") for a finished run, and a failed
        # run's error (its first 100 characters, as the pool and Ray executors print it)
        finished = status not in ("FAILED", "KILLED")
        self.owner.run_ended(self.label, "FINISHED" if finished else status, f"health {status}" if finished else detail)


def _final_text(run: _Running) -> str:
    """A finished run's final eval accuracy, as ``run``'s table and ``compare`` define it
    (workbench.metrics.final): ``eval final 0.433``; the last eval when there is none after step 0."""
    if not run.evals:
        return run.eval
    steps, values = zip(*run.evals, strict=True)
    final = final_eval_value(steps, values)
    return run.eval if math.isnan(final) else f"eval final {final:.3f}"  # the run table's label and digits


def format_duration(seconds: float) -> str:
    """``M:SS``, or ``H:MM:SS`` from an hour on."""
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
