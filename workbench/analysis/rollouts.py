"""Query a study's stored completions (the runs' ``rollouts/`` artifacts, :mod:`workbench.tracking.rollouts`):
``workbench rollouts STUDY`` and ``Study.rollouts()`` call these.

    from workbench.analysis.rollouts import query_rollouts, same_prompts

    wrong = query_rollouts("grpo-vs-dr-grpo", variant="dr_grpo", outcome="incorrect", longest=20)
    pairs = same_prompts("grpo-vs-dr-grpo", "grpo", "dr_grpo", split="eval", differing=True)

Both return a pandas frame and never print; ``frame.attrs["manifests"]`` holds each run's manifest (what its
budget left out: ``dropped``) and ``frame.attrs["unreadable"]`` the runs whose chunks did not parse, with why. A query that cannot be answered (an unknown study or variant, a
seed no run has, a step range with no stored step, a bad choice) raises :class:`workbench.errors.QueryError`
(a ``ValueError``) whose ``field`` names the parameter, with one line saying what exists.

``query_rollouts`` columns: ``variant, seed, run_id, split, step, prompt_id, group, sample, prompt, answer,
text, reward, reward.<term>..., correct, length, truncated, sampler_logp_sum, advantage, kept``, one row per
completion (an imported run's: null where its framework did not record the field, ``--correct`` and
``--incorrect`` then match neither), ordered by variant (in the order their first runs started), seed, split, step, group, sample; ``worst=N`` keeps the N
lowest rewards (ties: the longer first), ``longest=N`` the N longest (ties: the lower reward first).

``same_prompts`` pairs two variants' completions to identical problems: rows of the same seed, split, step
and ``prompt_id``, the k-th occurrence of a problem in one run with the k-th in the other (by group, then
sample). Columns: ``seed, split, step, prompt_id, prompt, answer`` and, for each variant V,
``text.V, correct.V, reward.V, length.V, truncated.V``; ``differing=True`` keeps the pairs whose correctness
differs. Eval rows make the cleanest pairs: every seed of every variant is scored on the same problems.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from workbench.errors import QueryError, did_you_mean
from workbench.results.reader import StudyNotFound, StudyReader
from workbench.results.rollouts import read_rollouts
from workbench.tracking.rollouts import SPLITS

__all__ = ["OUTCOMES", "PAIR_FIELDS", "differing_answers", "load_rollouts", "query_rollouts", "same_prompts"]

OUTCOMES = ("correct", "incorrect", "truncated")
PAIR_FIELDS = ("text", "correct", "reward", "length", "truncated")
_ORDER = [
    "variant",
    "seed",
    "run_id",
    "split",
    "step",
    "prompt_id",
    "group",
    "sample",
    "prompt",
    "answer",
    "text",
    "reward",
]
_TAIL = ["correct", "length", "truncated", "sampler_logp_sum", "advantage", "kept"]


def _as_list(value: Any) -> list | None:
    if value is None:
        return None
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


def load_rollouts(
    study: str,
    *,
    tracking_uri: str | None = None,
    reader: StudyReader | None = None,
    variant: str | Iterable[str] | None = None,
    seed: int | Iterable[int] | None = None,
) -> pd.DataFrame:
    """Every stored completion of ``study``'s runs (only ``variant``'s / ``seed``'s runs when given, so only their
    artifacts are read), with the run's ``variant`` and ``seed``. Columns as :func:`query_rollouts`."""
    reader = reader or StudyReader(tracking_uri, cache_dir=False)
    try:
        _, runs = reader.load_runs(study)
    except StudyNotFound as error:
        raise QueryError("study", str(error)) from None
    variants = list(dict.fromkeys(runs["variant"]))
    wanted = _as_list(variant)
    for name in wanted or []:
        if name not in variants:
            raise QueryError(
                "variant",
                f"no variant {name!r} in study {study!r}{did_you_mean(name, variants)} "
                f"(variants: {', '.join(map(str, variants)) or 'none'})",
            )
    if wanted is not None:
        runs = runs[runs["variant"].isin(wanted)]
    seeds = _as_list(seed)
    if seeds is not None:
        have = sorted({int(s) for s in runs["seed"]})
        for s in seeds:
            if int(s) not in have:
                raise QueryError(
                    "seed",
                    f"no run with seed {s} in study {study!r}"
                    f"{' for ' + ', '.join(wanted) if wanted else ''} (seeds: "
                    f"{', '.join(map(str, have)) or 'none'})",
                )
        runs = runs[runs["seed"].astype(int).isin([int(s) for s in seeds])]
    rows = read_rollouts(reader, runs.reset_index(drop=True))
    attrs = dict(rows.attrs)  # manifests, unreadable runs: a merge does not carry attrs over
    if not len(rows):
        raise QueryError(
            "study",
            f"no stored completions in study {study!r}"
            f"{' for ' + ', '.join(wanted) if wanted else ''} (runs logged before rollouts "
            "were kept, runs imported without the framework's completion dumps, or "
            "tracking.rollouts_budget_mb: 0)",
        )
    info = runs[["run_id", "variant", "seed"]].astype({"seed": int})
    rows = rows.merge(info, on="run_id", how="left", validate="many_to_one")
    rank = {name: i for i, name in enumerate(variants)}
    rows = rows.sort_values(
        ["variant", "seed", "split", "step", "group", "sample"],
        kind="stable",
        key=lambda c: c.map(rank) if c.name == "variant" else c,
        ignore_index=True,
    )
    terms = [c for c in rows.columns if c.startswith("reward.")]
    out = rows[_ORDER + terms + _TAIL]
    out.attrs.update(attrs)
    return out


def _check_steps(rows: pd.DataFrame, steps: tuple[int | None, int | None] | None) -> tuple[int, int] | None:
    if steps is None:
        return None
    lo, hi = steps
    have_lo, have_hi = int(rows["step"].min()), int(rows["step"].max())
    lo = have_lo if lo is None else int(lo)
    hi = have_hi if hi is None else int(hi)
    if lo > hi:
        raise QueryError("steps", f"{lo}:{hi} is an empty range (the first step is after the last)")
    if hi < have_lo or lo > have_hi:
        raise QueryError("steps", f"{lo}:{hi} holds no stored step: the stored steps are {have_lo}..{have_hi}")
    return lo, hi


def _filter(
    rows: pd.DataFrame,
    *,
    split: str | None,
    steps,
    outcome: str | None,
    min_reward: float | None,
    max_reward: float | None,
) -> pd.DataFrame:
    if split is not None and split not in SPLITS:
        raise QueryError("split", f"expected one of {', '.join(SPLITS)}, got {split!r}")
    if outcome is not None and outcome not in OUTCOMES:
        raise QueryError("outcome", f"expected one of {', '.join(OUTCOMES)}, got {outcome!r}")
    if min_reward is not None and max_reward is not None and min_reward > max_reward:
        raise QueryError("reward", f"min {min_reward:g} is above max {max_reward:g}")
    if split is not None:
        rows = rows[rows["split"] == split]
        if not len(rows):
            raise QueryError("split", f"no {split} completions are stored for these runs")
    bounds = _check_steps(rows, steps)
    keep = pd.Series(True, index=rows.index)
    if bounds is not None:
        keep &= rows["step"].between(*bounds)
    # eq(): an imported run's unrecorded correctness or truncation (null) is neither correct nor incorrect
    if outcome == "correct":
        keep &= rows["correct"].eq(True)
    elif outcome == "incorrect":
        keep &= rows["correct"].eq(False)
    elif outcome == "truncated":
        keep &= rows["truncated"].eq(True)
    if min_reward is not None:
        keep &= rows["reward"] >= min_reward
    if max_reward is not None:
        keep &= rows["reward"] <= max_reward
    return rows[keep]


def query_rollouts(
    study: str,
    *,
    tracking_uri: str | None = None,
    reader: StudyReader | None = None,
    variant: str | Iterable[str] | None = None,
    seed: int | Iterable[int] | None = None,
    split: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    outcome: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    worst: int | None = None,
    longest: int | None = None,
) -> pd.DataFrame:
    """``study``'s stored completions that pass every filter given: ``variant`` / ``seed`` (one or several),
    ``split`` (``train`` | ``eval``), ``steps`` (inclusive ``(first, last)``, either end None for open),
    ``outcome`` (``correct`` | ``incorrect`` | ``truncated``), ``min_reward`` / ``max_reward`` (inclusive); then
    ``worst`` or ``longest`` N. See the module docstring for the columns; ``QueryError`` for a filter that
    names nothing stored."""
    if worst is not None and longest is not None:
        raise QueryError("worst", "worst and longest each order the rows: give one of them")
    for name, n in (("worst", worst), ("longest", longest)):
        if n is not None and n < 1:
            raise QueryError(name, f"expected a count of at least 1, got {n}")
    rows = load_rollouts(study, tracking_uri=tracking_uri, reader=reader, variant=variant, seed=seed)
    attrs = dict(rows.attrs)
    rows = _filter(rows, split=split, steps=steps, outcome=outcome, min_reward=min_reward, max_reward=max_reward)
    if worst is not None:
        rows = rows.sort_values(["reward", "length"], ascending=[True, False], kind="stable").head(worst)
    elif longest is not None:
        rows = rows.sort_values(["length", "reward"], ascending=[False, True], kind="stable").head(longest)
    out = rows.reset_index(drop=True)
    out.attrs.update(attrs)
    return out


def same_prompts(
    study: str,
    a: str,
    b: str,
    *,
    tracking_uri: str | None = None,
    reader: StudyReader | None = None,
    seed: int | Iterable[int] | None = None,
    split: str | None = "eval",
    steps: tuple[int | None, int | None] | None = None,
    differing: bool = False,
) -> pd.DataFrame:
    """Variants ``a`` and ``b``'s completions to identical problems, side by side (see the module docstring)."""
    if a == b:
        raise QueryError("same-prompts", f"two different variants are needed, got {a!r} twice")
    rows = load_rollouts(study, tracking_uri=tracking_uri, reader=reader, variant=[a, b], seed=seed)
    attrs = dict(rows.attrs)
    rows = _filter(rows, split=split, steps=steps, outcome=None, min_reward=None, max_reward=None)
    rows.attrs.update(attrs)
    keys = ["seed", "split", "step", "prompt_id"]
    rows = rows.assign(
        occurrence=rows.sort_values(["group", "sample"], kind="stable").groupby(["variant", *keys]).cumcount()
    )
    left, right = (rows[rows["variant"] == v].set_index([*keys, "occurrence"]) for v in (a, b))
    for name, side in ((a, left), (b, right)):
        if not len(side):
            raise QueryError("same-prompts", f"variant {name!r} has no stored completions here")
    fields = list(PAIR_FIELDS)
    pairs = (
        left[["prompt", "answer", *fields]]
        .rename(columns={f: f"{f}.{a}" for f in fields})
        .join(right[fields].rename(columns={f: f"{f}.{b}" for f in fields}), how="inner")
    )
    if differing:  # both judged, and differently (an imported run may not record correctness: null)
        ca, cb = pairs[f"correct.{a}"], pairs[f"correct.{b}"]
        pairs = pairs[ca.notna() & cb.notna() & (ca != cb)]
    pairs = pairs.reset_index().sort_values([*keys, "occurrence"], kind="stable", ignore_index=True)
    columns = [*keys, "prompt", "answer"] + [f"{f}.{v}" for v in (a, b) for f in PAIR_FIELDS]
    out = pairs[columns]
    out.attrs.update(rows.attrs)
    out.attrs["variants"] = (a, b)
    return out


def differing_answers(
    study: str,
    baseline: str,
    variants: Iterable[str],
    *,
    reader: StudyReader | None = None,
    tracking_uri: str | None = None,
    per_variant: int = 3,
) -> dict[str, pd.DataFrame]:
    """For the compare report: per variant, up to ``per_variant`` eval problems at the last eval step both
    arms stored where the variant and ``baseline`` differ in correctness, side by side (:func:`same_prompts`).
    A variant without stored completions (runs from before they were kept) is left out."""
    out: dict[str, pd.DataFrame] = {}
    for variant in variants:
        if variant == baseline:
            continue
        try:
            pairs = same_prompts(
                study, baseline, variant, reader=reader, tracking_uri=tracking_uri, split="eval", differing=True
            )
        except (QueryError, StudyNotFound):
            continue
        if len(pairs):
            last = pairs[pairs["step"] == pairs["step"].max()]
            out[variant] = last.head(per_variant).reset_index(drop=True)
    return out
