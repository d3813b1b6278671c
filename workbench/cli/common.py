"""What the report commands share: resolving STUDY_OR_RUN to a study in a store, errors, MLflow
logging to the study's parent run."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from workbench.cli.output import fail
from workbench.safe_io import load_yaml
from workbench.tracking.check import check_store
from workbench.tracking.store import resolve_tracking_uri
from workbench.tracking.writer import DEFAULT_OUTAGE_DEADLINE_S

console = Console()
err_console = Console(stderr=True)

TrackingOpt = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow store (default: the study's "
                                                 "tracking.uri, $MLFLOW_TRACKING_URI, ./mlflow.db)")]
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def note(message: str) -> None:
    err_console.print(message, highlight=False, soft_wrap=True)


@dataclass
class Target:
    """A study (and maybe one of its runs) in a store."""

    study: str  # the MLflow experiment
    tracking_uri: str
    reader: Any  # StudyReader
    compare: dict[str, Any] = field(default_factory=dict)  # the study's `compare:` section, if known
    run_id: str | None = None  # a single child run, when a run id was given
    variants_order: list[str] = field(default_factory=list)  # the study file's variant order, if known


def resolve_target(arg: str, tracking_uri: str | None = None, *, allow_run: bool = True,
                   settings: bool = True, cache_dir: Any = None) -> Target:
    """``arg`` is a study YAML file, a study (experiment) name, or a run id (child or parent run).

    ``settings``: for a name or run id, read ``compare:`` and the variant order from the
    ``study.yaml`` the parent run logged."""

    path = Path(arg)
    compare: dict[str, Any] = {}
    order: list[str] = []
    if path.suffix in (".yaml", ".yml") or path.is_file():
        from workbench.study import StudyError, expand, load_study  # deferred: pydantic

        try:
            study = load_study(path)
            specs = expand(study)
        except (StudyError, FileNotFoundError, ValueError) as e:
            raise fail(str(e)) from None
        cfg = specs[0].config if specs else None
        uri = tracking_uri or resolve_tracking_uri(cfg.tracking.uri if cfg else None)
        name = (cfg.tracking.experiment if cfg else None) or study.name
        compare = dict(study.compare or {})
        order = list(study.variants)
        run_id = None
        deadline_s = cfg.tracking.outage_deadline_s if cfg else DEFAULT_OUTAGE_DEADLINE_S  # as `run` would wait
    else:
        uri = tracking_uri or resolve_tracking_uri()
        deadline_s = DEFAULT_OUTAGE_DEADLINE_S
        name, run_id = arg, None
    from workbench.results.reader import StudyNotFound, StudyReader  # deferred: pandas

    try:
        # a corrupt or empty file, wrong password, unreachable server: one line naming the store, exit 2
        check_store(uri, create=False, deadline_s=deadline_s)
        reader = StudyReader(uri, cache_dir=cache_dir)
        if not reader.has_study(name):
            info = reader.run_info(arg) if allow_run and _RUN_ID.match(arg) else None
            if info is None:
                reader.experiment_id(name)  # raises StudyNotFound listing the studies
            name = info["experiment"]
            run_id = None if info.get("role") == "study" else arg
    except StudyNotFound as e:
        raise fail(str(e)) from None
    except ValueError as e:
        raise fail(str(e)) from None
    if settings and not compare:
        compare, order = _logged_study_settings(reader, name)
    return Target(name, uri, reader, compare, run_id, order)


def _logged_study_settings(reader: Any, study: str) -> tuple[dict[str, Any], list[str]]:
    """``compare:`` and variant order from the ``study.yaml`` the parent run logged (best effort)."""
    try:
        parent = reader.parent_run_id(study)
        if parent is None:
            return {}, []
        info = reader.run_info(parent)
        text = reader.read_artifact_text(parent, info and info.get("artifact_uri"), "study.yaml")
        data = load_yaml(text, "study.yaml")[1] if text else None  # aliases and depth bounded
    except Exception:  # noqa: BLE001 - settings are a convenience; defaults apply
        return {}, []
    if not isinstance(data, dict):
        return {}, []
    compare = data.get("compare") if isinstance(data.get("compare"), dict) else {}
    variants = data.get("variants") if isinstance(data.get("variants"), dict) else {}
    return dict(compare), list(variants)


def parent_run(target: Target, *, create: bool = True) -> str | None:
    """The study's parent run id; created (``workbench.role=study``, FINISHED) if it has none."""
    run_id = target.reader.parent_run_id(target.study)
    if run_id is not None or not create:
        return run_id
    from mlflow import MlflowClient

    client = MlflowClient(target.tracking_uri)
    exp = client.get_experiment_by_name(target.study)
    run = client.create_run(exp.experiment_id, run_name=f"study:{target.study}",
                            tags={"workbench.role": "study", "workbench.study": target.study})
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def log_artifacts_text(tracking_uri: str, run_id: str, files: dict[str, str]) -> list[str]:
    """Log ``{artifact_path: text}`` to a run; returns where each landed (URI)."""
    where, _ = _log_artifacts_text(tracking_uri, run_id, files)
    return where


def log_artifacts_once(tracking_uri: str, run_id: str, files: dict[str, str], *, tag: str,
                       content: Callable[[str, str], str] = lambda path, text: text) -> tuple[list[str], bool]:
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


def _log_artifacts_text(tracking_uri: str, run_id: str, files: dict[str, str],
                        tag: tuple[str, str] | None = None) -> tuple[list[str], bool]:
    """Log ``files`` to the run unless ``tag`` (name, value) says they are there; then set the tag."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    root = run.info.artifact_uri.rstrip("/")
    where = [f"{root}/{p}" for p in files]
    if tag is not None and run.data.tags.get(tag[0]) == tag[1]:
        listed = {a.path for folder in {p.rpartition("/")[0] for p in files}
                  for a in client.list_artifacts(run_id, folder or None)}
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


def fmt_ci(est: Any, lo: Any, hi: Any) -> str:
    if fmt_num(lo) == "—":
        return fmt_num(est)
    return f"{fmt_num(est)} [{fmt_num(lo)}, {fmt_num(hi)}]"


def fmt_p(p: Any) -> str:
    s = fmt_num(p)
    return s if s == "—" else ("<0.001" if float(p) < 0.001 else f"{float(p):.3f}")
