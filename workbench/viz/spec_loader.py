"""Dashboard spec files: finding them by name, reading and validating them with errors that
name the file, line and field, e.g.
``dashboards/mine.yaml:7: panels[1].aggregation: must be one of mean, iqm, none (got 'median')``.

The schema itself is :mod:`workbench.viz.spec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from workbench.errors import UserFileError, did_you_mean, explain_pydantic_error
from workbench.safe_io import load_yaml, read_text

from .spec import DashboardSpec, LayoutSpec, PanelDefaults, PanelSpec, SpecError

__all__ = ["builtin_spec_dirs", "find_spec", "list_specs", "load_spec", "parse_spec"]


def _loc_str(loc: Sequence[Any]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _node_at(node: Any, loc: Sequence[Any]) -> Any:
    for p in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == p:
                    nxt = k if p == loc[-1] else v
                    break
            if nxt is None:
                return node
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
            node = node.value[p]
        else:
            return node
    return node


_FIELDS = {"": DashboardSpec, "layout": LayoutSpec, "defaults": PanelDefaults, "panels": PanelSpec}


def _explain(err: dict[str, Any]) -> str:
    """The shared explanation (:func:`workbench.errors.explain_pydantic_error`), with the fields
    of the spec section that holds an unknown key for its did-you-mean."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal"))))
    valid = None
    if err["type"] == "extra_forbidden":
        parent = next((str(p) for p in reversed(loc[:-1]) if isinstance(p, str)), "")
        model = _FIELDS.get(parent, DashboardSpec)
        valid = [*model.model_fields, *(["metric"] if model is PanelSpec else [])]
    return explain_pydantic_error({**err, "loc": loc}, valid)


def parse_spec(text: str, source: str = "<spec>") -> DashboardSpec:
    """Validate spec YAML text; ``SpecError`` lists every problem as ``source:line: field: message``."""
    try:
        root, data = load_yaml(text, source)  # aliases counted, depth capped (workbench/safe_io.py)
    except UserFileError as e:
        raise SpecError(source, [str(e)]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SpecError(source, [f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}"]) from None
    if not isinstance(data, dict):
        raise SpecError(source, [f"{source}: a dashboard spec is a mapping with `panels:` (got {type(data).__name__})"])
    if not data.get("name"):
        data["name"] = Path(source).stem if source != "<spec>" else "dashboard"
    try:
        return DashboardSpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal")))]
            node = _node_at(root, loc)
            line = f":{node.start_mark.line + 1}" if node is not None and hasattr(node, "start_mark") else ""
            where = _loc_str(loc)
            problems.append(f"{source}{line}: {where + ': ' if where else ''}{_explain(err)}")
        raise SpecError(source, problems) from None


MAX_SPEC_BYTES = 1 << 20  # 1 MiB: a spec is a few KiB


def load_spec(path: str | Path) -> DashboardSpec:
    """Read and validate a spec file (``SpecError`` on any problem, naming the file). A regular file
    only, at most ``MAX_SPEC_BYTES``; one found in a spec folder (:func:`builtin_spec_dirs`) must
    resolve inside it (a symlink out of ``./dashboards`` is refused)."""
    path = Path(path)
    folder = path.parent.resolve() if path.parent.resolve() in builtin_spec_dirs() else None
    try:
        text = read_text(path, limit=MAX_SPEC_BYTES, what="dashboard spec", inside=folder)
    except UserFileError as e:
        raise SpecError(str(path), [str(e)]) from None
    return parse_spec(text, str(path))


def builtin_spec_dirs() -> list[Path]:
    """Where named specs are looked up: ``./dashboards``, then the project's ``dashboards/``."""
    project = Path(__file__).resolve().parents[2] / "dashboards"
    dirs = [Path.cwd() / "dashboards", project]
    return list(dict.fromkeys(d.resolve() for d in dirs))


def list_specs() -> dict[str, Path]:
    """``name -> file`` of every spec found in :func:`builtin_spec_dirs` (first one wins)."""
    out: dict[str, Path] = {}
    for d in builtin_spec_dirs():
        for p in sorted(d.glob("*.y*ml")) if d.is_dir() else []:
            out.setdefault(p.stem, p)
    return out


def find_spec(name_or_path: str | Path) -> Path:
    """A spec file by path, or by name in :func:`builtin_spec_dirs`."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    specs = list_specs()
    if str(name_or_path) in specs:
        return specs[str(name_or_path)]
    hint = did_you_mean(name_or_path, specs)
    raise SpecError(
        str(name_or_path),
        [f"{name_or_path}: no such dashboard spec file or name{hint} (known: {', '.join(specs) or 'none'})"],
    )
