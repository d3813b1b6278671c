"""Load a study file (``include:`` resolved, every line remembered) and validate it, runs included.

``include: other.yaml`` (relative to the including file, chains allowed, cycles an error)
deep-merges: mappings merge key by key (so inherited variants and grid axes stay and new ones are
appended), lists (``seeds``, ``exclude``, axis values) are replaced. Lines come from the YAML
itself, also across ``include:`` files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workbench.config import deep_merge
from workbench.errors import show_value
from workbench.study.expand import expand_runs
from workbench.study.limits import MAX_INCLUDE_DEPTH, MAX_INCLUDE_TOTAL_BYTES, run_count_issue
from workbench.study.report import Loc, Origin, Path_, Reporter, StudyError, StudyIssue
from workbench.study.schema import Study, validate_fields
from workbench.study.yaml_positions import parse_yaml, read_bounded_text

__all__ = ["load_study", "validate", "validate_study"]


def validate(data: Any, origin: Origin | None, dups: Iterable[StudyIssue] = ()) -> Study:
    """A ``Study`` whose fields and every run's config are valid; ``StudyError`` listing every problem."""
    rep = Reporter(origin)
    rep.issues.extend(dups)
    too_big = run_count_issue(data)
    if too_big:  # before any check walks a list or any run config is built: the count is arithmetic
        rep.add((), too_big)
        rep.raise_if_any()
    study = validate_fields(data, rep)
    rep.raise_if_any()
    assert study is not None
    study._origin = origin
    expand_runs(study, rep)  # validate every run's config now: nothing runs if any is invalid
    rep.raise_if_any()
    return study


def validate_study(data: dict[str, Any]) -> Study:
    """A ``Study`` from a dict (e.g. built in code), with every run's config validated.

    ``include:`` is not resolved here (it needs a file); use ``load_study``.
    """
    return validate(data, None)


def _read_study_file(path: Path, display: str) -> tuple[dict[str, Any], dict[Path_, Loc], list[StudyIssue]]:
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
    data, locs, dups = parse_yaml(text, display)
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
                    line=locs.get((), Loc(display, None)).line,
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
) -> tuple[dict[str, Any], dict[Path_, Loc]]:
    data, locs, file_dups = _read_study_file(path, display)
    dups.extend(file_dups)
    inc = data.get("include")
    if inc is None:
        return data, locs
    where = locs.get(("include",), Loc(display, None))

    def fail(message: str) -> StudyError:
        return StudyError([StudyIssue(message, "include", where.file, where.line)])

    if not isinstance(inc, str) or not inc.strip():
        raise fail(f"expected a path to another study file, got {show_value(inc)}")
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
    if len(chain) >= MAX_INCLUDE_DEPTH:
        raise fail(
            f"include chain deeper than {MAX_INCLUDE_DEPTH} files "
            f"({' -> '.join(d for _, d in chain[:3])} -> ...); merge some of them"
        )
    total = sum(seen.stat().st_size for seen, _ in chain) + resolved.stat().st_size
    if total > MAX_INCLUDE_TOTAL_BYTES:  # each file is <= 1 MiB; a chain of them is bounded together
        raise fail(
            f"the include chain is {total:,} bytes in {len(chain) + 1} files, over "
            f"{MAX_INCLUDE_TOTAL_BYTES:,} bytes together; shorten the files or the chain"
        )
    parent, parent_locs = _load_tree(target, target_display, chain + [(resolved, target_display)], dups)
    own = {k: v for k, v in data.items() if k != "include"}
    merged = deep_merge(parent, own)
    merged["include"] = inc
    merged_locs: dict[Path_, Loc] = {}
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
    return validate(data, Origin(locs, display), dups)
