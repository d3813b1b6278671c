"""Which study (and maybe which of its runs) a command's STUDY_OR_RUN argument means, in which store."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import AnalysisError
from workbench.safe_io import load_yaml
from workbench.tracking.check import check_store
from workbench.tracking.store import resolve_tracking_uri
from workbench.tracking.writer import DEFAULT_OUTAGE_DEADLINE_S

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Target:
    """A study (and maybe one of its runs) in a store."""

    study: str  # the MLflow experiment
    tracking_uri: str
    reader: Any  # StudyReader
    compare: dict[str, Any] = field(default_factory=dict)  # the study's `compare:` section, if known
    run_id: str | None = None  # a single child run, when a run id was given
    variants_order: list[str] = field(default_factory=list)  # the study file's variant order, if known


def resolve_target(
    arg: str, tracking_uri: str | None = None, *, allow_run: bool = True, settings: bool = True, cache_dir: Any = None
) -> Target:
    """``arg`` is a study YAML file, a study (experiment) name, or a run id (child or parent run).

    ``settings``: for a name or run id, read ``compare:`` and the variant order from the
    ``study.yaml`` the parent run logged. A study file that does not load, a store that cannot be
    used, or a name that is no study in it: :class:`AnalysisError` with one line."""

    path = Path(arg)
    compare: dict[str, Any] = {}
    order: list[str] = []
    if path.suffix in (".yaml", ".yml") or path.is_file():
        from workbench.study import StudyError, expand, load_study  # deferred: pydantic

        try:
            study = load_study(path)
            specs = expand(study)
        except (StudyError, FileNotFoundError, ValueError) as e:
            raise AnalysisError(str(e)) from e
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
        # a corrupt or empty file, wrong password, unreachable server: one line naming the store
        check_store(uri, create=False, deadline_s=deadline_s)
        reader = StudyReader(uri, cache_dir=cache_dir)
        if not reader.has_study(name):
            info = reader.run_info(arg) if allow_run and _RUN_ID.match(arg) else None
            if info is None:
                reader.experiment_id(name)  # raises StudyNotFound listing the studies
            name = info["experiment"]
            run_id = None if info.get("role") == "study" else arg
    except (StudyNotFound, ValueError) as e:
        raise AnalysisError(str(e)) from e
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
    run = client.create_run(
        exp.experiment_id,
        run_name=f"study:{target.study}",
        tags={"workbench.role": "study", "workbench.study": target.study},
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
