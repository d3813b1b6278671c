"""Intervals over seeds *and* eval problems, from per-problem eval results.

Every seed of every arm is scored on the same held-out problems, one draw from the task's
population of problems. The seed-only interval of ``compare`` (a t interval over runs) answers
"on *these* problems"; when arms differ per problem (an arm better at some kinds of problem, worse
at others), which problems were drawn moves the difference too, and a seed-only interval around it
under-covers the difference over the population of problems (measured in
``tests/compare/test_problem_intervals.py``). This module adds the problem draw to the interval.

Data: per run, ``Y[p]`` = the run's summary restricted to problem ``p`` (for ``final_eval_accuracy``
the mean of the problem's 0/1 results over the last ``k`` evals), so the run's summary is
``mean_p Y[p]``; an arm's runs make an ``S x P`` matrix.

Method: **two-way random-effects t interval** (crossed seed and problem effects, balanced).
With ``Y_sp = mu + a_s + b_p + e_sp`` the grand mean has variance
``Var = s2_a/S + s2_b/P + s2_e/(S P)``. Its moment estimate (the ANOVA / REML estimate of a
balanced crossed design) is::

    V = V_seed + max(V_problem - V_overlap, 0)
    V_seed    = var(row means) / S        # what the seed-only t interval uses: s2_a/S + s2_e/(S P)
    V_problem = var(column means) / P     # what a problems-only interval would use: s2_b/P + s2_e/(S P)
    V_overlap = MS_residual / (S P)       # the run x problem noise, counted in both above

so the interval is the seed-only one plus the problem draw's component (a component estimated
negative is 0, as REML truncates it): never narrower than the seed-only interval it adds to.
**Degrees of freedom from the level that limits it**: Satterthwaite's df of the two terms
``seed_df`` (``S - 1``; two unpaired arms: Welch's, as the seed-only test) and ``P - 1``, with the
seed term taken at its 75% upper confidence bound (:data:`SEED_SHARE_BOUND`): seed-dominated, df is
near ``S - 1``; problem-dominated, near ``P - 1``. Why not plain Satterthwaite (used before issue
52): at 3 seeds the seed mean square has 2 df, so the seed share of ``V`` is estimated from 2
values' spread; when it comes out small by chance, the plug-in df (and the former truncation to the
problem term, P - 1 df) jump toward P - 1 exactly when ``V`` is too small, and the interval
under-covered (92.2% for a nominal 95% at 3 seeds, 300 problems, seed-dominated). Why not ``S - 1``
always (SAS's "containment" df): it over-covers, 99.3-99.8% where the two levels are comparable.
Why not a mixed model: statsmodels' MixedLM gives the same variance and no df. A difference of two arms uses the paired
structure: **paired seeds** (the same seed set in both arms) take ``Y = Y_arm - Y_baseline`` run
by run and problem by problem; unpaired seeds sum each arm's seed and residual terms, with the
problem term from the per-problem difference of the arms' column means (problems are always
shared: every run is scored on the same eval set). When the problem term is negligible the
interval is the seed-only t interval exactly (``V = V_seed``, ``df = S - 1``). With no variance
at all (every run scored every problem alike) there is no interval (NaN): the seed-only one, whose
zero-variance rule is a permutation test's, stands.

Why not the bootstrap over seeds and problems ("pigeonhole" bootstrap, resampling seeds and
problems jointly across arms): :func:`two_way_bootstrap` is kept for comparison. Resampling both
ways counts the run x problem noise twice, so it over-covers: 97-99% for a difference where this
interval covers 93-95% (printed by the simulation test). A statsmodels ``MixedLM`` with crossed
variance components gives the same variance on balanced data where both components are positive (to a
relative 3e-5, checked in the tests) in ~0.1 s per fit, but no degrees of freedom; this takes ~1 ms,
once per compared row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.stats as sps

from workbench.metrics.final import FINAL_EVALS, final_eval_weights
from workbench.metrics.passk import PASS_AT_K_METRICS, pass_at_k

from .outcomes import run_outcomes

__all__ = [
    "TWO_WAY_COLUMNS",
    "TWO_WAY_METHOD",
    "TWO_WAY_SUMMARIES",
    "TwoWay",
    "add_intervals",
    "per_problem_values",
    "two_way_bootstrap",
    "two_way_difference",
    "two_way_mean",
]

TWO_WAY_METHOD = (
    "t over seeds and problems (the seed-only variance plus the problem draw's variance component; "
    "df from the level that limits it)"
)
BOOTSTRAP_METHOD = "percentile bootstrap over seeds and problems (two-way, paired)"


@dataclass(frozen=True)
class TwoWay:
    """An estimate (a mean or a difference of means over runs and problems) with its interval
    over seeds and problems, and the variance terms behind it."""

    estimate: float
    lo: float
    hi: float
    se: float
    df: float
    v_seed: float  # the seed-only variance of the estimate (the seed-only interval's se**2)
    v_problem: float
    v_overlap: float
    method: str = TWO_WAY_METHOD

    @property
    def problem_share(self) -> float:
        """Fraction of the variance that the draw of problems adds to the seed-only variance."""
        total = self.se**2
        return 1.0 - self.v_seed / total if total > 0 else 0.0


def _terms(y: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """``V_seed, V_problem, MS_residual / (S P)`` of one ``S x P`` matrix, and its column means."""
    s, p = y.shape
    rows, cols = y.mean(axis=1), y.mean(axis=0)
    resid = y - rows[:, None] - cols[None, :] + y.mean()
    ms_resid = float((resid**2).sum()) / ((s - 1) * (p - 1)) if p > 1 else 0.0
    v_seed = float(rows.var(ddof=1)) / s
    v_problem = float(cols.var(ddof=1)) / p if p > 1 else 0.0
    return v_seed, v_problem, ms_resid / (s * p), cols


Term = tuple[float, float, str]  # (variance, its degrees of freedom, "seed" | "problem" | "overlap")


def _satterthwaite(terms: Sequence[Term]) -> float:
    """Satterthwaite's degrees of freedom of a sum of variance terms ``(variance, df, kind)``."""
    total = sum(v for v, _, _ in terms)
    denominator = sum(v**2 / df for v, df, _ in terms if df > 0 and v > 0)
    return total**2 / denominator if denominator > 0 else math.inf


#: The seed term enters Satterthwaite's df at its one-sided upper confidence bound at this level
#: (``V_seed (S - 1) / chi2_{S-1}(1 - level)``), so that a seed share estimated small from S - 1 df does
#: not buy the interval degrees of freedom it has not earned. 75%: calibrated by simulation at 3 seeds, 200-500
#: problems (50%, the plain median, under-covers, down to 93.0%; 90% over-covers, 96.4-98.3%; 75%: 94.8-96.8%;
#: docs/reports.md), checked in tests/compare/test_problem_intervals.py.
SEED_SHARE_BOUND = 0.75


def _interval(estimate: float, terms: Sequence[Term], confidence: float) -> TwoWay:
    """The t interval of ``V = seed + max(problem - overlap, 0)``, df from the level that limits it
    (module docstring)."""
    seed, problem, overlap = (sum(v for v, _, k in terms if k == kind) for kind in ("seed", "problem", "overlap"))
    seed_terms = [t for t in terms if t[2] == "seed"]
    seed_df = _satterthwaite(seed_terms)  # one arm or paired: S - 1; two unpaired arms: Welch's, as the seed test
    component = problem - overlap  # the problem draw's share of the variance; below 0 it is 0 (as REML truncates)
    v = seed + max(component, 0.0)
    df = seed_df
    if component > 0.0 and math.isfinite(seed_df):
        seed_bound = seed * seed_df / float(sps.chi2.ppf(1.0 - SEED_SHARE_BOUND, seed_df))
        problem_df = min(d for _, d, k in terms if k == "problem")
        df = (seed_bound + component) ** 2 / (seed_bound**2 / seed_df + component**2 / problem_df)
    se = math.sqrt(v)
    if se == 0.0:  # every run scored every problem alike: nothing to build a t interval from
        return TwoWay(estimate, math.nan, math.nan, 0.0, df, seed, problem, overlap)
    q = float(sps.t.ppf(0.5 + confidence / 2.0, df))  # df = inf: the normal quantile
    return TwoWay(estimate, estimate - q * se, estimate + q * se, se, df, seed, problem, overlap)


def _check(y: np.ndarray, name: str) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 1:
        raise ValueError(f"{name} must be a runs x problems matrix with at least 2 runs, got shape {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError(f"{name} has non-finite values")
    return y


def two_way_mean(y: np.ndarray, *, confidence: float = 0.95) -> TwoWay:
    """The mean of an arm's ``S x P`` per-run, per-problem values, with its interval over seeds
    and problems (module docstring)."""
    y = _check(y, "y")
    s, p = y.shape
    v_seed, v_problem, v_overlap, _ = _terms(y)
    terms = [(v_seed, s - 1, "seed"), (v_problem, p - 1, "problem"), (v_overlap, (s - 1) * (p - 1), "overlap")]
    return _interval(float(y.mean()), terms, confidence)


def two_way_difference(x: np.ndarray, y: np.ndarray, *, paired: bool, confidence: float = 0.95) -> TwoWay:
    """``mean(x) - mean(y)`` of two arms' ``runs x problems`` matrices (the same problems, in the
    same column order), with its interval over seeds and problems. ``paired``: row ``i`` of both
    is the same seed (then the rows are differenced first)."""
    x, y = _check(x, "x"), _check(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must share their problems (columns): {x.shape[1]} vs {y.shape[1]}")
    if paired:
        if x.shape != y.shape:
            raise ValueError(f"paired runs need matrices of one shape: {x.shape} vs {y.shape}")
        return two_way_mean(x - y, confidence=confidence)
    (sx, p), sy = x.shape, y.shape[0]
    vx_seed, _, vx_overlap, cx = _terms(x)
    vy_seed, _, vy_overlap, cy = _terms(y)
    v_problem = float((cx - cy).var(ddof=1)) / p if p > 1 else 0.0
    terms = [
        (vx_seed, sx - 1, "seed"),
        (vy_seed, sy - 1, "seed"),
        (v_problem, p - 1, "problem"),
        (vx_overlap, (sx - 1) * (p - 1), "overlap"),
        (vy_overlap, (sy - 1) * (p - 1), "overlap"),
    ]
    return _interval(float(x.mean() - y.mean()), terms, confidence)


def two_way_bootstrap(
    x: np.ndarray,
    y: np.ndarray | None = None,
    *,
    paired: bool = True,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    rng: np.random.Generator | int | None = 0,
) -> TwoWay:
    """The percentile bootstrap over seeds and problems, for comparison with the t interval: each
    resample draws seeds with replacement (the same seed indices in both arms when ``paired``,
    each arm its own otherwise) and problems with replacement (the same for both arms). ``y=None``:
    the mean of ``x``."""
    rng = np.random.default_rng(rng)
    x = _check(x, "x")
    s, p = x.shape
    problems = rng.multinomial(p, np.full(p, 1.0 / p), size=n_resamples) / p  # [B, P] problem weights

    def seed_weights(n: int) -> np.ndarray:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples) / n  # [B, n]

    if y is None:
        stats = np.einsum("bs,sp,bp->b", seed_weights(s), x, problems)
        estimate = float(x.mean())
    else:
        y = _check(y, "y")
        if paired:
            stats = np.einsum("bs,sp,bp->b", seed_weights(s), x - y, problems)
        else:
            stats = np.einsum("bs,sp,bp->b", seed_weights(s), x, problems) - np.einsum(
                "bs,sp,bp->b", seed_weights(y.shape[0]), y, problems
            )
        estimate = float(x.mean() - y.mean())
    lo, hi = np.quantile(stats, [0.5 - confidence / 2, 0.5 + confidence / 2])
    return TwoWay(
        estimate,
        float(lo),
        float(hi),
        float(stats.std(ddof=1)),
        math.nan,
        math.nan,
        math.nan,
        math.nan,
        BOOTSTRAP_METHOD,
    )


# --------------------------------------------------------------------------------------------
# From the per-problem table to runs x problems matrices
# --------------------------------------------------------------------------------------------


def _last_k_weights(steps: np.ndarray, k: int = FINAL_EVALS) -> np.ndarray:
    """``final_eval_accuracy``'s weights: 1/n on the last ``n <= k`` eval steps after step 0
    (:func:`workbench.metrics.final.final_eval_weights`, the one definition of "final")."""
    return final_eval_weights(steps, k)


def _last_window_weights(steps: np.ndarray, window: int = FINAL_EVALS) -> np.ndarray:
    """``final:eval/accuracy`` (its parameter is ``window``)."""
    return _last_k_weights(steps, window)


def _auc_weights(steps: np.ndarray) -> np.ndarray:
    """Trapezoid weights over the steps, divided by the span (``eval_auc``); one step: weight 1."""
    if steps.size == 1:
        return np.ones(1)
    x = steps.astype(float)
    gaps = np.diff(x)
    w = np.zeros(x.size)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return w / (x[-1] - x[0])


#: Eval-based summaries that are a weighted mean of ``eval/accuracy`` over eval steps, hence a mean
#: over problems of the same weighting of each problem's 0/1 results: ``name -> weights(steps, **params)``.
TWO_WAY_SUMMARIES = {
    "final_eval_accuracy": _last_k_weights,
    "final:eval/accuracy": _last_window_weights,
    "eval_auc": _auc_weights,
    # eval/pass_at_k is a mean over problems too, of each problem's unbiased pass@k from its correct count of
    # the n answers (rollout.eval_samples; the table's samples and n_correct columns): the same weighting
    **{f"final:{name}": _last_window_weights for name in PASS_AT_K_METRICS},
}


def problem_values(part: pd.DataFrame, summary: str) -> pd.Series:
    """Each row's value that ``summary`` averages: ``correct`` (0/1), or for ``final:eval/pass_at_k`` the
    problem's unbiased pass@k from ``samples`` and ``n_correct`` (NaN where a row lacks them)."""
    if not summary.startswith("final:eval/pass_at_"):
        return part["correct"]
    k = int(summary.rsplit("_", 1)[1])
    if not {"samples", "n_correct"} <= set(part.columns):
        return pd.Series(np.nan, index=part.index)
    return pd.Series(
        [
            pass_at_k(int(n), int(c), k) if n == n and c == c and k <= n else np.nan
            for n, c in zip(part["samples"], part["n_correct"], strict=True)
        ],
        index=part.index,
    )


def per_problem_values(
    problems: pd.DataFrame, run_ids: Sequence[str], summary: str, params: Mapping[str, object] | None = None
) -> tuple[np.ndarray, list[str]] | None:
    """The ``runs x problems`` matrix of ``summary`` restricted to each problem, for ``run_ids`` in
    order, from the long per-problem table (``run_id, step, problem_id, correct``), and the problem
    ids (columns, sorted). None when a run has no rows, the runs' eval steps or problem sets
    differ, or a (step, problem) is missing or repeated: then no interval over problems. Each run's
    eval steps weight its own rows (the summary's weights, e.g. its last ``k`` evals)."""
    weights_of = TWO_WAY_SUMMARIES[summary]
    part = problems[problems["run_id"].isin(set(run_ids))]
    if part.empty or part.duplicated(["run_id", "step", "problem_id"]).any():
        return None
    part = part.assign(value=problem_values(part, summary))
    if part["value"].isna().any():  # a row without the counts pass@k needs (a run with one answer per problem)
        return None
    table = part.pivot_table(index=["run_id", "step"], columns="problem_id", values="value", aggfunc="first")
    if table.isna().to_numpy().any():  # some run lacks a problem at some step, or the sets differ
        return None
    columns = sorted(table.columns)
    rows = []
    present = set(table.index.get_level_values(0))
    for rid in run_ids:
        if rid not in present:
            return None
        block = table.loc[rid, columns]  # [steps, P], steps sorted
        rows.append(weights_of(block.index.to_numpy(), **dict(params or {})) @ block.to_numpy(dtype=float))
    return np.vstack(rows), columns


# --------------------------------------------------------------------------------------------
# In the comparison table
# --------------------------------------------------------------------------------------------

#: Columns this module fills in :func:`workbench.compare.compare_variants`' table (NaN / "" where
#: there is no interval over problems).
TWO_WAY_COLUMNS: tuple[str, ...] = (
    "n_problems",
    "mean_2way_lo",
    "mean_2way_hi",
    "delta_2way_lo",
    "delta_2way_hi",
    "two_way_method",
)
#: |summary from eval/accuracy - summary from the per-problem rows| above which the rows are not the
#: run's (another eval set, a resumed run's gap): both are means of at most ~10^4 0/1 values with
#: weights summing to 1, so float error is ~1e4 x 2.2e-16 ~ 2e-12; 1e-9 leaves room for that only.
AGREEMENT_TOLERANCE = 1e-9


def add_intervals(
    rows: list[dict],
    summary_df: pd.DataFrame,
    problems: pd.DataFrame,
    *,
    units: pd.Series,
    seed_col: str,
    confidence: float,
) -> None:
    """Fill :data:`TWO_WAY_COLUMNS` of the table's ``rows`` (one per metric x arm) for eval-based
    summaries (:data:`TWO_WAY_SUMMARIES`) whose every finished run has per-problem results:
    the arm mean's interval over seeds and problems at ``confidence``, and Δ's at the row's
    corrected level (``delta_level``), paired by seed where the t-test was. Where a summary is
    eval-based but the interval cannot be made, the row's note says why and that its intervals are
    over seeds only. ``units``: each summary row's arm. The runs are those of the t-test: the
    arm's finished runs (:func:`workbench.compare.outcomes.run_outcomes`)."""
    if "run_id" not in summary_df.columns:
        raise ValueError("per-problem results need the summary's run_id column (summarize_runs keeps it)")
    params = dict(getattr(summary_df, "attrs", {}).get("params", {}))
    matrices: dict[tuple[str, str], tuple[np.ndarray, list, list[str]] | str] = {}

    def arm_matrix(metric: str, arm: str) -> tuple[np.ndarray, list, list[str]] | str:
        """(runs x problems values, seeds, problem ids) of the arm's finished runs, or why not."""
        if (metric, arm) in matrices:
            return matrices[metric, arm]
        part = summary_df[(units == arm).to_numpy()]
        part = part[run_outcomes(part, metric) == "finished"]
        run_ids = part["run_id"].astype(str).tolist()
        have = set(problems["run_id"].astype(str)) if len(problems) else set()
        lacking = sum(r not in have for r in run_ids)
        if len(run_ids) < 2:
            out: tuple | str = "fewer than 2 finished runs"
        elif lacking:
            out = f"no per-problem results for {lacking}/{len(run_ids)} runs of {arm}"
        else:
            got = per_problem_values(problems, run_ids, metric, params.get(metric, {}))
            mine = problems[problems["run_id"].astype(str).isin(set(run_ids))]
            if got is None and problem_values(mine, metric).isna().any():
                out = f"no per-problem answer counts (samples, n_correct) for every eval row of {arm}"
            elif got is None:
                out = f"the runs of {arm} were not all scored on the same eval problems"
            elif np.abs(got[0].mean(axis=1) - part[metric].to_numpy(dtype=float)).max() > AGREEMENT_TOLERANCE:
                out = f"per-problem results of {arm} disagree with its logged eval/accuracy"
            else:
                out = (got[0], part[seed_col].tolist(), got[1])
        matrices[metric, arm] = out
        return out

    arms = set(units)
    for row in rows:
        row.update(
            n_problems=math.nan,
            mean_2way_lo=math.nan,
            mean_2way_hi=math.nan,
            delta_2way_lo=math.nan,
            delta_2way_hi=math.nan,
            two_way_method="",
        )
        metric, arm = row["metric"], row["variant"]
        if metric not in TWO_WAY_SUMMARIES or arm not in arms:
            continue
        mine = arm_matrix(metric, arm)
        if isinstance(mine, str):
            _note(row, f"intervals over seeds only ({mine})")
            continue
        mean = two_way_mean(mine[0], confidence=confidence)
        if not math.isfinite(mean.lo):
            _note(row, "intervals over seeds only (no variance over seeds or problems)")
            continue
        row.update(
            n_problems=float(len(mine[2])), mean_2way_lo=mean.lo, mean_2way_hi=mean.hi, two_way_method=TWO_WAY_METHOD
        )
        base_arm = row.get("baseline_arm") or ""
        if not base_arm or base_arm == arm or not math.isfinite(row["delta_lo"]):
            continue  # a baseline row, no baseline, or no t interval of Δ (the rank test decides)
        base = arm_matrix(metric, base_arm)
        if isinstance(base, str):
            _note(row, f"Δ interval over seeds only ({base})")
        elif base[2] != mine[2]:
            _note(row, f"Δ interval over seeds only ({arm} and {base_arm} were scored on different eval problems)")
        else:
            level = row["delta_level"] if math.isfinite(row["delta_level"]) else confidence
            paired = row["paired"] is not pd.NA and bool(row["paired"])
            diff = _difference(mine, base, paired=paired, confidence=level)
            if math.isfinite(diff.lo):
                row.update(delta_2way_lo=diff.lo, delta_2way_hi=diff.hi)
                if row.get("status") in ("better", "worse", "higher", "lower") and diff.lo <= 0.0 <= diff.hi:
                    # the verdict is about these problems; over problems drawn alike it is not shown
                    _note(
                        row,
                        f"{row['status']} on these {int(row['n_problems'])} eval problems only: the Δ "
                        f"interval over seeds and problems [{diff.lo:.3g}, {diff.hi:.3g}] includes 0",
                    )
            else:
                _note(row, "Δ interval over seeds only (no variance over seeds or problems)")


def _note(row: dict, note: str) -> None:
    row["note"] = f"{row['note']}; {note}" if row.get("note") else note


def _difference(
    x: tuple[np.ndarray, list, list[str]], y: tuple[np.ndarray, list, list[str]], *, paired: bool, confidence: float
) -> TwoWay:
    """Δ of two arms' matrices; paired: on their common seeds, row by row (as the paired t-test)."""
    if not paired:
        return two_way_difference(x[0], y[0], paired=False, confidence=confidence)
    common = [s for s in x[1] if s in set(y[1])]
    xi = [x[1].index(s) for s in common]
    yi = [y[1].index(s) for s in common]
    return two_way_difference(x[0][xi], y[0][yi], paired=True, confidence=confidence)
