"""Read a framework's runs, from an MLflow store or from its own log files, into :class:`SourceRun`s.

Everything here only reads; :mod:`workbench.importers.write` writes. Each source run gets a
``key`` saying what it is made from (the source run id, or the SHA-256 of the file's bytes), so
importing the same source twice finds the runs it already wrote; the imported run's identity
(its ``run_key``) is given by :func:`workbench.importers.write.identity_key`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.tracking.check import check_store
from workbench.tracking.redact import redact_uri
from workbench.tracking.store import sqlite_file

from .adapters import Adapter
from .errors import ImportSourceError
from .validate import BadLines, Points, file_sha256, regular_file_size

__all__ = ["SourceRun", "parse_selector", "runs_from_files", "runs_from_mlflow"]

SELECTOR_KINDS = ("param", "tag")


@dataclass
class SourceRun:
    """One run of the source framework, before mapping: metric names as the framework logged them."""

    key: str  # what the run is made from (source run id or file content, digested): workbench.source_digest
    variant: str
    seed: int
    origin: dict[str, str]  # workbench.source_* tags: where it came from
    steps: Points  # (step, {source name: value}), ascending; re-iterable (a file is re-read, not kept)
    params: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"
    name: str = ""  # the source run's own name, if any
    bad_lines: BadLines | None = None  # a file's malformed lines (counted with --skip-bad-lines)
    identity: str = ""  # the imported run's run_key (write.identity_key: study, framework, variant, seed, source id)
    completions: Any = None  # the completions the framework dumped (importers.completions.ImportedCompletions)

    @property
    def label(self) -> str:
        return f"{self.variant}/seed={self.seed}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def parse_selector(text: str, option: str) -> tuple[str, str]:
    """``param:loss_type`` -> ``("param", "loss_type")``; anything else is bad input."""
    kind, sep, name = text.partition(":")
    if not sep or kind not in SELECTOR_KINDS or not name:
        raise ImportSourceError(f"{option} expects param:NAME or tag:NAME, got {text!r}")
    return kind, name


def _seed(value: Any, where: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = math.nan
    if not math.isfinite(f) or f != int(f):
        raise ImportSourceError(f"{where}: seed {value!r} is not an integer")
    return int(f)


# --------------------------------------------------------------------------------------------
# From an MLflow store
# --------------------------------------------------------------------------------------------


def _open_store(uri: str):
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///") and not sqlite_file(uri).is_file():
        raise ImportSourceError(f"--from {redact_uri(uri)}: no MLflow store there (no such sqlite file)")
    if "://" not in uri and not uri.startswith(("sqlite:", "file:")):
        raise ImportSourceError(
            f"--from {redact_uri(uri)}: not a tracking URI (sqlite:///PATH, postgresql://..., http://...)"
        )
    check_store(uri, create=False)  # a corrupt file, wrong password, unreachable server: one line, exit 2
    return MlflowClient(uri)


def _selected(run: Any, kind: str, name: str) -> str | None:
    values = run.data.params if kind == "param" else run.data.tags
    return values.get(name)


def runs_from_mlflow(adapter: Adapter, uri: str, experiment: str, variant_by: str, seed_by: str) -> list[SourceRun]:
    """Every run of ``experiment`` in the store ``uri``: variant and seed from the param or tag
    named by ``variant_by`` / ``seed_by`` (``param:NAME`` or ``tag:NAME``), full metric histories."""
    vkind, vname = parse_selector(variant_by, "--variant-by")
    skind, sname = parse_selector(seed_by, "--seed-by")
    client = _open_store(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise ImportSourceError(
            f"--experiment {experiment!r}: no such experiment in {redact_uri(uri)} "
            f"(experiments: {', '.join(names) or 'none'})"
        )
    runs = []
    token = None
    while True:  # paged: an experiment may hold more runs than one page
        page = client.search_runs(
            [exp.experiment_id], max_results=1000, page_token=token, order_by=["attributes.start_time ASC"]
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    runs = [r for r in runs if r.data.tags.get("workbench.role") is None]  # never re-import our own runs
    if not runs:
        raise ImportSourceError(f"--experiment {experiment!r} in {redact_uri(uri)} has no runs to import")
    for kind, name, option in ((vkind, vname, "--variant-by"), (skind, sname, "--seed-by")):
        lacking = [r for r in runs if _selected(r, kind, name) is None]
        if lacking:
            have = sorted(lacking[0].data.params if kind == "param" else lacking[0].data.tags)
            shown = ", ".join(have[:12]) + (", ..." if len(have) > 12 else "")
            raise ImportSourceError(
                f"{option} {kind}:{name}: run {lacking[0].info.run_id} of experiment {experiment!r} has no "
                f"{kind} {name!r} ({len(lacking)} of {len(runs)} runs lack it; its {kind}s: {shown or 'none'})"
            )
    out = []
    for r in runs:
        rid = r.info.run_id
        seed = _seed(_selected(r, skind, sname), f"run {rid} ({skind}:{sname})")
        steps = _history(client, rid, list(r.data.metrics))
        out.append(
            SourceRun(
                key=_digest(adapter.framework, "mlflow-run", rid),
                variant=str(_selected(r, vkind, vname)),
                seed=seed,
                origin={
                    "workbench.source_run": rid,
                    "workbench.source_uri": redact_uri(uri),
                    "workbench.source_experiment": experiment,
                },
                steps=Points.of(steps, f"source run {rid}"),
                params=dict(r.data.params),
                status=r.info.status,
                name=r.info.run_name or "",
            )
        )
    _check_unique_labels(out)
    return out


def _history(client: Any, run_id: str, keys: Sequence[str]) -> list[tuple[int, dict[str, float]]]:
    by_step: dict[int, dict[str, float]] = {}
    for key in keys:
        points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        for m in points:  # a step logged twice keeps the latest value
            by_step.setdefault(int(m.step), {})[key] = float(m.value)
    return sorted(by_step.items())


def _check_unique_labels(runs: list[SourceRun]) -> None:
    seen: dict[str, str] = {}
    for r in runs:
        where = r.origin.get("workbench.source_run") or r.origin.get("workbench.source_file", "")
        if r.label in seen:
            raise ImportSourceError(
                f"two source runs have variant {r.variant!r} and seed {r.seed} "
                f"({seen[r.label]} and {where}): pick --variant-by/--seed-by that tell them apart"
            )
        seen[r.label] = where


# --------------------------------------------------------------------------------------------
# From files
# --------------------------------------------------------------------------------------------


def runs_from_files(
    adapter: Adapter,
    paths: Sequence[str],
    variant: str,
    seeds: Sequence[int],
    skip_bad_lines: bool = False,
    rollouts: Sequence[str] = (),
    eval_rollouts: Sequence[str] = (),
) -> list[SourceRun]:
    """One run per file, all of ``variant``; ``seeds``: one (a single file) or one per file, in order.
    ``rollouts`` / ``eval_rollouts``: none or one directory per file, the train / eval completions the
    framework dumped (read whole and checked here); without ``rollouts``, a directory the framework writes
    beside its metric file (TRL's ``completions/``) is read when it is there.

    Only checks that each path is a regular file within the limits here; its lines are read (and
    checked) by :func:`workbench.importers.validate.check_import`, streaming."""
    if not paths:
        raise ImportSourceError("give FILE... or --from URI --experiment NAME")
    if len(seeds) != len(paths):
        raise ImportSourceError(f"--seed: give one per file ({len(paths)} files, {len(seeds)} seeds)")
    for option, dirs, split in (("--rollouts", rollouts, "train"), ("--eval-rollouts", eval_rollouts, "eval")):
        if dirs and (adapter.completions_reader is None or split not in adapter.completion_splits):
            raise ImportSourceError(
                f"{option}: {adapter.framework} does not dump {split} completions "
                f"({adapter.framework} dumps: {', '.join(adapter.completion_splits) or 'none'})"
            )
        if dirs and len(dirs) != len(paths):
            raise ImportSourceError(
                f"{option}: give one directory per file ({len(paths)} files, {len(dirs)} directories)"
            )
    out = []
    for i, (path, seed) in enumerate(zip(paths, seeds, strict=True)):
        p = Path(path)
        if p.is_dir():
            raise ImportSourceError(f"{path} is a directory; give {adapter.file_kind}")
        regular_file_size(path)  # FIFOs and devices refused before anything opens them
        bad = BadLines(path, skip_bad_lines)
        digest = file_sha256(path)
        origin = {"workbench.source_file": str(p.resolve()), "workbench.source_sha256": digest}
        completions = _completions(
            adapter, path, rollouts[i] if rollouts else None, eval_rollouts[i] if eval_rollouts else None, origin
        )
        key = _digest(adapter.framework, "file", digest)
        if completions is not None:  # completions that grew change what the run is made from, too
            key = _digest(adapter.framework, "file", digest, completions.digest)
        out.append(
            SourceRun(
                key=key,
                variant=variant,
                seed=seed,
                origin=origin,
                steps=Points(lambda path=path, bad=bad: adapter.file_reader(path, bad), bad.reset),
                name=p.name,
                bad_lines=bad,
                completions=completions,
            )
        )
    _check_unique_labels(out)
    return out


def _completions(
    adapter: Adapter, path: str, train_dir: str | None, eval_dir: str | None, origin: dict[str, str]
) -> Any:
    """The run's dumped completions (its train and eval directories as one set of chunks), or None; each
    directory read is named in ``origin`` (``workbench.source_rollouts`` / ``workbench.source_eval_rollouts``)."""
    if adapter.completions_reader is None:
        return None
    if train_dir is None and adapter.completions_beside is not None:
        train_dir = adapter.completions_beside(path)
    dumps = []
    for directory, split, tag in (
        (train_dir, "train", "workbench.source_rollouts"),
        (eval_dir, "eval", "workbench.source_eval_rollouts"),
    ):
        if directory is not None:
            dumps.append(adapter.completions_reader(directory, split, path))
            origin[tag] = str(Path(directory).resolve())
    if not dumps:
        return None
    from .completions import ImportedCompletions  # deferred: pyarrow

    return ImportedCompletions.build(adapter.framework, dumps)
