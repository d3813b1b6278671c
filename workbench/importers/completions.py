"""The completions a framework dumped beside its metric log, into the workbench's ``rollouts/`` artifacts.

``workbench import trl|verl FILE`` keeps the sampled completions the framework wrote (issue #51), so
``workbench rollouts STUDY`` reads an imported run's completions as it reads a workbench run's
(:mod:`workbench.tracking.rollouts` is the format). The framework's own reader (:mod:`.trl`,
:mod:`.verl`) turns its files into :class:`CompletionRecord` lists; this module checks and bounds them,
assigns groups and encodes the chunks, all before the import writes anything.

What a framework does not record is stored as unknown, never guessed: ``correct``, ``length`` and
``truncated`` are null and ``sampler_logp_sum`` NaN unless the dump holds them (``workbench rollouts
--correct`` then matches none of those rows). Groups: within one step, the completions of one prompt
text are one group, numbered in the order the prompts first appear (both frameworks write a prompt's
completions together, but verl may reorder a batch by length, so adjacency is not relied on).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.tracking.rollouts import (
    MANIFEST_ARTIFACT,
    MAX_BUFFERED_ROWS,
    TERM_PREFIX,
    completions_name,
    completions_schema,
    encode_parquet,
    prompt_digest,
    prompts_name,
)

from .errors import ImportSourceError
from .validate import file_sha256

__all__ = [
    "MAX_COMPLETION_FILES",
    "MAX_STEP",
    "Dump",
    "MAX_IMPORTED_COMPLETIONS",
    "MAX_COMPLETION_TEXT_BYTES",
    "CompletionRecord",
    "ImportedCompletions",
    "completion_files",
    "completion_rows",
]

MAX_COMPLETION_FILES = 100_000  # one file per logged step: a 100k-step run
MAX_IMPORTED_COMPLETIONS = 5_000_000  # rows per run: ~30-300 bytes each once encoded, a few hundred MB at most
MAX_COMPLETION_TEXT_BYTES = 1 << 30  # characters of prompt and completion text held while a run is checked
MAX_STEP = 2**31 - 1  # the rollouts format stores a step as int32


@dataclass
class CompletionRecord:
    """One completion as a framework's dump holds it (None: not recorded there)."""

    split: str  # train | eval
    step: int
    prompt: str
    text: str
    reward: float
    answer: str | None = None
    terms: dict[str, float] = field(default_factory=dict)  # the reward's parts (one per reward function)
    correct: bool | None = None
    advantage: float = math.nan


@dataclass
class Dump:
    """What one framework reader read from one directory."""

    records: list[CompletionRecord]
    files: list[Path]
    rules: list[str]  # how its fields became the rollouts' columns, in words (the manifest keeps them)
    not_imported: set[str] = field(default_factory=set)  # source fields with no column here


@dataclass
class ImportedCompletions:
    """A run's completions, checked and encoded: ``chunks`` are ``(artifact path, bytes)`` in the
    :mod:`workbench.tracking.rollouts` format, ``manifest`` its ``rollouts/manifest.json``."""

    chunks: list[tuple[str, bytes]]
    manifest: dict[str, Any]
    digest: str  # of the source files read: part of the imported run's source key
    rows: int

    @classmethod
    def build(cls, framework: str, dumps: Sequence[Dump]) -> ImportedCompletions:
        """The dumps (a train and an eval directory) as one run's chunks: groups assigned, rows and prompts
        encoded in chunks of at most :data:`MAX_BUFFERED_ROWS` rows."""
        records = [r for d in dumps for r in d.records]
        files = [str(p) for d in dumps for p in d.files]
        digest = files_digest(p for d in dumps for p in d.files)
        rules = list(dict.fromkeys(rule for d in dumps for rule in d.rules))
        not_imported = {n for d in dumps for n in d.not_imported}
        terms = list(dict.fromkeys(t for r in records for t in r.terms))
        ordered = sorted(range(len(records)), key=lambda i: (records[i].split != "train", records[i].step))
        written_prompts: set[str] = set()
        chunks: list[tuple[str, bytes]] = []
        rows: list[dict[str, Any]] = []
        prompts: dict[str, tuple[str, str | None]] = {}
        total = 0
        written = 0  # chunks

        def flush() -> None:
            nonlocal rows, prompts, total, written
            if not rows:
                return
            schema = completions_schema(terms)
            data = encode_parquet({name: [row.get(name, math.nan) for row in rows] for name in schema.names}, schema)
            if prompts:  # each problem once per run, in the chunk where it first appears (as a run writes them)
                prompt_data = encode_parquet(
                    {
                        "prompt_id": list(prompts),
                        "prompt": [p for p, _ in prompts.values()],
                        "answer": [a for _, a in prompts.values()],
                    }
                )
                chunks.append((prompts_name(written), prompt_data))
                total += len(prompt_data)
            chunks.append((completions_name(written), data))
            total += len(data)
            written += 1
            rows, prompts = [], {}

        for row, prompt, answer in completion_rows(records[i] for i in ordered):
            if row["prompt_id"] not in written_prompts:
                written_prompts.add(row["prompt_id"])
                prompts[row["prompt_id"]] = (prompt, answer)
            rows.append(row)
            if len(rows) >= MAX_BUFFERED_ROWS:
                flush()
        flush()
        by_split = {s: sum(1 for r in records if r.split == s) for s in ("train", "eval")}
        manifest = {
            "format": 1,
            "budget_bytes": None,
            "bytes": total,
            "chunks": written,
            "rows": by_split,
            "dropped": {"train": 0, "eval": 0},
            "strides": [[0, 1]],
            "stopped_at_step": None,
            "write_failure": None,
            "imported": {
                "framework": framework,
                "files": list(files),
                "rules": list(rules),
                "columns_not_imported": sorted(not_imported),
            },
        }
        return cls(chunks, manifest, digest, len(records))

    def artifacts(self) -> list[tuple[str, bytes]]:
        """Every artifact the imported run gets: the chunks, then the manifest."""
        return [*self.chunks, (MANIFEST_ARTIFACT, json.dumps(self.manifest, indent=1).encode())]


def completion_rows(records: Iterable[CompletionRecord]) -> Iterator[tuple[dict[str, Any], str, str | None]]:
    """Each record as a row of the rollouts format (:data:`~workbench.tracking.rollouts.COMPLETION_COLUMNS`
    and a ``reward.<term>`` per term), with its prompt and answer, in the order given. Groups: within one split
    and step, the records of one prompt text, numbered in the order the prompts first appear; ``sample``
    counts inside a group. What the record does not hold is null (NaN for ``sampler_logp_sum``); ``kept`` is
    true where the advantage is known (it entered the update), else null."""
    groups: dict[tuple[str, int, str], int] = {}
    counts: dict[tuple[str, int, str], int] = {}
    per_step: dict[tuple[str, int], int] = {}
    for r in records:
        key = (r.split, r.step, r.prompt)
        if key not in groups:
            groups[key] = per_step.get((r.split, r.step), 0)
            per_step[(r.split, r.step)] = groups[key] + 1
        sample = counts.get(key, 0)
        counts[key] = sample + 1
        row = {
            "split": r.split,
            "step": r.step,
            "prompt_id": prompt_digest(r.prompt, r.answer or ""),
            "group": groups[key],
            "sample": sample,
            "text": r.text,
            "reward": r.reward,
            "correct": r.correct,
            "length": None,
            "truncated": None,
            "sampler_logp_sum": math.nan,
            "advantage": r.advantage,
            "kept": None if math.isnan(r.advantage) else True,
        }
        for name, value in r.terms.items():
            row[f"{TERM_PREFIX}{name}"] = value
        yield row, r.prompt, r.answer


def completion_files(directory: str, matches: Any, what: str) -> list[tuple[int, Path]]:
    """``(step, path)`` of the files in ``directory`` whose name ``matches`` (a compiled pattern whose group 1 is
    the step), by step; other names are not the framework's dumps and are left alone. At most
    :data:`MAX_COMPLETION_FILES`; no such file is an error (the option named a directory without dumps)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ImportSourceError(f"{directory}: not a directory ({what})")
    found = []
    for entry in folder.iterdir():
        m = matches.fullmatch(entry.name)
        if m is None:
            continue
        step = int(m.group(1))
        if step > MAX_STEP:
            raise ImportSourceError(f"{entry}: step {step} is beyond the rollouts format's 32-bit step")
        found.append((step, entry))
        if len(found) > MAX_COMPLETION_FILES:
            raise ImportSourceError(
                f"{directory}: more than {MAX_COMPLETION_FILES:,} completion files, over the import limit"
            )
    if not found:
        raise ImportSourceError(
            f"{directory}: no {what} in it (expected files named like {matches.pattern.replace(chr(92), '')})"
        )
    return sorted(found)


def files_digest(paths: Iterable[Path]) -> str:
    """One digest of the files' names and contents (each within the import's size limit)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.name}\0{file_sha256(str(path))}\0".encode())
    return digest.hexdigest()


class Budget:
    """Counts a run's rows and text while its dumps are read: over a limit is an error naming the file."""

    def __init__(self) -> None:
        self.rows = 0
        self.text_bytes = 0

    def add(self, record: CompletionRecord, where: str) -> None:
        self.rows += 1
        self.text_bytes += len(record.prompt) + len(record.text)
        if self.rows > MAX_IMPORTED_COMPLETIONS:
            raise ImportSourceError(
                f"{where}: more than {MAX_IMPORTED_COMPLETIONS:,} completions in one run, over the import limit"
            )
        if self.text_bytes > MAX_COMPLETION_TEXT_BYTES:
            raise ImportSourceError(
                f"{where}: more than {MAX_COMPLETION_TEXT_BYTES:,} characters of prompt and "
                "completion text in one run, over the import limit"
            )


def finite_number(value: Any, what: str, where: str) -> float:
    """A score, reward or advantage: a JSON/parquet number (NaN kept: an unscorable completion); else an error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if value is None:
            return math.nan
        raise ImportSourceError(f"{where}: {what} {str(value)[:40]!r} is not a number")
    x = float(value)
    if math.isinf(x):
        raise ImportSourceError(f"{where}: {what} is infinite")
    return x
