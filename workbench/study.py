"""Study YAML -> validated ``Study`` -> one ``RunSpec`` per run. Pure: no MLflow, no execution.

A study is a base run config, named variants (deep overrides of the base), a grid (cartesian
product over dotted run-config paths), a zip (paired lists, one more grid axis), seeds and
exclusions::

    name: grpo-vs-dr-grpo
    include: common.yaml          # optional: inherit that file's fields, then deep-override them
    base: {model: {builtin: tiny}, learner: {lr: 1.0e-4}, algorithm: {preset: grpo}}
    variants: {grpo: {}, dr_grpo: {algorithm: {preset: dr_grpo}}}
    grid: {learner.lr: [3.0e-5, 1.0e-4]}
    zip: {sampler.dtype: [float32, bfloat16], algorithm.correction: [null, tis]}
    seeds: [0, 1, 2]
    exclude: [{variant: dr_grpo, learner.lr: 3.0e-5}]

Precedence, lowest first: ``base`` < the study's ``health:``/``tracking:`` < the variant < the
grid/zip values < the seed. ``include:`` (relative to the including file, chains allowed, cycles
an error) deep-merges: mappings merge key by key (so inherited variants and grid axes stay and new
ones are appended), lists (``seeds``, ``exclude``, axis values) are replaced. Expansion order: variants in file order, then grid points (grid axes in
file order, the zip as one last axis; the last axis varies fastest), then seeds.

Every problem is reported as a ``StudyError`` (a ``ValueError``) whose lines read
``FILE:LINE YAML.PATH: what is wrong``; all problems are reported, one per line, not only the first.
Lines come from the YAML itself: an error in a variant's resolved config points at the line where
the offending key was written (the variant's line if the variant set it, the grid line if a grid
value did, otherwise the base line), also across ``include:`` files.

The YAML dialect is YAML 1.2-like where YAML 1.1 surprises: only ``true``/``false`` are booleans
(``preset: off`` is the string ``"off"``) and ``1e-4`` is a float, as ``1.0e-4`` is. Duplicate
keys in a mapping are an error.

Public API::

    study = load_study("studies/x.yaml")          # Study; StudyError if anything is wrong
    specs = expand(study)                          # list[RunSpec] (variant, seed, grid, config, run_key, label)
    study = apply_overrides(study, ["learner.lr=3e-4", "seeds=[0]"])   # `workbench run --set`
    cfg = apply_overrides(cfg_dict, ["sampler.backend=hf"])             # plain run-config dicts too
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from workbench.config import RunConfig, deep_merge
from workbench.errors import closest_match, suggestion_hint

__all__ = [
    "STUDY_VERSION",
    "RunSpec",
    "Study",
    "StudyError",
    "StudyIssue",
    "apply_overrides",
    "config_path_error",
    "expand",
    "load_study",
    "parse_override",
    "validate_study",
]

STUDY_VERSION = 1
"""The study schema version this module reads (the ``version:`` field)."""

Path_ = tuple[Any, ...]  # a YAML path: mapping keys (str) and list indices (int)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StudyIssue:
    """One problem: where (file, line, column, YAML path) and what."""

    message: str
    path: str = ""  # dotted YAML path, e.g. "variants.dapo.algorithm.clip_hi"
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based; only for YAML syntax errors

    def __str__(self) -> str:
        where = self.file or ""
        if where and self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.path:
            head = f"{where} {self.path}" if where else self.path
        else:
            head = where
        return f"{head}: {self.message}" if head else self.message


class StudyError(ValueError):
    """A study that cannot run. ``str(err)`` has one line per problem; ``err.issues`` the parts."""

    def __init__(self, issues: Iterable[StudyIssue | str]) -> None:
        seen: set[str] = set()
        unique: list[StudyIssue] = []
        for issue in issues:
            issue = issue if isinstance(issue, StudyIssue) else StudyIssue(str(issue))
            if str(issue) not in seen:  # the same base error shows once, not once per run
                seen.add(str(issue))
                unique.append(issue)
        files: dict[str | None, int] = {}
        for issue in unique:
            files.setdefault(issue.file, len(files))
        # in reading order: by file (first mentioned first), then by line
        self.issues: list[StudyIssue] = sorted(
            unique, key=lambda i: (files[i.file], i.line if i.line is not None else float("inf"))
        )
        super().__init__("\n".join(str(i) for i in self.issues))

    @property
    def lines(self) -> list[str]:
        return [str(i) for i in self.issues]


@dataclasses.dataclass(frozen=True)
class _Loc:
    file: str | None
    line: int | None


class _Origin:
    """Where each YAML path of a study was written: path tuple -> (file, line)."""

    def __init__(self, locs: dict[Path_, _Loc] | None = None, file: str | None = None) -> None:
        self.locs: dict[Path_, _Loc] = dict(locs or {})
        self.file = file  # the top-level file

    def locate(self, path: Path_) -> _Loc:
        """The line of ``path`` or, if it was not written, of its nearest written ancestor."""
        path = tuple(path)
        while True:
            if path in self.locs:
                return self.locs[path]
            if not path:
                return _Loc(self.file, None)
            path = path[:-1]

    def copy(self) -> _Origin:
        return _Origin(self.locs, self.file)


def _fmt_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class _Reporter:
    """Collects issues, attaching file and line from an ``_Origin``."""

    def __init__(self, origin: _Origin | None) -> None:
        self.origin = origin or _Origin()
        self.issues: list[StudyIssue] = []

    def add(self, path: Path_, message: str, *, line_path: Path_ | None = None) -> None:
        loc = self.origin.locate(path if line_path is None else line_path)
        self.issues.append(StudyIssue(message, _fmt_path(path), loc.file, loc.line))

    def raise_if_any(self) -> None:
        if self.issues:
            raise StudyError(self.issues)


def _show(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it (YAML-ish), shortened."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (int, float)):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, default=str, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unknown(word: Any, choices: Iterable[str], what: str = "field") -> str:
    choices = sorted(choices)
    close = closest_match(word, choices)
    if close:
        return f"unknown {what}; did you mean {close!r}?"
    return f"unknown {what} (valid: {', '.join(choices)})" if choices else f"unknown {what}"


# --------------------------------------------------------------------------------------------
# YAML with line numbers
# --------------------------------------------------------------------------------------------


MAX_STUDY_BYTES = 1 << 20  # 1 MiB: the largest study here is a few KiB; /dev/zero would be read forever
MAX_ALIASES = 200  # `*anchor` references per file: anchors share settings; a bomb needs thousands
MAX_EXPANDED_NODES = 200_000  # YAML nodes once every alias is expanded (what later passes walk)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (``true``/``false`` only) and exponent floats (``1e-4``),
    and a budget on aliases: each ``*anchor`` is counted while composing (a billion-laughs file
    is a few hundred bytes of aliases whose expansion exhausts memory)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.aliases_seen = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise _BudgetExceeded(f"more than {MAX_ALIASES} YAML aliases (*anchor references); "
                                      "write the values out or use include:", mark.line + 1)
        return super().compose_node(parent, index)


class _BudgetExceeded(Exception):
    """A YAML document over the alias/expansion budget (message, 1-based line)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose alias expansion exceeds ``MAX_EXPANDED_NODES`` or is recursive.

    Counted on the shared graph, once per distinct node (memoised), so the check itself stays
    linear in the file size however large the expansion would be."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _BudgetExceeded("recursive YAML alias (a node that contains itself)", node.start_mark.line + 1)
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        active.discard(key)
        if total > MAX_EXPANDED_NODES:
            raise _BudgetExceeded(f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} values; "
                                  "a study needs far fewer", node.start_mark.line + 1)
        sizes[key] = total
        return total

    size(root)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _one_line(text: str | None) -> str:
    return " ".join(str(text or "").split())


def _index_node(
    loader: _Loader,
    node: yaml.Node,
    path: Path_,
    locs: dict[Path_, _Loc],
    dups: list[StudyIssue],
    file: str | None,
    stack: frozenset[int] = frozenset(),
    inherited: bool = False,
) -> None:
    """Record the line of every mapping key and list item under ``node`` (and duplicate keys)."""
    if id(node) in stack:  # a recursive alias
        return
    stack = stack | {id(node)}
    if isinstance(node, yaml.MappingNode):
        first_line: dict[Any, int] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                continue  # construction reports unhashable keys
            key = loader.construct_object(knode, deep=True)
            line = knode.start_mark.line + 1
            try:
                hash(key)
            except TypeError:
                continue
            if key in first_line and not inherited:
                dups.append(
                    StudyIssue(
                        f"duplicate key {key!r} (first written at line {first_line[key]}); "
                        "a mapping's keys must be unique",
                        _fmt_path(path + (key,)),
                        file,
                        line,
                    )
                )
            first_line.setdefault(key, line)
            if inherited:
                locs.setdefault(path + (key,), _Loc(file, line))
            else:
                locs[path + (key,)] = _Loc(file, line)
            _index_node(loader, vnode, path + (key,), locs, dups, file, stack, inherited)
        for merged in merges:  # `<<: *anchor` keys: explicit keys win
            sources = merged.value if isinstance(merged, yaml.SequenceNode) else [merged]
            for src in sources:
                _index_node(loader, src, path, locs, dups, file, stack, inherited=True)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if inherited:
                locs.setdefault(path + (i,), _Loc(file, item.start_mark.line + 1))
            else:
                locs[path + (i,)] = _Loc(file, item.start_mark.line + 1)
            _index_node(loader, item, path + (i,), locs, dups, file, stack, inherited)


def _yaml_issue(err: yaml.YAMLError, file: str | None, what: str = "invalid YAML") -> StudyIssue:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    text = _one_line(problem)
    if context:
        text = f"{text} ({_one_line(context)})"
    if mark is not None:
        return StudyIssue(f"{what}: {text}", "", file, mark.line + 1, mark.column + 1)
    return StudyIssue(f"{what}: {text}", "", file)


def _parse_yaml(text: str, file: str | None) -> tuple[Any, dict[Path_, _Loc], list[StudyIssue]]:
    """(data, path -> line, duplicate-key issues); ``StudyError`` on a syntax error."""
    loader = _Loader(text)
    locs: dict[Path_, _Loc] = {}
    dups: list[StudyIssue] = []
    try:
        node = loader.get_single_node()
        if node is None:
            return None, locs, dups
        _check_expansion(node)  # before anything walks the expansion (the indexer, construction, merging)
        locs[()] = _Loc(file, node.start_mark.line + 1)
        _index_node(loader, node, (), locs, dups, file)
        data = loader.construct_document(node)
    except yaml.YAMLError as err:
        raise StudyError([_yaml_issue(err, file)]) from None
    except _BudgetExceeded as err:
        raise StudyError([StudyIssue(str(err), "", file, err.line)]) from None
    except RecursionError:  # nesting deeper than Python's stack (e.g. 10,000 '[')
        raise StudyError([StudyIssue("YAML nested too deeply", "", file)]) from None
    finally:
        loader.dispose()
    return data, locs, dups


def _parse_value(text: str) -> Any:
    """A YAML scalar/flow value as in a study file (``3e-4`` -> float, ``[1, 2]`` -> list)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _BudgetExceeded as err:
        raise yaml.YAMLError(str(err)) from None
    finally:
        loader.dispose()


def read_bounded_text(path: Path, what: str = "file", limit: int = MAX_STUDY_BYTES) -> str:
    """A regular file's UTF-8 text, refusing devices, FIFOs and anything over ``limit`` bytes.

    Errors are ``OSError``/``ValueError`` whose message never quotes the file's content."""
    import stat

    info = path.stat()  # follows symlinks: a link to a regular file is fine
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(f"is a directory, not a {what}")
    if not stat.S_ISREG(info.st_mode):  # /dev/zero, /dev/urandom, a FIFO: reading would never end
        raise ValueError(f"not a regular file (a device, pipe or socket), not a {what}")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)  # never more than the budget, even if the file grows meanwhile
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 1024} KiB: too large for a {what}")
    return data.decode("utf-8")


# --------------------------------------------------------------------------------------------
# Run-config schema navigation (did-you-mean on dotted paths)
# --------------------------------------------------------------------------------------------

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


def _schema_at(parts: Iterable[Any], root: type[BaseModel] = RunConfig) -> Any:
    """The model (or ``_ANY``/``_LEAF``) at a run-config path; ``None`` if the path is unknown."""
    node: Any = root
    for part in parts:
        if node is _ANY:
            return _ANY
        if isinstance(node, _ListOf) and _is_int(part):
            node = node.model
            continue
        if not (isinstance(node, type) and issubclass(node, BaseModel)):
            return None
        if part not in node.model_fields:
            return None
        node = _field_kind(node, part)
    return node


def _all_config_paths(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[str]:
    out: list[str] = []
    for name in model.model_fields:
        kind = _field_kind(model, name)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out.append(prefix + name)
            out.extend(_all_config_paths(kind, f"{prefix}{name}."))
        else:
            out.append(prefix + name)
    return out


def config_path_error(dotted: str) -> str | None:
    """Why ``dotted`` is not a run-config path (with a did-you-mean), or ``None`` if it is one."""
    if not isinstance(dotted, str):
        return f"a run-config path is a dotted string like 'learner.lr', got {_show(dotted)}"
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
                paths = _all_config_paths()
                same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == parts[-1]]
                suggestion = same_leaf[0] if len(same_leaf) == 1 else closest_match(dotted, paths)
            where = f" in {here!r}" if here else ""
            hint = suggestion_hint(suggestion)
            valid = f" (valid{where}: {', '.join(sorted(node.model_fields))})" if not suggestion else ""
            return f"unknown run-config path {dotted!r}: no field {part!r}{where}{hint}{valid}"
        node = _field_kind(node, part)
    return None


# --------------------------------------------------------------------------------------------
# pydantic errors -> teaching messages
# --------------------------------------------------------------------------------------------

_EXPECTED = {
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing_size": "an integer",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
    "iterable_type": "a list",
    "set_type": "a list",
}
_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def _explain(err: dict[str, Any], valid_fields: Iterable[str] | None, hints: dict[str, str]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    loc = err["loc"]
    if kind == "extra_forbidden":
        return _unknown(loc[-1] if loc else "?", valid_fields or [])
    if kind == "missing":
        hint = hints.get(str(loc[-1])) if len(loc) == 1 else None
        return "missing required field" + (f" ({hint})" if hint else "")
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_show(value)}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}, got {_show(value)}"
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound}, got {_show(value)}"
    if kind in ("value_error", "assertion_error"):
        return _one_line(str(ctx.get("error") or err["msg"]))
    msg = _one_line(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]}, got {_show(value)}"


_UNKNOWN_NAME = re.compile(r"^unknown [\w /-]+? '([^']*)'")


def _refine_loc(err: dict[str, Any]) -> tuple[Any, ...]:
    """Point an ``unknown X 'name'`` error raised by a section's validator at the key holding it."""
    loc = tuple(err["loc"])
    if err["type"] != "value_error":
        return loc
    found = _UNKNOWN_NAME.match(str((err.get("ctx") or {}).get("error") or ""))
    value = err.get("input")
    if not found or not isinstance(value, dict):
        return loc
    name = found.group(1)
    hits: list[tuple[Any, ...]] = []

    def search(tree: Any, path: tuple[Any, ...]) -> None:
        if isinstance(tree, dict):
            for key, sub in tree.items():
                if key == name or (isinstance(sub, str) and sub == name):
                    hits.append(path + (key,))
                search(sub, path + (key,))

    search(value, ())
    return loc + hits[0] if len(hits) == 1 else loc


def _pydantic_issues(
    error: ValidationError,
    fields_at: Callable[[tuple[Any, ...]], Iterable[str] | None],
    hints: dict[str, str] | None = None,
) -> list[tuple[tuple[Any, ...], str]]:
    out = []
    for err in error.errors():
        loc = _refine_loc(err)
        if loc and loc[-1] == "[key]":  # a mapping key of the wrong type
            out.append((loc[:-2] if len(loc) > 1 else (), f"keys must be strings, got {_show(loc[-2])}"))
            continue
        out.append((loc, _explain(err, fields_at(loc[:-1]), hints or {})))
    return out


def _config_fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    node = _schema_at(loc)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return None


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Study(BaseModel):
    """One study file (after ``include:`` is resolved). Unknown top-level keys are rejected."""

    model_config = ConfigDict(extra="forbid")

    version: StrictInt = Field(STUDY_VERSION, description="study schema version (this workbench reads 1)")
    name: StrictStr = Field(
        description="the study's name, also its MLflow experiment: letters, digits, '_', '-', '.'"
    )
    description: StrictStr = Field("", description="what question the study asks")
    include: StrictStr | None = Field(
        None, description="another study file (relative to this one) whose fields this file deep-overrides"
    )
    base: dict[str, Any] = Field(
        description="a full run config (model, task, sampler, learner, rollout, algorithm, ...)"
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"base": {}},
        description="named deep overrides of base, in run order (names are identifiers)",
    )
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted run-config path -> values; cartesian product"
    )
    zip: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="dotted run-config path -> equal-length lists, paired; one more grid axis",
    )
    seeds: list[StrictInt] = Field(default_factory=lambda: [0], description="one run per seed")
    exclude: list[dict[str, Any]] = Field(
        default_factory=list,
        description="drop combinations: each entry maps variant/seed/dotted path -> value; "
        "a run matching every key of an entry is dropped",
    )
    compare: dict[str, Any] = Field(default_factory=dict, description="comparison report settings")
    health: dict[str, Any] | None = Field(
        None, description="`health:` of every run (HealthConfig) unless a variant overrides it"
    )
    search: dict[str, Any] | None = Field(None, description="Optuna search settings")
    tracking: dict[str, Any] = Field(
        default_factory=dict, description="run config `tracking` (uri, experiment: default the name)"
    )
    execution: dict[str, Any] = Field(default_factory=dict, description="e.g. {parallel: 4}")

    _origin: _Origin | None = PrivateAttr(default=None)

    @field_validator("variants", mode="before")
    @classmethod
    def _empty_variant_is_base(cls, value: Any) -> Any:
        """``variants: {grpo: }`` (nothing after the colon) means no overrides."""
        if isinstance(value, dict):
            return {k: ({} if v is None else v) for k, v in value.items()}
        return value

    @field_validator("grid", "zip", "exclude", "compare", "tracking", "execution", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any, info: Any) -> Any:
        """``grid:`` with everything below commented out means no grid."""
        if value is None:
            return [] if info.field_name == "exclude" else {}
        return value

    @property
    def source(self) -> str | None:
        """The file this study was loaded from (``None`` if built in code)."""
        return self._origin.file if self._origin else None


def _study_fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    return list(Study.model_fields) if loc == () else None


_STUDY_HINTS = {name: f.description or "" for name, f in Study.model_fields.items()}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """Value equality as a user means it: 1e-4 == 0.0001, [0.9, 0.99] == (0.9, 0.99)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _check_semantics(data: dict[str, Any], rep: _Reporter) -> None:
    """Checks beyond types. Defensive: runs on raw data even where the types are wrong."""
    name = data.get("name")
    if isinstance(name, str):
        if not name.strip():
            rep.add(("name",), "must not be empty")
        elif not _NAME_RE.fullmatch(name):
            safe = re.sub(r"[^A-Za-z0-9_.\-]+", "-", name).strip("-._") or "my-study"
            rep.add(
                ("name",),
                f"{name!r} is not a safe MLflow experiment name: use letters, digits, '_', '-', '.' "
                f"(at most 200), starting with a letter or digit, e.g. {safe!r}",
            )
    version = data.get("version", STUDY_VERSION)
    if _is_int(version) and version != STUDY_VERSION:
        rep.add(("version",), f"unsupported study version {version}; this workbench reads version {STUDY_VERSION}")

    base = data.get("base")
    if isinstance(base, dict) and "seed" in base:
        rep.add(("base", "seed"), "the seed is set per run by the study's 'seeds:' list; remove it here")

    variants = data.get("variants", {"base": {}})
    names: list[str] = []
    if isinstance(variants, dict):
        if not variants:
            rep.add(("variants",), "no variants; omit 'variants:' for a single variant named 'base'")
        for vname, over in variants.items():
            if not isinstance(vname, str) or not _IDENT_RE.fullmatch(vname):
                fixed = re.sub(r"\W+", "_", str(vname)).strip("_") or "v"
                fixed = fixed if not fixed[0].isdigit() else f"v_{fixed}"
                rep.add(
                    ("variants", vname),
                    f"variant name {str(vname)!r} is not an identifier (letters, digits, '_'; "
                    f"not starting with a digit), e.g. {fixed!r}",
                )
            else:
                names.append(vname)
            if isinstance(over, dict) and "seed" in over:
                rep.add(("variants", vname, "seed"), "the seed is set per run by 'seeds:'; remove it here")

    axes: dict[str, str] = {}
    lengths: dict[str, int] = {}
    for field in ("grid", "zip"):
        table = data.get(field)
        if not isinstance(table, dict):
            continue
        for key, values in table.items():
            path = (field, key)
            if not isinstance(key, str):
                continue  # reported by the schema
            problem = config_path_error(key)
            if problem:
                rep.add(path, problem)
                continue
            for other, other_field in axes.items():
                if key == other:
                    rep.add(path, f"{key!r} is already an axis in '{other_field}'; an axis appears once")
                elif key.startswith(other + ".") or other.startswith(key + "."):
                    rep.add(path, f"overlaps the axis {other!r} in '{other_field}'; axes must be disjoint paths")
            axes[key] = field
            if not isinstance(values, list):
                continue
            if not values:
                rep.add(path, "empty list: an axis needs at least one value (a study with no runs is an error)")
            for j, value in enumerate(values):
                for i in range(j):
                    if _same(values[i], value):
                        rep.add(path + (j,), f"value {_show(value)} repeats {field}.{key}[{i}]")
                        break
            if field == "zip":
                lengths[key] = len(values)
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        rep.add(("zip",), f"zip lists must have equal lengths (they are paired); got {desc}")

    seeds = data.get("seeds", [0])
    if isinstance(seeds, list):
        if not seeds:
            rep.add(("seeds",), "empty list: give at least one seed, e.g. [0]")
        for j, seed in enumerate(seeds):
            if seed in seeds[:j]:
                rep.add(("seeds", j), f"seed {seed} appears twice")

    exclude = data.get("exclude")
    if isinstance(exclude, list):
        for i, entry in enumerate(exclude):
            if not isinstance(entry, dict):
                continue  # a type error, reported by the schema
            if not entry:
                rep.add(("exclude", i), "empty entry would drop every run; give variant/seed/path: value")
            for key, value in entry.items():
                path = ("exclude", i, key)
                if key == "variant":
                    if isinstance(variants, dict) and value not in variants:
                        rep.add(path, f"{_unknown(value, names, 'variant ' + _show(value))}")
                elif key == "seed":
                    if not _is_int(value):
                        rep.add(path, f"expected an integer, got {_show(value)}")
                else:
                    problem = config_path_error(key)
                    if problem:
                        rep.add(path, f"{problem} (exclude keys are 'variant', 'seed' or run-config paths)")

    execution = data.get("execution")
    if isinstance(execution, dict) and "parallel" in execution:
        parallel = execution["parallel"]
        if not _is_int(parallel) or parallel < 1:
            rep.add(("execution", "parallel"), f"expected a positive integer, got {_show(parallel)}")

    compare = data.get("compare")
    if isinstance(compare, dict) and isinstance(variants, dict):
        baseline = compare.get("baseline")
        if isinstance(baseline, str) and baseline not in variants:
            rep.add(("compare", "baseline"), _unknown(baseline, names, f"variant {baseline!r}"))


def _validate(data: Any, origin: _Origin | None, dups: Iterable[StudyIssue] = ()) -> Study:
    rep = _Reporter(origin)
    rep.issues.extend(dups)
    if not isinstance(data, dict):
        rep.add((), f"a study is a mapping of fields (name, base, variants, ...), got {_show(data)}")
        rep.raise_if_any()
    study: Study | None = None
    try:
        study = Study.model_validate(data)
    except ValidationError as err:
        for loc, msg in _pydantic_issues(err, _study_fields_at, _STUDY_HINTS):
            if len(loc) == 2 and loc[0] in ("grid", "zip") and msg.startswith("expected a list"):
                msg += f" (an axis is a list of values, e.g. [{_show(data[loc[0]][loc[1]])}])"
            rep.add(loc, msg)
    _check_semantics(data, rep)
    rep.raise_if_any()
    assert study is not None
    study._origin = origin
    _expand(study, rep)  # validate every run's config now: nothing runs if any is invalid
    rep.raise_if_any()
    return study


def validate_study(data: dict[str, Any]) -> Study:
    """A ``Study`` from a dict (e.g. built in code), with every run's config validated.

    ``include:`` is not resolved here (it needs a file); use ``load_study``.
    """
    return _validate(data, None)


# --------------------------------------------------------------------------------------------
# Loading, include
# --------------------------------------------------------------------------------------------


def _read_study_file(path: Path, display: str) -> tuple[dict[str, Any], dict[Path_, _Loc], list[StudyIssue]]:
    try:
        text = read_bounded_text(path, "study file")
    except FileNotFoundError:
        raise StudyError([StudyIssue("no such study file", file=display)]) from None
    except IsADirectoryError:
        raise StudyError([StudyIssue("is a directory, not a study file", file=display)]) from None
    except UnicodeDecodeError as err:
        raise StudyError([StudyIssue(f"not UTF-8 text ({err.reason} at byte {err.start})", file=display)]) from None
    except ValueError as err:
        raise StudyError([StudyIssue(str(err), file=display)]) from None
    except OSError as err:
        raise StudyError([StudyIssue(f"cannot read: {err.strerror}", file=display)]) from None
    data, locs, dups = _parse_yaml(text, display)
    if data is None:
        raise StudyError(
            [StudyIssue("empty study file: expected a mapping with at least 'name' and 'base'", file=display)]
        )
    if not isinstance(data, dict):
        raise StudyError(
            [
                StudyIssue(  # the kind only, never the content: `include: /etc/passwd` must not echo it
                    f"a study file is a mapping of fields (name, base, variants, ...), "
                    f"got {'a list' if isinstance(data, list) else 'a single value'}",
                    file=display,
                    line=locs.get((), _Loc(display, None)).line,
                )
            ]
        )
    return data, locs, dups


def _all_paths(tree: Any, path: Path_ = ()) -> Iterator[Path_]:
    yield path
    if isinstance(tree, dict):
        for key, sub in tree.items():
            yield from _all_paths(sub, path + (key,))
    elif isinstance(tree, list):
        for i, sub in enumerate(tree):
            yield from _all_paths(sub, path + (i,))


def _load_tree(
    path: Path, display: str, chain: list[tuple[Path, str]], dups: list[StudyIssue]
) -> tuple[dict[str, Any], dict[Path_, _Loc]]:
    data, locs, file_dups = _read_study_file(path, display)
    dups.extend(file_dups)
    inc = data.get("include")
    if inc is None:
        return data, locs
    where = locs.get(("include",), _Loc(display, None))

    def fail(message: str) -> StudyError:
        return StudyError([StudyIssue(message, "include", where.file, where.line)])

    if not isinstance(inc, str) or not inc.strip():
        raise fail(f"expected a path to another study file, got {_show(inc)}")
    target = path.parent / inc
    target_display = os.path.normpath(os.path.join(os.path.dirname(display), inc))
    resolved = target.resolve()
    for seen, _ in chain:
        if seen == resolved:
            cycle = " -> ".join([d for _, d in chain] + [target_display])
            raise fail(f"include cycle: {cycle}")
    if not target.exists():
        raise fail(f"no such file {inc!r} (looked for {target_display}; include paths are relative to this file)")
    if target.is_dir():
        raise fail(f"{inc!r} is a directory, not a study file")
    parent, parent_locs = _load_tree(target, target_display, chain + [(resolved, target_display)], dups)
    own = {k: v for k, v in data.items() if k != "include"}
    merged = deep_merge(parent, own)
    merged["include"] = inc
    merged_locs: dict[Path_, _Loc] = {}
    for p in _all_paths(merged):
        loc = locs.get(p) or parent_locs.get(p)
        if loc is not None:
            merged_locs[p] = loc
    return merged, merged_locs


def load_study(path: str | os.PathLike[str]) -> Study:
    """Read, include-resolve and validate a study file; every run's config is validated too.

    Raises ``StudyError`` with one ``FILE:LINE YAML.PATH: message`` line per problem.
    """
    display = os.fspath(path)
    p = Path(display)
    dups: list[StudyIssue] = []
    data, locs = _load_tree(p, display, [(p.resolve(), display)], dups)
    return _validate(data, _Origin(locs, display), dups)


# --------------------------------------------------------------------------------------------
# Expansion
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a study: its resolved, validated config and its identity."""

    variant: str
    seed: int
    grid: dict[str, Any] = dataclasses.field(hash=False)  # this point's grid/zip values, dotted keys
    config: RunConfig = dataclasses.field(hash=False)  # seed set; tracking.experiment defaults to the study name
    run_key: str  # == config.run_key(): hash of everything that determines results
    label: str  # e.g. "dapo/lr=3e-05/seed=1"; unique within the study


@dataclasses.dataclass(frozen=True)
class _Axis:
    field: str  # "grid" | "zip"
    keys: tuple[str, ...]  # one key for a grid axis, all zip keys for the zip axis
    points: tuple[tuple[Any, ...], ...]  # per point: one value per key


def _axes(study: Study) -> list[_Axis]:
    axes = [_Axis("grid", (key,), tuple((v,) for v in values)) for key, values in study.grid.items()]
    if study.zip:
        keys = tuple(study.zip)
        points = tuple(zip(*(study.zip[k] for k in keys), strict=True))
        axes.append(_Axis("zip", keys, points))
    return axes


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def _short_names(keys: list[str]) -> dict[str, str]:
    """Last path component for labels, the full path where two axes share a last component."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def _set_path(tree: dict[str, Any], parts: Iterable[Any], value: Any) -> None:
    parts = list(parts)
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            if child is not None and part in node:
                here = ".".join(map(str, parts[: i + 1]))
                raise ValueError(f"cannot set {'.'.join(map(str, parts))}: {here} is {_show(child)}, not a mapping")
            child = node[part] = {}
        else:
            child = node[part] = dict(child)  # copy on write: inputs stay untouched
        node = child
    node[parts[-1]] = value


_MISSING = object()


def _get_path(tree: Any, parts: Iterable[Any]) -> Any:
    for part in parts:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return _MISSING
    return tree


def _depth(layer: Any, loc: tuple[Any, ...]) -> int:
    """How many leading parts of ``loc`` the layer dict has."""
    d = 0
    for part in loc:
        if isinstance(layer, dict) and part in layer:
            layer = layer[part]
        elif isinstance(layer, list) and _is_int(part) and 0 <= part < len(layer):
            layer = layer[part]
        else:
            break
        d += 1
    return d


def _blame(
    loc: tuple[Any, ...], study: Study, variant: str, point: list[tuple[_Axis, int]], seed_index: int
) -> Path_:
    """The study path that set the config value at ``loc``: grid > seed > variant > health/tracking > base."""
    candidates: list[tuple[int, int, Path_]] = []
    for axis, index in point:
        for key in axis.keys:
            parts = tuple(key.split("."))
            n = min(len(parts), len(loc))
            if n and parts[:n] == loc[:n]:
                rest = loc[len(parts) :] if len(loc) > len(parts) else ()
                candidates.append((n, 4, (axis.field, key, index) + rest))
    if loc[:1] == ("seed",):
        candidates.append((1, 3, ("seeds", seed_index)))
    d = _depth(study.variants.get(variant, {}), loc)
    if d:
        candidates.append((d, 2, ("variants", variant) + loc))
    for section in ("health", "tracking"):
        layer = getattr(study, section)
        if loc[:1] == (section,) and layer:
            candidates.append((_depth({section: layer}, loc), 1, loc))
    candidates.append((_depth(study.base, loc), 0, ("base",) + loc))
    return max(candidates, key=lambda c: (c[0], c[1]))[2]


def _matches(entry: dict[str, Any], variant: str, seed: int, resolved: dict[str, Any]) -> bool:
    for key, wanted in entry.items():
        if key == "variant":
            ok = variant == wanted
        elif key == "seed":
            ok = _same(seed, wanted)
        else:
            actual = _get_path(resolved, key.split("."))
            ok = actual is not _MISSING and _same(actual, wanted)
        if not ok:
            return False
    return True


def _validate_config(raw: dict[str, Any]) -> tuple[RunConfig | None, list[tuple[tuple[Any, ...], str]]]:
    """(config, []) or (None, problems as (run-config loc, message))."""
    try:
        return RunConfig.model_validate(raw), []
    except ValidationError as err:
        problems = _pydantic_issues(err, _config_fields_at)
    # An unknown preset stops the `algorithm` section early; check the rest of it under the
    # default preset so that every problem is reported at once.
    if any(loc == ("algorithm", "preset") and msg.startswith("unknown preset") for loc, msg in problems):
        algorithm = {k: v for k, v in raw["algorithm"].items() if k != "preset"}
        _, more = _validate_config({**raw, "algorithm": algorithm})
        problems += [p for p in more if p[0][:1] == ("algorithm",) and p not in problems]
    return None, problems


def _expand(study: Study, rep: _Reporter) -> list[RunSpec]:
    """All runs of a study whose fields passed ``_check_semantics``; issues go to ``rep``."""
    axes = _axes(study)
    short = _short_names([k for axis in axes for k in axis.keys])
    specs: list[RunSpec] = []
    first_label: dict[str, str] = {}  # run_key -> label
    for variant, override in study.variants.items():
        layered = dict(study.base)
        if study.health is not None:
            layered = deep_merge(layered, {"health": study.health})
        layered = deep_merge(layered, {"tracking": study.tracking}) if study.tracking else layered
        layered = deep_merge(layered, override)
        for point in itertools.product(*(list(enumerate(a.points)) for a in axes)):
            chosen = [(axis, index) for axis, (index, _) in zip(axes, point, strict=True)]
            values: dict[str, Any] = {}
            raw = dict(layered)
            for axis, (_, vals) in zip(axes, point, strict=True):
                for key, value in zip(axis.keys, vals, strict=True):
                    values[key] = value
                    _set_path(raw, key.split("."), value)
            tracking = dict(raw.get("tracking") or {}) if isinstance(raw.get("tracking", {}), dict) else None
            if tracking is not None:
                tracking.setdefault("experiment", study.name)
                raw["tracking"] = tracking
            parts = [variant] + [f"{short[k]}={_fmt_value(v)}" for k, v in values.items()]
            base_label = "/".join(parts)

            config, problems = _validate_config({**raw, "seed": study.seeds[0]})
            resolved = config.model_dump(mode="python") if config is not None else raw

            for seed_index, seed in enumerate(study.seeds):
                if any(_matches(e, variant, seed, resolved) for e in study.exclude):
                    continue
                if problems or config is None:
                    for loc, msg in problems:
                        rep.add(_blame(loc, study, variant, chosen, seed_index), msg)
                    break  # same problems for every seed
                cfg = config.model_copy(update={"seed": seed}, deep=True)  # no shared sub-configs
                key = cfg.run_key()
                label = f"{base_label}/seed={seed}"
                if key in first_label:
                    other = first_label[key]
                    rep.add(
                        ("variants", variant),
                        f"runs {other!r} and {label!r} have the same resolved config (run_key {key}); "
                        "make them differ or drop one",
                    )
                    continue
                first_label[key] = label
                specs.append(RunSpec(variant, seed, dict(values), cfg, key, label))
    if not specs and not rep.issues:
        rep.add(("exclude",) if study.exclude else (), "the study expands to no runs")
    return specs


def expand(study: Study) -> list[RunSpec]:
    """The study's runs: variants in file order, then grid points, then seeds, minus exclusions.

    Raises ``StudyError`` listing every invalid run config (at the line that set the bad value)
    and every pair of runs with the same ``run_key``.
    """
    rep = _Reporter(study._origin)
    _check_semantics(study.model_dump(), rep)
    rep.raise_if_any()
    specs = _expand(study, rep)
    rep.raise_if_any()
    return specs


# --------------------------------------------------------------------------------------------
# CLI-style overrides (`workbench run --set a.b.c=value`)
# --------------------------------------------------------------------------------------------


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
        value = _parse_value(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        issue = _yaml_issue(err, None, f"invalid YAML value {raw.strip()!r}")
        raise StudyError([StudyIssue(issue.message, file=where)]) from None
    return parts, value


def _looks_like_study(data: dict[str, Any]) -> bool:
    return any(k in data for k in ("name", "base", "variants", "grid", "seeds", "include"))


def _override_study_dict(
    data: dict[str, Any], overrides: Iterable[str], origin: _Origin | None = None
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
                if isinstance(over, dict) and _get_path(over, parts) is not _MISSING:
                    targets.append(("variants", vname, *parts))
        for target in targets:
            try:
                if len(target) == 1:
                    data[target[0]] = value
                else:
                    _set_path(data, target, value)
            except ValueError as err:
                issues.append(StudyIssue(str(err), _fmt_path(target), where))
                continue
            if origin is not None:
                for p in [p for p in origin.locs if p[: len(target)] == target]:
                    del origin.locs[p]
                origin.locs[target] = _Loc(where, None)
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
        origin = data._origin.copy() if data._origin else _Origin()
        return _validate(_override_study_dict(data.model_dump(), overrides, origin), origin)
    if isinstance(data, RunConfig):
        tree = apply_overrides(data.model_dump(mode="python"), overrides)
        try:
            return RunConfig.model_validate(tree)
        except ValidationError as err:
            raise StudyError(
                StudyIssue(msg, _fmt_path(loc), "(--set)") for loc, msg in _pydantic_issues(err, _config_fields_at)
            ) from None
    if not isinstance(data, dict):
        raise TypeError(f"apply_overrides: expected a Study, RunConfig or dict, got {type(data).__name__}")
    if _looks_like_study(data):
        return _override_study_dict(data, overrides)
    out = dict(data)
    for text in overrides:
        parts, value = parse_override(text)
        try:
            _set_path(out, parts, value)
        except ValueError as err:
            raise StudyError([StudyIssue(str(err), file=f"(--set {text})")]) from None
    return out
