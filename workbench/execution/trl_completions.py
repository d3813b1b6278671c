"""A standalone ``WorkbenchCallback`` run's completions: the files TRL writes with ``GRPOConfig(log_completions=True)``.

TRL 1.16's ``GRPOTrainer.log`` writes ``output_dir/completions/completions_{global_step:05d}.parquet`` (its last
generation batch: prompt, completion, one column per reward function, ``advantage``) *after* the callbacks'
``on_log`` of that step, so the callback reads each file at its next event (the next log, or the end of
training). The rows are what ``workbench import trl`` makes of the same files (the TRL importer's reader,
:func:`workbench.importers.trl.read_completions_file`, and :func:`workbench.importers.completions.completion_rows`),
stored by the run's :class:`~workbench.tracking.rollouts.RolloutRecorder` at the workbench step of the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workbench.importers.completions import Budget, completion_rows
from workbench.importers.errors import ImportSourceError
from workbench.importers.trl import (
    COMPLETIONS_DIR,
    completion_rules,
    completions_file,
    read_completions_file,
    reward_names,
)
from workbench.tracking.rollouts import RolloutRecorder

__all__ = ["NO_LOG_COMPLETIONS", "CompletionFiles"]

log = logging.getLogger("workbench.execution")

NO_LOG_COMPLETIONS = (
    "none: TRL wrote no completions (GRPOConfig(log_completions=False)); set log_completions=True to store them"
)
STEP_RULE = (
    "step = (TRL global step - 1) // TRL optimizer steps per workbench step: the workbench step of the generation "
    "batch; one file per step (TRL writes the same batch at each logging step inside it)"
)


class CompletionFiles:
    """TRL's completion files of one run into ``recorder``, each workbench step once.

    ``per_step``: TRL optimizer steps per workbench step; ``directory``: TRL's ``output_dir``. The callback calls
    :meth:`train_logged` at each of TRL's train logs and :meth:`collect` at every later event."""

    def __init__(self, recorder: RolloutRecorder, output_dir: str | Path, per_step: int) -> None:
        self.recorder, self.per_step = recorder, per_step
        self.directory = Path(output_dir) / COMPLETIONS_DIR
        self.rewards: dict[str, None] = {}  # the reward functions' names, from TRL's rewards/<name>/mean logs
        self.logged: list[int] = []  # TRL global steps logged whose file is not read yet
        self.stored: set[int] = set()  # workbench steps
        self.why_not: dict[int, str] = {}  # workbench step -> why its completions are not stored (yet)
        self.tainted: dict[int, int] = {}  # workbench step -> the global step of an evaluation inside it
        self.files: list[str] = []
        self.rules: list[str] = []
        self.unused: set[str] = set()
        self.budget = Budget()

    def step_of(self, global_step: int) -> int:
        """The workbench step whose generation batch TRL's buffer holds at ``global_step``."""
        return (global_step - 1) // self.per_step

    def train_logged(self, global_step: int, logs: Iterable[str]) -> None:
        """TRL logged training metrics at ``global_step`` (``logs``: their names); it writes that step's file
        right after the callbacks return."""
        self.rewards |= dict.fromkeys(reward_names(logs))
        self.logged.append(global_step)

    def eval_logged(self, global_step: int) -> None:
        """An evaluation ran after ``global_step``: TRL keeps one buffer of completions for train and eval, so
        a file written later inside the same generation batch holds the evaluation's completions."""
        if global_step % self.per_step:  # else the next step generates a new batch first
            self.tainted.setdefault(self.step_of(global_step), global_step)

    def collect(self) -> list[int]:
        """Read the files of the steps logged so far; returns the workbench steps stored now."""
        done = []
        for global_step in self.logged:
            step = self.step_of(global_step)
            if step in self.stored:
                continue
            if global_step > self.tainted.get(step, global_step):
                self.why_not.setdefault(step, f"an evaluation at global step {self.tainted[step]} replaced the batch")
                continue
            path = completions_file(self.directory, global_step)
            try:
                records, rewards, unused = read_completions_file(path, list(self.rewards), self.budget)
            except ImportSourceError as error:  # the user's training goes on; the run's tag says what is missing
                log.warning("completions of step %d not stored: %s", step, error)
                self.why_not[step] = str(error)
                continue
            self.store(step, records)
            self.files.append(str(path))
            self.rules, self.unused = completion_rules(rewards), self.unused | unused
            done.append(step)
        self.logged.clear()
        return done

    def store(self, step: int, records: list[Any]) -> None:
        """One file's records (:class:`~workbench.importers.completions.CompletionRecord`) as ``step``'s rows."""
        for record in records:
            record.step = step
        rows, prompts = [], {}
        for row, prompt, answer in completion_rows(records):
            rows.append(row)
            prompts[row["prompt_id"]] = (prompt, answer)
        self.recorder.record_rows("train", step, rows, prompts)
        self.recorder.end_step(step)
        self.stored.add(step)
        self.why_not.pop(step, None)

    def close(self, steps: int) -> tuple[dict[str, Any], str]:
        """After training (``steps`` workbench steps trained): the rollout log's manifest, and the run's
        ``workbench.rollouts`` tag (``all``, or what is missing and why)."""
        self.collect()
        self.recorder.imported = {
            "framework": "trl",
            "files": list(self.files),
            "rules": [*self.rules, STEP_RULE],
            "columns_not_imported": sorted(self.unused),
        }
        manifest = self.recorder.close()
        missing = [s for s in range(steps) if s not in self.stored]
        rows, dropped = sum(manifest["rows"].values()), sum(manifest["dropped"].values())
        parts = []
        if missing:
            reasons = dict.fromkeys(
                self.why_not.get(s, "TRL wrote no file for it (it writes one at each logging step)") for s in missing
            )
            shown = ", ".join(str(s) for s in missing[:10]) + (", ..." if len(missing) > 10 else "")
            parts.append(f"no completions for {len(missing)} of {steps} steps ({shown}): {'; '.join(reasons)}")
        if dropped:
            parts.append(f"{rows} of {rows + dropped} completions (rollouts_budget_mb; rollouts/manifest.json)")
        return manifest, "; ".join(parts) or "all"
