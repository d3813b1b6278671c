"""CLI-style overrides (``workbench run --set a.b.c=value``) of a study, a run config or a dict."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from pydantic import ValidationError

from workbench.config import RunConfig
from workbench.errors import format_path, pydantic_issues
from workbench.study.load import validate
from workbench.study.paths import MISSING, config_fields_at, config_path_error, get_path, set_path
from workbench.study.report import Loc, Origin, Path_, StudyError, StudyIssue
from workbench.study.schema import Study
from workbench.study.yaml_positions import parse_value, yaml_issue

__all__ = ["apply_overrides", "parse_override"]


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"learner.lr=3e-4"`` -> (``["learner", "lr"]``, ``0.0003``); the value is parsed as YAML."""
    where = f"(--set {text})"
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise StudyError([StudyIssue("expected KEY=VALUE, e.g. learner.lr=3e-4", file=where)])
    parts = key.split(".")
    if any(not p for p in parts):
        raise StudyError([StudyIssue(f"malformed key {key!r}: expected dotted names like learner.lr", file=where)])
    try:
        value = parse_value(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        issue = yaml_issue(err, None, f"invalid YAML value {raw.strip()!r}")
        raise StudyError([StudyIssue(issue.message, file=where)]) from None
    return parts, value


def _looks_like_study(data: dict[str, Any]) -> bool:
    return any(k in data for k in ("name", "base", "variants", "grid", "seeds", "include"))


def _override_study_dict(
    data: dict[str, Any], overrides: Iterable[str], origin: Origin | None = None
) -> dict[str, Any]:
    """Study-dict overrides (see ``apply_overrides``); ``origin`` gets the ``--set`` locations."""
    data = dict(data)
    issues: list[StudyIssue] = []
    for text in overrides:
        parts, value = parse_override(text)
        where = f"(--set {text})"
        head = parts[0]
        targets: list[Path_]
        if head in ("grid", "zip"):
            targets = [(head,) if len(parts) == 1 else (head, ".".join(parts[1:]))]
        elif head in Study.model_fields and head not in ("health", "tracking"):
            targets = [tuple(parts)]
        else:  # a run-config path: every run gets it, whatever base or a variant says
            dotted = ".".join(parts)
            problem = config_path_error(dotted)
            if problem:
                issues.append(StudyIssue(problem, dotted, where))
                continue
            clash = [
                (field, axis)
                for field in ("grid", "zip")
                for axis in (data.get(field) or {})
                if axis == dotted or axis.startswith(dotted + ".") or dotted.startswith(axis + ".")
            ]
            if clash:
                field, axis = clash[0]
                issues.append(
                    StudyIssue(
                        f"{axis!r} is a {field} axis of this study; set its values with --set {field}.{axis}=[...]",
                        dotted,
                        where,
                    )
                )
                continue
            targets = [tuple(parts) if head in ("health", "tracking") else ("base", *parts)]
            for vname, over in (data.get("variants") or {}).items():
                if isinstance(over, dict) and get_path(over, parts) is not MISSING:
                    targets.append(("variants", vname, *parts))
        for target in targets:
            try:
                if len(target) == 1:
                    data[target[0]] = value
                else:
                    set_path(data, target, value)
            except ValueError as err:
                issues.append(StudyIssue(str(err), format_path(target), where))
                continue
            if origin is not None:
                for p in [p for p in origin.locs if p[: len(target)] == target]:
                    del origin.locs[p]
                origin.locs[target] = Loc(where, None)
    if issues:
        raise StudyError(issues)
    return data


def apply_overrides(data: Any, overrides: Iterable[str]) -> Any:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML); returns a new object.

    * a ``Study``: paths starting with a study field set that field (``seeds=[0]``,
      ``variants.dapo.learner.lr=1e-4``, ``grid.learner.lr=[1e-4, 3e-4]``); run-config paths
      (``rollout.steps=5``) apply to every run, winning over base and variants (``health.*`` and
      ``tracking.*`` set the study's sections). The result is validated (``StudyError``).
    * a ``RunConfig``: a new validated ``RunConfig``.
    * a dict: a study-shaped dict (has ``name``/``base``/...) is treated like a study (returns a
      dict, not validated); any other dict as a run config (paths set as given).
    """
    overrides = list(overrides)
    if isinstance(data, Study):
        origin = data._origin.copy() if data._origin else Origin()
        return validate(_override_study_dict(data.model_dump(), overrides, origin), origin)
    if isinstance(data, RunConfig):
        tree = apply_overrides(data.model_dump(mode="python"), overrides)
        try:
            return RunConfig.model_validate(tree)
        except ValidationError as err:
            raise StudyError(
                StudyIssue(msg, format_path(loc), "(--set)") for loc, msg in pydantic_issues(err, config_fields_at)
            ) from None
    if not isinstance(data, dict):
        raise TypeError(f"apply_overrides: expected a Study, RunConfig or dict, got {type(data).__name__}")
    if _looks_like_study(data):
        return _override_study_dict(data, overrides)
    out = dict(data)
    for text in overrides:
        parts, value = parse_override(text)
        try:
            set_path(out, parts, value)
        except ValueError as err:
            raise StudyError([StudyIssue(str(err), file=f"(--set {text})")]) from None
    return out
