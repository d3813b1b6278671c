"""Dotted run-config paths (``learner.lr``): is it one (with a did-you-mean), and get/set in a tree."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from workbench.config import RunConfig
from workbench.errors import closest_match, show_value, suggestion_hint

__all__ = [
    "MISSING",
    "all_config_paths",
    "config_fields_at",
    "config_path_error",
    "copy_tree",
    "get_path",
    "is_int",
    "schema_at",
    "set_path",
]

_ANY = object()  # a free-form mapping: any key below is accepted
_LEAF = object()


@dataclasses.dataclass(frozen=True)
class _ListOf:
    """A list of sub-configs (e.g. ``reward.shaping``): a leaf for dotted paths, a model per index."""

    model: type[BaseModel]


def _field_kind(model: type[BaseModel], name: str) -> Any:
    """The model class of a field, ``_ANY`` for a free-form dict, ``_LEAF`` for a value."""
    ann = model.model_fields[name].annotation
    options = [ann]
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(ann) if a is not type(None)]
    for opt in options:
        if isinstance(opt, type) and issubclass(opt, BaseModel):
            return opt
        if opt is dict or typing.get_origin(opt) is dict:
            return _ANY
        if typing.get_origin(opt) is list:
            (item,) = typing.get_args(opt) or (Any,)
            if isinstance(item, type) and issubclass(item, BaseModel):
                return _ListOf(item)
    return _LEAF


def schema_at(parts: Iterable[Any], root: type[BaseModel] = RunConfig) -> Any:
    """The model (or ``_ANY``/``_LEAF``) at a run-config path; ``None`` if the path is unknown."""
    node: Any = root
    for part in parts:
        if node is _ANY:
            return _ANY
        if isinstance(node, _ListOf) and is_int(part):
            node = node.model
            continue
        if not (isinstance(node, type) and issubclass(node, BaseModel)):
            return None
        if part not in node.model_fields:
            return None
        node = _field_kind(node, part)
    return node


def all_config_paths(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[str]:
    out: list[str] = []
    for name in model.model_fields:
        kind = _field_kind(model, name)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out.append(prefix + name)
            out.extend(all_config_paths(kind, f"{prefix}{name}."))
        else:
            out.append(prefix + name)
    return out


def config_path_error(dotted: str) -> str | None:
    """Why ``dotted`` is not a run-config path (with a did-you-mean), or ``None`` if it is one."""
    if not isinstance(dotted, str):
        return f"a run-config path is a dotted string like 'learner.lr', got {show_value(dotted)}"
    parts = dotted.split(".")
    if any(not p for p in parts):
        return f"malformed path {dotted!r}: expected dotted field names like 'learner.lr'"
    if dotted == "seed":
        return "the seed is set per run by 'seeds:', not by a path"
    node: Any = RunConfig
    for i, part in enumerate(parts):
        if node is _ANY:
            return None
        here = ".".join(parts[:i])
        if not (isinstance(node, type) and issubclass(node, BaseModel)):
            return f"{here!r} is a single value, not a section; use {here!r} itself"
        if part not in node.model_fields:
            local = closest_match(part, node.model_fields)
            if local:
                suggestion = ".".join(parts[:i] + [local] + parts[i + 1 :])
            else:  # e.g. 'lr' -> 'learner.lr', 'algo.clip_high' -> 'algorithm.clip_high'
                paths = all_config_paths()
                same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == parts[-1]]
                depth = min((p.count(".") for p in same_leaf), default=0)
                shallowest = [p for p in same_leaf if p.count(".") == depth]  # 'lr': learner.lr, not data.prime.lr
                suggestion = shallowest[0] if len(shallowest) == 1 else closest_match(dotted, paths)
            where = f" in {here!r}" if here else ""
            hint = suggestion_hint(suggestion)
            valid = f" (valid{where}: {', '.join(sorted(node.model_fields))})" if not suggestion else ""
            return f"unknown run-config path {dotted!r}: no field {part!r}{where}{hint}{valid}"
        node = _field_kind(node, part)
    return None


def config_fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    node = schema_at(loc)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return None


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def set_path(tree: dict[str, Any], parts: Iterable[Any], value: Any) -> None:
    parts = list(parts)
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            if child is not None and part in node:
                here = ".".join(map(str, parts[: i + 1]))
                raise ValueError(
                    f"cannot set {'.'.join(map(str, parts))}: {here} is {show_value(child)}, not a mapping"
                )
            child = node[part] = {}
        else:
            child = node[part] = dict(child)  # copy on write: inputs stay untouched
        node = child
    node[parts[-1]] = value


def copy_tree(tree: Any) -> Any:
    """A copy of a config tree's dicts and lists (the leaves shared), to set paths in."""
    if isinstance(tree, dict):
        return {k: copy_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [copy_tree(v) for v in tree]
    return tree


MISSING = object()


def get_path(tree: Any, parts: Iterable[Any]) -> Any:
    for part in parts:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return MISSING
    return tree
