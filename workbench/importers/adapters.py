"""Adapters as data: how one framework's logged metrics map onto the canonical vocabulary.

An adapter is a list of :class:`MetricMapping` rows, one per source metric name that has a
canonical counterpart (or that must *not* get one, with the reason): the source name, the
canonical name (docs/metrics.md), a conversion, the file where the framework defines the metric and a
caveat where the two meanings differ. Everything a framework logs that no row maps is kept,
unchanged, under ``source/<name>``: an import never drops a value.

Adapters are registered in :data:`ADAPTERS` under the framework name (``trl``, ``verl``); the
import logic (:mod:`workbench.importers.load`) never names a framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from workbench.registry import Registry

from .validate import BadLines

__all__ = ["ADAPTERS", "SOURCE_PREFIX", "Adapter", "MetricMapping", "identity", "markdown_table"]

#: Metrics with no canonical counterpart are logged as ``source/<their name>``.
SOURCE_PREFIX = "source/"


def identity(x: float) -> float:
    return x


@dataclass(frozen=True)
class MetricMapping:
    """One source metric: where it goes and why.

    ``canonical`` None means "kept under ``source/<name>`` on purpose": the name looks like a
    canonical metric but means something else (``caveat`` says what).
    """

    source: str
    canonical: str | None
    defined_in: str  # the framework file (and function) that defines the source metric
    caveat: str = ""  # where the source definition differs from the canonical one ("" = same)
    convert: Callable[[float], float] = identity
    conversion: str = "as is"  # the conversion in words, for docs/import.md


@dataclass(frozen=True)
class Adapter:
    """A framework's metric vocabulary and how its runs are found.

    ``file_reader(path, bad) -> iterator of (where, step, {name: value})`` streams the framework's
    own metric log, line by line where the format allows (``where`` is ``"FILE:LINE"``), checking
    steps and values with :mod:`workbench.importers.validate`; a malformed line goes to ``bad``
    (a :class:`~workbench.importers.validate.BadLines`); raises ``ImportSourceError`` when the
    file is not such a log.
    """

    framework: str
    version: str  # the framework version whose source the mappings were read from
    mappings: tuple[MetricMapping, ...]
    file_reader: Callable[..., Iterator[tuple[str, int, dict[str, float]]]]
    file_kind: str  # what the file reader accepts, in words (error messages)
    ignored: frozenset[str] = field(default_factory=frozenset)  # bookkeeping keys that are not metrics
    #: ``(directory, split, metrics file) -> completions.Dump``: the completions the framework dumped
    #: (:mod:`.completions`), read by ``--rollouts`` / ``--eval-rollouts``; None: it dumps none
    completions_reader: Callable[[str, str, str], Any] | None = None
    #: the metrics file -> the completions directory the framework writes beside it, if there (read unasked)
    completions_beside: Callable[[str], str | None] | None = None
    completion_splits: tuple[str, ...] = ()  # the splits its dumps can be given as (train, eval)

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for m in self.mappings:
            if m.source in seen:
                raise ValueError(f"{self.framework} adapter maps {m.source!r} twice")
            seen[m.source] = m.canonical or ""
        targets = [m.canonical for m in self.mappings if m.canonical]
        doubled = sorted({t for t in targets if targets.count(t) > 1})
        if doubled:  # two source series on one canonical name would overwrite each other
            raise ValueError(f"{self.framework} adapter maps several source metrics to {doubled}")

    def read_file(self, path: str) -> list[tuple[int, dict[str, float]]]:
        """The whole log, merged by step (later values win) and sorted: for small files and tests;
        an import streams ``file_reader`` instead."""
        by_step: dict[int, dict[str, float]] = {}
        for _, step, metrics in self.file_reader(path, BadLines(path, skip=False)):
            by_step.setdefault(step, {}).update(metrics)
        return sorted(by_step.items())

    def mapping(self, source: str) -> MetricMapping | None:
        return self._by_source.get(source)

    @cached_property
    def _by_source(self) -> dict[str, MetricMapping]:
        return {m.source: m for m in self.mappings}

    @cached_property
    def _routes(self) -> dict[str, tuple[str | None, Callable[[float], float] | None]]:
        """source name -> (imported name or None if ignored, conversion or None if as is), filled
        as names appear: :meth:`convert_step` runs once per line of a log of millions."""
        return {}

    def _route(self, name: str) -> tuple[str | None, Callable[[float], float] | None]:
        if name in self.ignored:
            return None, None
        m = self._by_source.get(name)
        convert = m.convert if m is not None and m.canonical and m.convert is not identity else None
        return self.target(name), convert

    def target(self, source: str) -> str:
        """The name ``source`` is logged under in the imported run."""
        m = self.mapping(source)
        return m.canonical if m is not None and m.canonical else SOURCE_PREFIX + source

    def convert_step(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """One step's source metrics -> imported names and values (every finite or NaN number kept)."""
        out: dict[str, float] = {}
        routes = self._routes
        for name, value in metrics.items():
            route = routes.get(name)
            if route is None:
                route = routes[name] = self._route(name)
            target, convert = route
            if target is None or value is None:
                continue
            x = float(value)
            out[target] = convert(x) if convert is not None and math.isfinite(x) else x
        return out

    def mapping_report(self, names: Iterable[str]) -> list[dict[str, str]]:
        """For the names a run logged: ``{source, imported_as, caveat, defined_in}`` (artifact ``import.json``)."""
        rows = []
        for name in sorted(set(names) - self.ignored):
            m = self.mapping(name)
            rows.append(
                {
                    "source": name,
                    "imported_as": self.target(name),
                    "conversion": m.conversion if m else "as is",
                    "caveat": m.caveat if m else "",
                    "defined_in": m.defined_in if m else "",
                }
            )
        return rows


def markdown_table(adapter: Adapter) -> str:
    """The adapter's mappings as the markdown table docs/import.md shows (a test keeps them in sync)."""
    lines = ["| source metric | imported as | conversion | caveat | defined in |", "|---|---|---|---|---|"]
    for m in adapter.mappings:
        target = f"`{m.canonical}`" if m.canonical else f"`{SOURCE_PREFIX}{m.source}` (not canonical)"
        lines.append(f"| `{m.source}` | {target} | {m.conversion} | {m.caveat or 'same meaning'} | {m.defined_in} |")
    return "\n".join(lines) + "\n"


ADAPTERS: Registry[Adapter] = Registry("framework")
