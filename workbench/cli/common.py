"""What the report commands share: resolving STUDY_OR_RUN to a study in a store (exit 2 when it is none),
MLflow logging to the study's parent run, number formats."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Annotated, Any

import typer

from workbench.analysis.target import Target
from workbench.analysis.target import resolve_target as find_target
from workbench.cli.output import fail
from workbench.errors import AnalysisError

TrackingOpt = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri", help="MLflow store (default: the study's tracking.uri, $MLFLOW_TRACKING_URI, ./mlflow.db)"
    ),
]


def resolve_target(
    arg: str, tracking_uri: str | None = None, *, allow_run: bool = True, settings: bool = True, cache_dir: Any = None
) -> Target:
    """:func:`workbench.analysis.target.resolve_target`; what it cannot resolve is one line, exit 2."""
    try:
        return find_target(arg, tracking_uri, allow_run=allow_run, settings=settings, cache_dir=cache_dir)
    except AnalysisError as e:
        raise fail(str(e)) from None


def log_artifacts_text(tracking_uri: str, run_id: str, files: dict[str, str]) -> list[str]:
    """Log ``{artifact_path: text}`` to a run; returns where each landed (URI)."""
    where, _ = _log_artifacts_text(tracking_uri, run_id, files)
    return where


def log_artifacts_once(
    tracking_uri: str,
    run_id: str,
    files: dict[str, str],
    *,
    tag: str,
    content: Callable[[str, str], str] = lambda path, text: text,
) -> tuple[list[str], bool]:
    """Log ``{artifact_path: text}`` to a run unless these files, with this content, are already there;
    returns where each file is (URI) and whether it was logged now.

    The content's SHA-256 (``content(path, text)`` of each file: it may leave out what changes from call
    to call without changing what a file says, such as when a page was generated) is kept in the run's
    tag ``tag`` once the files are logged; the same hash and every file listed in the run's artifacts
    mean nothing has to be written again."""
    digest = hashlib.sha256()
    for path, text in sorted(files.items()):
        digest.update(f"{len(path)}:{path}".encode())
        body = content(path, text).encode()
        digest.update(f"{len(body)}:".encode() + body)
    sha = digest.hexdigest()
    return _log_artifacts_text(tracking_uri, run_id, files, tag=(tag, sha))


def _log_artifacts_text(
    tracking_uri: str, run_id: str, files: dict[str, str], tag: tuple[str, str] | None = None
) -> tuple[list[str], bool]:
    """Log ``files`` to the run unless ``tag`` (name, value) says they are there; then set the tag."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    root = run.info.artifact_uri.rstrip("/")
    where = [f"{root}/{p}" for p in files]
    if tag is not None and run.data.tags.get(tag[0]) == tag[1]:
        listed = {
            a.path
            for folder in {p.rpartition("/")[0] for p in files}
            for a in client.list_artifacts(run_id, folder or None)
        }
        if listed >= set(files):
            return where, False
    for path, text in files.items():
        client.log_text(run_id, text, path)
    if tag is not None:
        client.set_tag(run_id, *tag)
    return where, True


def fmt_num(v: Any) -> str:
    import pandas as pd  # deferred: keeps `workbench --help` light

    if v is None or v is pd.NA:
        return "—"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(f):
        return "—"
    if math.isinf(f):
        return "∞" if f > 0 else "-∞"
    return f"{f:,.0f}" if abs(f) >= 10_000 else f"{f:.4g}"


def fmt_ci(est: Any, lo: Any, hi: Any, *, thresholds: tuple[float, ...] = ()) -> str:
    """``est [lo, hi]`` as the comparison tables print it: bounds rounded outward, never onto or across
    a threshold (:func:`workbench.compare.wording.ci_text`)."""
    if fmt_num(lo) == "—":
        return fmt_num(est)
    from workbench.compare.wording import ci_text  # deferred: scipy

    return ci_text(float(est), float(lo), float(hi), thresholds=thresholds)


def fmt_p(p: Any) -> str:
    s = fmt_num(p)
    return s if s == "—" else ("<0.001" if float(p) < 0.001 else f"{float(p):.3f}")
