"""Runs that TRL or verl logged to a tracker (TensorBoard, W&B), as :class:`SourceRun`s for an adapter.

A tracker reader (:mod:`.tensorboard`, :mod:`.wandb`) returns a :class:`TrackedRun`: scalars
under the names the tracker got, at the tracker's step. This module turns those names back into
the names the framework logged, so the framework's own adapter (:mod:`.trl`, :mod:`.verl`) maps them:

* TRL goes through ``transformers.Trainer``'s ``TensorBoardCallback`` / ``WandbCallback``, which
  rename every key with ``rewrite_logs`` (``reward`` -> ``train/reward``, ``eval_loss`` ->
  ``eval/loss``); ``WandbCallback`` logs at W&B's own step counter and adds ``train/global_step``,
  which is the trainer's step.
* verl's ``Tracking`` logs its keys unchanged at its step (``verl/utils/tracking.py``:
  ``_TensorboardAdapter.log`` -> ``add_scalar(key, value, step)``; ``wandb.log(data, step=step)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .adapters import Adapter
from .errors import ImportSourceError
from .load import SourceRun, _check_unique_labels, _digest
from .validate import BadLines, Points, step_number

__all__ = ["FRAMEWORK_NAMING", "TrackedRun", "guess_framework", "runs_from_tracker", "source_steps"]


@dataclass
class TrackedRun:
    """One run as a tracker stored it (before any framework naming is undone)."""

    scalars: list[tuple[int, dict[str, float]]]  # (tracker step, {tracked name: value}), ascending
    digest: str  # SHA-256 of the run's files: the imported run's identity
    params: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"
    name: str = ""
    run_id: str = ""  # the tracker's own run id, where it has one (W&B): part of the imported run's identity


def _hf_source_name(tracked: str) -> str:
    """Undo ``transformers.integrations.rewrite_logs``: ``train/x`` -> ``x``, ``eval/x`` -> ``eval_x``."""
    for prefix, original in (("train/", ""), ("eval/", "eval_"), ("test/", "test_")):
        if tracked.startswith(prefix):
            return original + tracked[len(prefix) :]
    return tracked


@dataclass(frozen=True)
class Naming:
    """How a framework's metric names and steps reach a tracker."""

    source_name: Callable[[str], str]
    step_key: str | None = None  # a logged scalar that holds the framework's step (W&B's own step is not it)


FRAMEWORK_NAMING: dict[str, Naming] = {
    "trl": Naming(_hf_source_name, step_key="train/global_step"),
    "verl": Naming(lambda tracked: tracked),
}


def source_steps(
    framework: str, scalars: list[tuple[int, dict[str, float]]], where: str = ""
) -> list[tuple[int, dict[str, float]]]:
    """Tracker rows -> ``[(framework step, {framework's metric name: value})]`` (same step merged, later wins).
    A logged step (``train/global_step``) that is not a 64-bit integer is an ``ImportSourceError`` naming ``where``."""
    naming = FRAMEWORK_NAMING[framework]
    by_step: dict[int, dict[str, float]] = {}
    for step, row in scalars:
        if naming.step_key is not None and naming.step_key in row:
            value = row[naming.step_key]
            if math.isfinite(value):
                try:
                    if value != int(value):
                        raise ValueError(f"step {value!r} is not an integer")
                    step = step_number(int(value))
                except ValueError as e:
                    raise ImportSourceError(
                        f"{where or 'a tracked run'}: {naming.step_key} at tracker step {step}: {e}"
                    ) from None
        merged = by_step.setdefault(step, {})
        for name, value in row.items():
            if name != naming.step_key:
                merged[naming.source_name(name)] = value
    return sorted(by_step.items())


def guess_framework(adapters: dict[str, Adapter], names: set[str], where: str) -> str:
    """The framework whose adapter knows most of ``names`` (after undoing its tracker naming)."""
    known = {
        fw: len({FRAMEWORK_NAMING[fw].source_name(n) for n in names} & {m.source for m in a.mappings})
        for fw, a in adapters.items()
        if fw in FRAMEWORK_NAMING
    }
    best = max(known.values(), default=0)
    winners = sorted(fw for fw, n in known.items() if n == best)
    if best == 0 or len(winners) > 1:
        raise ImportSourceError(
            f"{where}: cannot tell which framework logged it ({', '.join(sorted(names)[:6])}, ...): "
            f"give --framework {' or '.join(sorted(FRAMEWORK_NAMING))}"
        )
    return winners[0]


def runs_from_tracker(
    adapters: dict[str, Adapter],
    tracker: str,
    reader: Callable[[Path, BadLines], TrackedRun],
    paths: Sequence[str],
    framework: str | None,
    variant: str,
    seeds: Sequence[int],
    skip_bad_lines: bool = False,
) -> tuple[Adapter, list[SourceRun]]:
    """One run per path (a TensorBoard log directory, a W&B run directory), all of ``variant``;
    the framework named or, with ``None``, guessed from the metric names of the first run. A record
    the reader cannot read whole (a CRC error, a value beyond a float) is an error, or with
    ``skip_bad_lines`` left out and counted (the run's ``bad_lines``, printed in the import's summary)."""
    if not paths:
        raise ImportSourceError(f"give the {tracker} run directories to import")
    if len(seeds) != len(paths):
        raise ImportSourceError(f"--seed: give one per run directory ({len(paths)} directories, {len(seeds)} seeds)")
    if framework is not None and framework not in FRAMEWORK_NAMING:
        raise ImportSourceError(
            f"--framework {framework!r}: runs in {tracker} can be imported from {' or '.join(sorted(FRAMEWORK_NAMING))}"
        )
    bads = [BadLines(p, skip_bad_lines, unit="record") for p in paths]
    tracked = [
        (Path(p), reader(Path(p), bad)) for p, bad in zip(paths, bads, strict=True)
    ]  # all read before any is mapped
    if framework is None:
        first_path, first = tracked[0]
        framework = guess_framework(adapters, {n for _, row in first.scalars for n in row}, str(first_path))
    adapter = adapters[framework]
    out = []
    for (path, run), seed, bad in zip(tracked, seeds, bads, strict=True):
        steps = source_steps(framework, run.scalars, str(path))
        if not any(metrics for _, metrics in steps):
            raise ImportSourceError(f"{path} holds no scalar metrics")
        out.append(
            SourceRun(
                key=_digest(adapter.framework, tracker, run.digest),
                variant=variant,
                seed=seed,
                origin={
                    "workbench.source_file": str(path.resolve()),
                    "workbench.source_tracker": tracker,
                    "workbench.source_sha256": run.digest,
                    **({"workbench.source_wandb_run": run.run_id} if tracker == "wandb" and run.run_id else {}),
                },
                steps=Points.of(steps, str(path)),
                params=run.params,
                status=run.status,
                name=run.name or path.name,
                bad_lines=bad,
            )
        )
    _check_unique_labels(out)
    return adapter, out
