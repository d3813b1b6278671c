"""Every sampled completion of a run, kept compactly: the ``rollouts/`` artifacts (issue 51).

Written as the run goes by :class:`RolloutRecorder` (hooked into :func:`workbench.train.loop.train`, and into
TRL's trainer by :mod:`workbench.execution.trl_engine` for an ``engine: trl`` run),
read back by :func:`workbench.results.rollouts.read_run_rollouts`, queried by
:func:`workbench.analysis.rollouts.query_rollouts` (``workbench rollouts STUDY``).

Format: parquet chunks (zstd), one pair per flush, numbered from 0:

``rollouts/completions-NNNNN.parquet``, one row per completion, columns :data:`COMPLETION_COLUMNS`:
  ``split`` (``train``: the RL step's samples, every sampling round of a batch filter included; ``eval``:
  the held-out eval, before that step's update), ``step``, ``prompt_id`` (eval: the id of
  ``eval/problems.csv.gz``, :func:`workbench.train.evaluate.problem_ids`; train: sha1(prompt NUL answer)[:12],
  the same digest), ``group`` (the step's group: completions of one prompt share it), ``sample`` (the
  completion's index inside its group), ``text`` (the decoded completion, EOS and padding stripped),
  ``reward`` (the total the advantages were computed from, before any KL penalty) and its parts
  ``reward.<term>`` (only when shaping adds terms to correctness), ``correct``, ``length`` (response tokens, EOS
  included), ``truncated`` (hit ``max_new_tokens`` without EOS), ``sampler_logp_sum`` (sum of the sampler's
  logprobs of the response tokens), ``advantage`` (NaN where the completion did not enter the update: eval
  rows, groups a batch filter dropped) and ``kept`` (it entered the update).

``rollouts/prompts-NNNNN.parquet``: ``prompt_id``, ``prompt`` (rendered exactly as fed to the model: the
prompt template or chat template applied), ``answer`` (gold): each problem once per run, in the chunk where
it first appears.

``completions.json`` (logged with ``MlflowClient.log_table``, so MLflow's run page shows it as a table): the
completions of the run's last stored eval step and of its last stored train step, with prompt and answer.

``rollouts/manifest.json``, written when the run ends: ``budget_bytes``, ``bytes`` (written), ``rows`` and
``dropped`` per split, ``strides`` (``[[from_step, k], ...]``: the train-step sampling in force), ``chunks``, and
``imported`` where the rows were read from another trainer's files (an imported run's, or a standalone
``WorkbenchCallback``'s from TRL's ``log_completions``: :meth:`RolloutRecorder.record_rows`): the files and rules.

Budget (``tracking.rollouts_budget_mb``) and the sampling rule when a run would exceed it:
  1. Eval completions are kept while the budget lasts (they are what variants are compared on).
  2. Train completions are kept a whole step at a time: step ``s`` is kept iff ``s % k == 0``; ``k`` starts
     at 1. After each chunk is written, the run's final size is projected from the bytes per kept step so far
     (train and eval apart) and the steps still to come; while that projection exceeds the budget, ``k``
     doubles (the steps kept so far stay a subset of the multiples of the new ``k``).
  3. Hard cap: a chunk that would take the written bytes past the budget is not written; recording stops
     there. Every completion not stored is counted in the manifest's ``dropped``, never dropped silently;
     so is a chunk the store could not write (a full disk: ``write_failure`` says why; the next chunk tries
     again).
The default budget (64 MB) keeps every completion of the CPU default studies (docs/rollouts.md:
~30 bytes per completion of the built-in tiny model).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.tracking.writer import store_write_failure

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from workbench.batch import ScoredRollouts

ROLLOUTS_DIR = "rollouts"
MANIFEST_ARTIFACT = f"{ROLLOUTS_DIR}/manifest.json"
TABLE_ARTIFACT = "completions.json"  # the last eval's and last train step's completions, as MLflow's table
COMPLETION_COLUMNS: tuple[str, ...] = (
    "split",
    "step",
    "prompt_id",
    "group",
    "sample",
    "text",
    "reward",
    "correct",
    "length",
    "truncated",
    "sampler_logp_sum",
    "advantage",
    "kept",
)
PROMPT_COLUMNS: tuple[str, ...] = ("prompt_id", "prompt", "answer")
TERM_PREFIX = "reward."  # reward.<term> columns: the shaping terms
SPLITS = ("train", "eval")
DEFAULT_FLUSH_EVERY = 10  # steps between chunks (as the metrics' flush)
MAX_BUFFERED_ROWS = 50_000  # a chunk is written sooner when this many rows wait


def prompt_digest(prompt: str, answer: str) -> str:
    """The problem id of a training prompt: the digest :func:`workbench.train.evaluate.problem_ids` gives
    an eval problem (there, ``#k`` marks the k-th repeat inside the eval set)."""
    return hashlib.sha1(f"{prompt}\0{answer}".encode()).hexdigest()[:12]


_ARTIFACT_NAME = re.compile(r"rollouts/((completions|prompts)-\d{5}\.parquet|manifest\.json)")


def is_rollout_artifact(path: str) -> bool:
    """Whether ``path`` is one of the files this format writes (an export carries exactly those)."""
    return _ARTIFACT_NAME.fullmatch(path) is not None


def completions_name(chunk: int) -> str:
    return f"{ROLLOUTS_DIR}/completions-{chunk:05d}.parquet"


def prompts_name(chunk: int) -> str:
    return f"{ROLLOUTS_DIR}/prompts-{chunk:05d}.parquet"


def completions_schema(terms: Sequence[str]):
    """The completions chunk's arrow schema, with a ``reward.<term>`` column per term (nullable columns: an
    imported run stores what its framework did not record as null, :mod:`workbench.importers.completions`)."""
    import pyarrow as pa  # deferred: as above

    return pa.schema(
        [
            ("split", pa.string()),
            ("step", pa.int32()),
            ("prompt_id", pa.string()),
            ("group", pa.int32()),
            ("sample", pa.int32()),
            ("text", pa.string()),
            ("reward", pa.float32()),
        ]
        + [(f"{TERM_PREFIX}{t}", pa.float32()) for t in terms]
        + [
            ("correct", pa.bool_()),
            ("length", pa.int32()),
            ("truncated", pa.bool_()),
            ("sampler_logp_sum", pa.float32()),
            ("advantage", pa.float32()),
            ("kept", pa.bool_()),
        ]
    )


def encode_parquet(columns: dict[str, list], schema=None) -> bytes:
    """``columns`` (equal-length lists) as parquet bytes, zstd-compressed, with dictionary-encoded strings."""
    import pyarrow as pa  # deferred: pyarrow, for the runs and readers that keep rollouts
    import pyarrow.parquet as pq

    table = pa.table(columns, schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def decode_parquet(data: bytes, required: Iterable[str], what: str) -> pd.DataFrame:
    """A chunk's rows; ``ValueError`` naming ``what`` when it is not parquet or lacks a column."""
    import pyarrow as pa  # deferred: pyarrow, for the runs and readers that keep rollouts
    import pyarrow.parquet as pq

    try:
        frame = pq.read_table(io.BytesIO(data)).to_pandas()
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{what} is not a parquet file: {error}") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}")
    return frame


@dataclass
class _Split:
    rows: int = 0  # stored
    dropped: int = 0  # not stored (sampling or the hard cap)
    bytes: float = 0.0  # written, shared out by rows (for the projection)
    steps: set[int] = field(default_factory=set)  # steps with stored rows


class RolloutRecorder:
    """Buffers a run's completions and writes them as parquet chunks through ``write(data, artifact_path)``
    (the run's MLflow tracker): see the module docstring for the format and the budget's sampling rule.

    ``steps``: the run's RL steps; ``eval_steps``: the steps it evaluates at (for the projection);
    ``render``: the prompt as the sampler feeds it (template / chat template applied)."""

    def __init__(
        self,
        write: Callable[[bytes, str], None],
        *,
        budget_bytes: int,
        steps: int,
        eval_steps: Iterable[int],
        render: Callable[[str], str],
        flush_every: int = DEFAULT_FLUSH_EVERY,
    ) -> None:
        self.write = write
        self.budget_bytes = int(budget_bytes)
        self.steps = steps
        self.eval_steps = sorted(set(eval_steps))
        self.render = render
        self.flush_every = flush_every
        self.stride = 1
        self.strides: list[list[int]] = [[0, 1]]
        self.splits = {s: _Split() for s in SPLITS}
        self.written = 0  # bytes
        self.chunks = 0
        self.stopped_at: int | None = None  # the hard cap: the step whose chunk did not fit
        self.write_failure: str | None = None  # why the store could not write a chunk (a full disk), if it could not
        self.seconds = 0.0  # time spent here (building rows, encoding, writing): the overhead benchmark
        # rows read from another trainer's dump (record_rows): its framework, files and rules, as an import's manifest
        self.imported: dict[str, Any] | None = None
        self._rows: list[dict[str, Any]] = []
        self._row_splits: list[str] = []
        self._prompts: dict[str, tuple[str, str | None]] = {}  # waiting to be written
        self._known: dict[str, tuple[str, str | None]] = {}  # prompt id -> (prompt as fed, answer): written or waiting
        self._terms: list[str] = []
        self._steps_since_flush = 0
        self._last_step = -1
        self._latest: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}  # the last step's rows per split

    # ---- the loop's calls --------------------------------------------------------------------

    def keeps_train_step(self, step: int) -> bool:
        return self.stopped_at is None and step % self.stride == 0

    def record_eval(
        self, step: int, scored: ScoredRollouts, problem_ids: Sequence[str], samples_per_problem: int = 1
    ) -> None:
        """One eval chunk's completions, ``samples_per_problem`` per problem (``rollout.eval_samples``,
        grouped by problem), ``problem_ids`` one per problem in the same order."""
        t0 = time.perf_counter()
        n = len(scored.rewards)
        k = samples_per_problem
        if self.stopped_at is not None:
            self.splits["eval"].dropped += n
        else:
            self._add(
                "eval",
                step,
                scored,
                [pid for pid in problem_ids for _ in range(k)],
                groups=[i // k for i in range(n)],
                samples=[i % k for i in range(n)],
                advantages=[math.nan] * n,
                kept=[False] * n,
            )
        self.seconds += time.perf_counter() - t0

    def record_train(
        self, step: int, sampled: ScoredRollouts, advantages: torch.Tensor, kept: torch.Tensor | None
    ) -> None:
        """A step's sampled completions; ``advantages`` [K] are the update's, for the rows ``kept`` [K] (indices
        into ``sampled``; None: every row, in order)."""
        t0 = time.perf_counter()
        n = len(sampled.rewards)
        if not self.keeps_train_step(step):
            self.splits["train"].dropped += n
            self.seconds += time.perf_counter() - t0
            return
        r = sampled.rollouts
        adv = [math.nan] * n
        in_update = [False] * n
        for i, a in zip(range(n) if kept is None else kept.tolist(), advantages.float().tolist(), strict=True):
            adv[i], in_update[i] = a, True
        groups = r.group_ids.tolist()
        samples, counts = [], {}
        for g in groups:
            samples.append(counts.get(g, 0))
            counts[g] = counts.get(g, 0) + 1
        ids = [prompt_digest(p.prompt, p.answer) for p in r.problems]
        self._add("train", step, sampled, ids, groups=groups, samples=samples, advantages=adv, kept=in_update)
        self.seconds += time.perf_counter() - t0

    def record_train_rows(
        self,
        step: int,
        problems: Sequence[Any],
        texts: Sequence[str],
        *,
        rewards: Sequence[float],
        correct: Sequence[bool],
        lengths: Sequence[int],
        truncated: Sequence[bool],
        advantages: Sequence[float],
        kept: Sequence[bool],
        group_size: int,
    ) -> None:
        """A step's completions sampled by another trainer (``engine: trl``), one value per completion in the
        order sampled, each prompt's ``group_size`` completions in a row; the sampler's logprobs are not known
        there (``sampler_logp_sum`` NaN)."""
        t0 = time.perf_counter()
        n = len(texts)
        if not self.keeps_train_step(step):
            self.splits["train"].dropped += n
        else:
            self._add_rows(
                "train",
                step,
                problems,
                [prompt_digest(p.prompt, p.answer) for p in problems],
                texts=texts,
                rewards=list(rewards),
                correct=list(correct),
                lengths=list(lengths),
                truncated=list(truncated),
                logp_sums=[math.nan] * n,
                terms={},
                groups=[i // group_size for i in range(n)],
                samples=[i % group_size for i in range(n)],
                advantages=list(advantages),
                kept=list(kept),
            )
        self.seconds += time.perf_counter() - t0

    def record_rows(
        self, split: str, step: int, rows: Sequence[dict[str, Any]], prompts: dict[str, tuple[str, str | None]]
    ) -> None:
        """A step's completions already in this format (another trainer's dump, read by
        :mod:`workbench.importers.completions`), stored at ``step``; ``prompts``: each row's prompt id -> (the
        prompt as the trainer fed it, its answer or None). The budget's rules apply as to any step."""
        t0 = time.perf_counter()
        if self.stopped_at is not None or (split == "train" and not self.keeps_train_step(step)):
            self.splits[split].dropped += len(rows)
        else:
            for given in rows:
                row = dict(given, split=split, step=step)
                for name in row:
                    if name.startswith(TERM_PREFIX) and name.removeprefix(TERM_PREFIX) not in self._terms:
                        self._terms.append(name.removeprefix(TERM_PREFIX))
                prompt_id = row["prompt_id"]
                if prompt_id not in self._known:
                    self._known[prompt_id] = self._prompts[prompt_id] = prompts[prompt_id]
                self._append(split, row)
        self.seconds += time.perf_counter() - t0

    def end_step(self, step: int) -> None:
        """After a step is logged: a chunk every ``flush_every`` steps (or sooner, many rows waiting)."""
        t0 = time.perf_counter()
        self._last_step = step
        self._steps_since_flush += 1
        if self._steps_since_flush >= self.flush_every or len(self._rows) >= MAX_BUFFERED_ROWS:
            self.flush()
        self.seconds += time.perf_counter() - t0

    def close(self) -> dict[str, Any]:
        """Write what is buffered and the manifest; returns the manifest."""
        t0 = time.perf_counter()
        self.flush()
        manifest = self.manifest()
        try:
            self.write(json.dumps(manifest, indent=1).encode(), MANIFEST_ARTIFACT)
        except Exception as error:  # a full disk: the run says so for its metrics; the counts are returned
            if store_write_failure(error) is None:
                raise
            self.write_failure = manifest["write_failure"] = store_write_failure(error)
        self.seconds += time.perf_counter() - t0
        return manifest

    def latest_table(self) -> list[dict[str, Any]]:
        """The completions of the last stored eval step and of the last stored train step, one dict per row with
        its prompt and answer: the run's ``completions.json`` table, which MLflow's run page shows
        (:data:`TABLE_ARTIFACT`)."""
        columns = [
            "split",
            "step",
            "prompt",
            "text",
            "correct",
            "reward",
            "length",
            "truncated",
            "answer",
            "advantage",
            "prompt_id",
        ]  # what a reader looks at first on the left
        return [{c: row[c] for c in columns} for split in ("eval", "train") for row in self._latest[split]]

    def manifest(self) -> dict[str, Any]:
        return {
            "format": 1,
            "budget_bytes": self.budget_bytes,
            "bytes": self.written,
            "chunks": self.chunks,
            "rows": {s: v.rows for s, v in self.splits.items()},
            "dropped": {s: v.dropped for s, v in self.splits.items()},
            "strides": self.strides,
            "stopped_at_step": self.stopped_at,
            "write_failure": self.write_failure,
        } | ({} if self.imported is None else {"imported": self.imported})

    def replay(self, rows: pd.DataFrame) -> None:
        """Buffer again the rows an earlier attempt of this run stored (a run resumed from a checkpoint: the
        steps before the resume, :func:`workbench.results.rollouts.earlier_attempt_rollouts`), as they were."""
        terms = [c for c in rows.columns if c.startswith(TERM_PREFIX)]
        for name in terms:
            if name.removeprefix(TERM_PREFIX) not in self._terms:
                self._terms.append(name.removeprefix(TERM_PREFIX))
        for record in rows[[*COMPLETION_COLUMNS, *terms, "prompt", "answer"]].astype(object).to_dict("records"):
            prompt_id = record["prompt_id"]
            if prompt_id not in self._known:
                self._known[prompt_id] = self._prompts[prompt_id] = (record.pop("prompt"), record.pop("answer"))
            else:
                del record["prompt"], record["answer"]
            self._rows.append(record)
            self._row_splits.append(record["split"])

    # ---- buffering and writing ----------------------------------------------------------------

    def _add(self, split: str, step: int, scored: ScoredRollouts, ids: list[str], **placement: list) -> None:
        r = scored.rollouts
        self._add_rows(
            split,
            step,
            r.problems,
            ids,
            texts=r.texts,
            rewards=scored.rewards.float().tolist(),
            correct=[bool(c) for c in scored.correct.tolist()],
            lengths=[int(n) for n in r.lengths.tolist()],
            truncated=[bool(t) for t in r.truncated.tolist()],
            logp_sums=(r.sampler_logp.float() * r.mask).sum(-1).tolist(),
            terms={name: t.float().tolist() for name, t in scored.reward_terms.items()},
            **placement,
        )

    def _add_rows(
        self,
        split: str,
        step: int,
        problems: Sequence[Any],
        ids: list[str],
        *,
        texts: Sequence[str],
        rewards: Sequence[float],
        correct: Sequence[bool],
        lengths: Sequence[int],
        truncated: Sequence[bool],
        logp_sums: Sequence[float],
        terms: dict[str, list[float]],
        groups: list[int],
        samples: list[int],
        advantages: list[float],
        kept: list[bool],
    ) -> None:
        for name in terms:
            if name not in self._terms:
                self._terms.append(name)
        for i, problem in enumerate(problems):
            if ids[i] not in self._known:
                self._known[ids[i]] = self._prompts[ids[i]] = (self.render(problem.prompt), problem.answer)
            row = {
                "split": split,
                "step": step,
                "prompt_id": ids[i],
                "group": groups[i],
                "sample": samples[i],
                "text": texts[i],
                "reward": rewards[i],
                "correct": correct[i],
                "length": lengths[i],
                "truncated": truncated[i],
                "sampler_logp_sum": logp_sums[i],
                "advantage": advantages[i],
                "kept": kept[i],
            }
            for name, values in terms.items():
                row[f"{TERM_PREFIX}{name}"] = values[i]
            self._append(split, row)

    def _append(self, split: str, row: dict[str, Any]) -> None:
        self._rows.append(row)
        self._row_splits.append(split)
        latest = self._latest[split]
        if latest and latest[0]["step"] != row["step"]:
            latest.clear()
        prompt, answer = self._known[row["prompt_id"]]
        latest.append({"prompt": prompt, "answer": answer} | row)

    def flush(self) -> None:
        """Write the buffered rows as one chunk (within the budget), then re-project the stride."""
        self._steps_since_flush = 0
        if not self._rows:
            return
        rows, splits, prompts = self._rows, self._row_splits, self._prompts
        self._rows, self._row_splits, self._prompts = [], [], {}
        columns = {name: [row.get(name, math.nan) for row in rows] for name in completions_schema(self._terms).names}
        data = encode_parquet(columns, completions_schema(self._terms))
        prompt_data = (
            encode_parquet(
                {
                    "prompt_id": list(prompts),
                    "prompt": [p for p, _ in prompts.values()],
                    "answer": [a for _, a in prompts.values()],
                }
            )
            if prompts
            else b""
        )
        size = len(data) + len(prompt_data)
        if self.written + size > self.budget_bytes:  # the hard cap: this chunk is not written, nor anything after
            for split in splits:
                self.splits[split].dropped += 1
            self.stopped_at = min(int(row["step"]) for row in rows)
            for prompt_id in prompts:
                del self._known[prompt_id]
            return
        chunk, self.chunks = self.chunks, self.chunks + 1  # a number is never reused, even by a failed write
        try:
            if prompt_data:
                self.write(prompt_data, prompts_name(chunk))
            self.write(data, completions_name(chunk))
        except Exception as error:  # sorted: only "the store cannot write" (a full disk) is survived
            cause = store_write_failure(error)
            if cause is None:
                raise
            self.write_failure = cause  # in the manifest; the rows are counted as dropped, the next chunk tries again
            for split in splits:
                self.splits[split].dropped += 1
            for prompt_id in prompts:  # written with the next chunk that has them
                del self._known[prompt_id]
            return
        self.written += size
        for row, split in zip(rows, splits, strict=True):
            part = self.splits[split]
            part.rows += 1
            part.bytes += size / len(rows)
            part.steps.add(int(row["step"]))
        self._reproject()

    def _reproject(self) -> None:
        """Double the train stride while the projected final size exceeds the budget (rule 2)."""
        train, evals = self.splits["train"], self.splits["eval"]
        per_train_step = train.bytes / len(train.steps) if train.steps else 0.0
        per_eval = evals.bytes / len(evals.steps) if evals.steps else 0.0
        evals_left = sum(1 for s in self.eval_steps if s > self._last_step)
        start = self._last_step + 1
        while True:
            train_left = sum(1 for s in range(start, self.steps) if s % self.stride == 0)
            projected = self.written + per_train_step * train_left + per_eval * evals_left
            if projected <= self.budget_bytes or train_left == 0 or self.stride > self.steps:
                return
            self.stride *= 2
            if self.strides[-1][0] == start:
                self.strides[-1][1] = self.stride
            else:
                self.strides.append([start, self.stride])
