"""``workbench rollouts STUDY``: read the completions the runs sampled (docs/rollouts.md).

The query is :mod:`workbench.analysis.rollouts`; this module parses the options, turns a
:class:`~workbench.errors.QueryError` into one line naming the option (exit 2) and prints. Completions are
user text: printed as plain text in the table (no markup; control characters made visible, :func:`visible`)
and escaped for markdown/HTML in ``--format md`` (:func:`md_cell`).
Registered on the main app by :func:`register` (``workbench/cli/main.py``).
"""

from __future__ import annotations

import html
import re
from typing import Annotated

import typer

from workbench.cli.common import TrackingOpt, resolve_target
from workbench.cli.console import print_table
from workbench.cli.output import err_console, fail
from workbench.errors import QueryError

__all__ = ["md_cell", "parse_steps", "register", "rollouts", "visible"]

FORMATS = ("table", "md", "csv", "json")
TABLE_LIMIT = 20  # rows a table or markdown shows unless --limit says otherwise
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
FLAGS = {
    "study": "STUDY",
    "variant": "--variant",
    "seed": "--seed",
    "steps": "--steps",
    "split": "--split",
    "outcome": "--correct/--incorrect/--truncated",
    "reward": "--min-reward/--max-reward",
    "worst": "--worst",
    "longest": "--longest",
    "same-prompts": "--same-prompts",
}


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """``A:B`` (inclusive), ``A:``, ``:B`` or ``A`` (one step) as ``(first, last)``; ValueError otherwise."""
    if text is None:
        return None
    first, sep, last = text.partition(":")
    try:
        lo = int(first) if first.strip() else None
        hi = (int(last) if last.strip() else None) if sep else lo
    except ValueError:
        raise ValueError(f"expected FIRST:LAST (inclusive; either may be left out), got {text!r}") from None
    if lo is None and hi is None and not sep:
        raise ValueError(f"expected FIRST:LAST (inclusive; either may be left out), got {text!r}")
    return lo, hi


def md_cell(value: object) -> str:
    """A markdown table cell showing ``value`` as its literal text: HTML escaped (``<``, ``&``), markdown's
    punctuation backslash-escaped, newlines as ``<br>`` (a cell is one line), other control characters as
    :func:`visible` shows them."""
    text = html.escape(str(value), quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    lines = text.splitlines() if "\n" in text or "\r" in text else [text]
    return "<br>".join(visible(line) for line in lines)


def visible(text: str) -> str:
    """``text`` for a terminal cell: a newline or tab as the two characters ``\\n`` / ``\\t``, other control
    characters (an ANSI escape a model emitted) as ``\\xNN``, so a completion cannot restyle the terminal."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def _shown(value: object) -> str:
    import pandas as pd  # deferred: loaded already (the frame's), not at the CLI's start

    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "-"  # an imported run's field its framework did not record (NaN: an int column with nulls)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def rollouts(
    study: Annotated[str, typer.Argument(help="study YAML file or study name")],
    variant: Annotated[
        list[str] | None, typer.Option("--variant", help="only this variant's runs (repeatable)")
    ] = None,
    seed: Annotated[list[int] | None, typer.Option("--seed", help="only runs of this seed (repeatable)")] = None,
    steps: Annotated[str | None, typer.Option("--steps", help="step range FIRST:LAST, inclusive (5:, :20, 7)")] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split", help="train (the RL steps' samples) or eval (held-out); default both, --same-prompts: eval"
        ),
    ] = None,
    correct: Annotated[bool, typer.Option("--correct", help="only completions judged correct")] = False,
    incorrect: Annotated[bool, typer.Option("--incorrect", help="only completions judged incorrect")] = False,
    truncated: Annotated[bool, typer.Option("--truncated", help="only completions cut at max_new_tokens")] = False,
    min_reward: Annotated[float | None, typer.Option("--min-reward", help="only rewards >= this")] = None,
    max_reward: Annotated[float | None, typer.Option("--max-reward", help="only rewards <= this")] = None,
    worst: Annotated[int | None, typer.Option("--worst", help="the N lowest rewards (ties: longer first)")] = None,
    longest: Annotated[int | None, typer.Option("--longest", help="the N longest completions")] = None,
    same: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--same-prompts",
            help="A B: two variants' answers to the same problems side by side (same seed, step and problem id)",
        ),
    ] = None,
    differing: Annotated[
        bool, typer.Option("--differing", help="with --same-prompts: only pairs whose correctness differs")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help=f"rows shown (default: {TABLE_LIMIT} for table and md, all for csv and json; 0: all)"
        ),
    ] = None,
    format: Annotated[str, typer.Option("--format", help="table | md | csv | json (to stdout)")] = "table",
    tracking_uri: TrackingOpt = None,
) -> None:
    """The completions the study's runs sampled and were evaluated on (every one is kept: docs/rollouts.md),
    filtered; or, with --same-prompts A B, two variants' answers to the same problems side by side."""
    from workbench.analysis.rollouts import query_rollouts, same_prompts  # deferred: pandas, pyarrow

    if format not in FORMATS:
        raise fail(f"--format: expected one of {', '.join(FORMATS)}, got {format!r}")
    outcomes = [name for name, on in (("correct", correct), ("incorrect", incorrect), ("truncated", truncated)) if on]
    if len(outcomes) > 1:
        raise fail(f"--{outcomes[0]} and --{outcomes[1]}: give one of --correct, --incorrect, --truncated")
    if limit is not None and limit < 0:
        raise fail(f"--limit: expected 0 (all) or a positive count, got {limit}")
    if same is None and differing:
        raise fail("--differing: only with --same-prompts A B")
    try:
        step_range = parse_steps(steps)
    except ValueError as error:
        raise fail(f"--steps: {error}") from None
    target = resolve_target(study, tracking_uri, allow_run=False, settings=False, cache_dir=False)
    try:
        if same is not None:
            if variant or outcomes or min_reward is not None or max_reward is not None or worst or longest:
                raise fail("--same-prompts takes --seed, --steps, --split and --differing; not the other filters")
            frame = same_prompts(
                target.study,
                same[0],
                same[1],
                reader=target.reader,
                seed=seed,
                steps=step_range,
                split=split or "eval",
                differing=differing,
            )
        else:
            frame = query_rollouts(
                target.study,
                reader=target.reader,
                variant=variant,
                seed=seed,
                split=split,
                steps=step_range,
                outcome=outcomes[0] if outcomes else None,
                min_reward=min_reward,
                max_reward=max_reward,
                worst=worst,
                longest=longest,
            )
    except QueryError as error:
        raise fail(f"{FLAGS.get(error.field, error.field)}: {error.message}") from None
    for line in notes(frame.attrs):
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)
    shown = limit if limit is not None else (TABLE_LIMIT if format in ("table", "md") else 0)
    total = len(frame)
    if shown:
        frame = frame.head(shown)
    _print(frame, format, same)
    if len(frame) < total:
        err_console.print(f"{len(frame)} of {total} rows shown (--limit 0: all)", highlight=False, markup=False)


def notes(attrs: dict) -> list[str]:
    """One stderr line per run whose completions are not all there: left out by its size budget, or unreadable."""
    out = []
    for run_id, manifest in sorted(attrs.get("manifests", {}).items()):
        dropped = sum(manifest.get("dropped", {}).values())
        if dropped:
            kept = sum(manifest.get("rows", {}).values())
            out.append(
                f"note: run {run_id[:8]} stored {kept:,} of {kept + dropped:,} completions "
                f"(tracking.rollouts_budget_mb; its rollouts/manifest.json says which steps)"
            )
    for run_id, why in sorted(attrs.get("unreadable", {}).items()):
        out.append(f"note: run {run_id[:8]}: rollouts not read: {why}")
    return out


def _columns(frame, same: tuple[str, str] | None) -> list[str]:
    if same is not None:  # the problem first (a stacked layout's heading), then the two answers side by side
        a, b = same
        return [
            "prompt",
            "answer",
            f"text.{a}",
            f"correct.{a}",
            f"text.{b}",
            f"correct.{b}",
            "step",
            "seed",
            "split",
            "prompt_id",
        ]
    return [
        "variant",
        "seed",
        "split",
        "step",
        "prompt_id",
        "prompt",
        "text",
        "reward",
        "correct",
        "length",
        "truncated",
    ]


def _print(frame, format: str, same: tuple[str, str] | None) -> None:
    if format == "csv":
        print(frame.to_csv(index=False), end="")
        return
    if format == "json":
        print(frame.to_json(orient="records", force_ascii=False))
        return
    columns = _columns(frame, same)
    rows = [[_shown(v) for v in row] for row in frame[columns].itertuples(index=False)]
    if format == "md":
        print("| " + " | ".join(md_cell(c) for c in columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(md_cell(c) for c in row) + " |")
        return
    wrap = [c for c in columns if c in ("prompt", "answer", "text") or c.startswith("text.")]
    print_table(columns, [[visible(c) for c in row] for row in rows], wrap=wrap)


def register(app: typer.Typer) -> None:
    """Add ``rollouts`` to ``app``."""
    app.command("rollouts")(rollouts)
