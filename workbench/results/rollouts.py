"""Read runs' ``rollouts/`` artifacts (every sampled completion, :mod:`workbench.tracking.rollouts`) back
as one frame.

    completions = read_rollouts(reader, runs)   # one row per completion, the rendered prompt joined on

Columns: ``run_id``, then :data:`~workbench.tracking.rollouts.COMPLETION_COLUMNS`, any ``reward.<term>``
columns, then ``prompt`` and ``answer``. A run without the artifacts (imported, logged before they
existed, failed before its first chunk) has no rows; ``frame.attrs["unreadable"]`` maps a run whose
chunks do not parse to why, and ``frame.attrs["manifests"]`` each run's manifest (where written).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pandas as pd

from workbench.results.reader import StudyReader
from workbench.tracking.rollouts import (
    COMPLETION_COLUMNS,
    MANIFEST_ARTIFACT,
    PROMPT_COLUMNS,
    ROLLOUTS_DIR,
    decode_parquet,
)

__all__ = ["earlier_attempt_rollouts", "read_rollouts", "read_run_rollouts", "rollout_files"]


def rollout_files(tracking_uri: str, run_id: str, artifact_uri: str | None) -> list[str]:
    """The run's ``rollouts/*.parquet`` artifact paths, sorted (chunk order)."""
    if artifact_uri and artifact_uri.startswith("file:"):
        folder = Path(unquote(urlparse(artifact_uri).path)) / ROLLOUTS_DIR
        return sorted(f"{ROLLOUTS_DIR}/{p.name}" for p in folder.glob("*.parquet")) if folder.is_dir() else []
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        listed = MlflowClient(tracking_uri).list_artifacts(run_id, ROLLOUTS_DIR)
    except (MlflowException, OSError):
        return []
    return sorted(f.path for f in listed if f.path.endswith(".parquet"))


def read_run_rollouts(reader: Any, run_id: str, artifact_uri: str | None) -> tuple[pd.DataFrame, dict | None]:
    """One run's completions with their prompts, and its manifest (None if absent). ``reader`` is a
    :class:`~workbench.results.reader.StudyReader`; ``ValueError`` when a chunk is not the format."""
    completions, prompts = [], []
    for path in rollout_files(reader.tracking_uri, run_id, artifact_uri):
        data = reader.read_artifact_bytes(run_id, artifact_uri, path)
        if data is None:
            continue
        name = path.rsplit("/", 1)[-1]
        if name.startswith("completions-"):
            completions.append(decode_parquet(data, COMPLETION_COLUMNS, path))
        elif name.startswith("prompts-"):
            prompts.append(decode_parquet(data, PROMPT_COLUMNS, path))
    text = reader.read_artifact_text(run_id, artifact_uri, MANIFEST_ARTIFACT)
    manifest = json.loads(text) if text else None
    if not completions:
        return pd.DataFrame(), manifest
    frame = pd.concat(completions, ignore_index=True)
    table = (
        pd.concat(prompts, ignore_index=True).drop_duplicates("prompt_id")
        if prompts
        else pd.DataFrame({c: pd.Series([], dtype="string") for c in PROMPT_COLUMNS})
    )
    frame = frame.merge(table, on="prompt_id", how="left", validate="many_to_one")
    return frame.assign(run_id=run_id), manifest


def read_rollouts(reader: Any, runs: pd.DataFrame) -> pd.DataFrame:
    """Every completion of ``runs`` (rows of a ``runs`` frame: ``run_id``, ``artifact_uri``), read in parallel.
    See the module docstring for the columns and attrs."""
    todo = list(zip(runs["run_id"], runs["artifact_uri"], strict=True))
    frames, unreadable, manifests = [], {}, {}
    if todo:
        with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
            futures = [(rid, pool.submit(read_run_rollouts, reader, rid, art)) for rid, art in todo]
            for rid, future in futures:
                try:
                    frame, manifest = future.result()
                except ValueError as error:  # not the format: said in attrs, never a crash
                    unreadable[rid] = str(error)
                    continue
                if manifest is not None:
                    manifests[rid] = manifest
                if len(frame):
                    frames.append(frame)
    if frames:
        out = pd.concat(frames, ignore_index=True)
    else:
        out = pd.DataFrame({c: pd.Series([], dtype=object) for c in COMPLETION_COLUMNS + PROMPT_COLUMNS[1:]})
        out["run_id"] = pd.Series([], dtype="string")
    first = ["run_id", *COMPLETION_COLUMNS]
    out = out[first + [c for c in out.columns if c not in first]]
    out.attrs["unreadable"] = unreadable
    out.attrs["manifests"] = manifests
    return out


def earlier_attempt_rollouts(tracking_uri: str, run_id: str, run_key: str, before_step: int) -> pd.DataFrame | None:
    """For a run resumed at ``before_step``: the rows of steps before it that the latest earlier attempt of
    ``run_key`` in the run's experiment stored (None if there is none). That attempt flushed its rollout log
    at each checkpoint, so every step the resume does not run again is there."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_run(run_id).info.experiment_id
    attempts = [
        r
        for r in client.search_runs(
            [experiment], f"tags.`workbench.run_key` = '{run_key}'", order_by=["attributes.start_time DESC"]
        )
        if r.info.run_id != run_id and r.info.status in ("FAILED", "KILLED")
    ]
    if not attempts:
        return None
    source = attempts[0].info
    frame, _ = read_run_rollouts(StudyReader(tracking_uri, cache_dir=False), source.run_id, source.artifact_uri)
    if not len(frame):
        return None
    return frame[frame["step"] < before_step].reset_index(drop=True)
