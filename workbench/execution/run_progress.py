"""Rich progress display for runs: step, reward, accuracy, ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from workbench.metrics.names import ACCURACY_TRAIN, EVAL_ACCURACY, HEALTH_STATUS, REWARD_MEAN


class RunProgress:
    """One bar per run; updated once per RL step. Disabled = silent (tests, workers)."""

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
        )
        self._tasks: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._eval = ""

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def start_run(self, label: str, steps: int) -> None:
        self._current = label
        self._eval = ""
        self._totals[label] = steps
        self._tasks[label] = self.progress.add_task(label, total=steps, stats="starting")

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        if EVAL_ACCURACY in metrics:
            self._eval = f"eval {metrics[EVAL_ACCURACY]:.2f}"
        parts = [
            f"reward {metrics[REWARD_MEAN]:.2f}" if REWARD_MEAN in metrics else "",
            f"acc {metrics[ACCURACY_TRAIN]:.2f}" if ACCURACY_TRAIN in metrics else "",
            self._eval,
        ]
        if metrics.get(HEALTH_STATUS, 0) > 0:
            parts.append("[yellow]health!" if metrics[HEALTH_STATUS] == 1 else "[red]health FAIL")
        self.progress.update(
            self._tasks[self._current],
            completed=min(step + 1, self._totals[self._current]),
            stats="  ".join(p for p in parts if p),
        )

    def end_run(self, label: str, status: str, detail: str = "") -> None:
        task = self._tasks.get(label)
        if task is not None:
            self.progress.update(task, stats=f"done ({status})  {self._eval}")
