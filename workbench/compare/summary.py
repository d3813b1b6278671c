"""Per-run summary metrics from a study's tidy metric history, and curve alignment.

Input (produced from MLflow by ``workbench.tracking``):
* ``history``: one row per logged value, columns ``run_id`` (str), ``variant`` (str), ``seed``
  (int), ``step`` (int, the RL step), ``metric`` (canonical name, docs/metrics.md), ``value`` (float).
* ``runs``: one row per run, columns ``run_id, variant, seed, status, health`` plus params
  (flattened dotted keys, with or without a ``params.`` prefix).

A summary metric turns one run's curves into one number. Each is a function registered in
:data:`SUMMARY_METRICS` under its name with its healthy direction (``higher_is_better``) and the
metrics it reads; ``summarize_runs`` computes the chosen ones for every run::
    summary = summarize_runs(history, runs, ["final_eval_accuracy", "tokens_per_correct"],
                             params={"final_eval_accuracy": {"k": 5}})

Besides the registered names, ``"final:<metric>"`` (e.g. ``final:eval/length_mean``) is the mean
of the last values of any logged metric: for ``eval/*`` metrics the one definition of "final"
(:mod:`workbench.metrics.final`: the mean of the last 3 evals after step 0), the last 10 otherwise.

Conventions, fixed once here:
* A run's curve for a metric is its finite values by step, sorted; a step logged twice keeps
  the last value logged.
* A summary is NaN when the run lacks the data (no eval logged, no token counts, ...), and
  ``inf`` when the run has the data but never got there (**censored**: a threshold never
  reached, nothing correct); :mod:`workbench.compare.outcomes` ranks such runs worst instead of
  dropping them. Each summary that can be censored says how in ``SummaryMetric.censored``.
* **Samples** are sampled completions. Per step they are the ``perf/samples`` counter when
  logged, else ``rollout.prompts_per_step x rollout.group_size`` from the run's params, else
  ``perf/sample_tokens / length/mean``.
* **Tokens** are generated (sampled) response tokens. Per step they are the
  ``perf/sample_tokens`` counter when logged, else ``length/mean x samples``.
* Cumulative samples/tokens at step ``s`` of a training metric count every training step
  ``<= s`` (it is logged after step ``s`` sampled); at step ``s`` of an **eval** metric they count
  the steps ``< s`` only: the loop evaluates at step ``s`` *before* step ``s`` samples and
  updates (``workbench.train.loop``), so the eval at step ``s`` has seen ``s`` steps of samples
  (an eval before the first training step sits at 0).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.metrics.catalogue import CATALOGUE, metric_bounds
from workbench.metrics.final import FINAL_EVAL_DEFINITION, FINAL_EVALS, final_eval_value
from workbench.metrics.names import (
    ACCURACY_TRAIN,
    ENTROPY_MEAN,
    EVAL_ACCURACY,
    LENGTH_CORRECT_MEAN,
    LENGTH_INCORRECT_MEAN,
    LENGTH_MEAN,
    PERF_SAMPLE_TOKENS,
    REWARD_MEAN,
)
from workbench.registry import Registry
from workbench.results.readers.frames import lex_sorted

__all__ = [
    "HISTORY_COLUMNS",
    "SAMPLE_COUNTERS",
    "SUMMARY_METRICS",
    "TOKEN_COUNTERS",
    "RunCurves",
    "SummaryMetric",
    "align_curves",
    "iter_runs",
    "resolve_summary",
    "summarize_runs",
    "summary_metric",
    "summary_name",
]

#: Per-step counters (not in DESIGN's table; optional): tokens sampled, completions sampled.
TOKEN_COUNTERS: tuple[str, ...] = (PERF_SAMPLE_TOKENS,)
SAMPLE_COUNTERS: tuple[str, ...] = ("perf/samples",)
#: Run params whose product is the number of completions sampled per step.
SAMPLES_PARAMS: tuple[str, ...] = ("rollout.prompts_per_step", "rollout.group_size")
#: Metrics logged once per training step: their steps are the training steps.
TRAIN_STEP_METRICS: tuple[str, ...] = (
    *TOKEN_COUNTERS,
    *SAMPLE_COUNTERS,
    LENGTH_MEAN,
    ACCURACY_TRAIN,
    REWARD_MEAN,
    ENTROPY_MEAN,
)
COUNT_METRICS: tuple[str, ...] = (*TOKEN_COUNTERS, *SAMPLE_COUNTERS, LENGTH_MEAN, REWARD_MEAN, ENTROPY_MEAN)

HISTORY_COLUMNS: tuple[str, ...] = ("run_id", "variant", "seed", "step", "metric", "value")
ID_COLUMNS: tuple[str, ...] = ("run_id", "variant", "seed")
_EMPTY = pd.Series([], dtype=float, index=pd.Index([], dtype="int64", name="step"))

# --------------------------------------------------------------------------------------------
# One run's curves
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCurves:
    """One run: its ``runs`` row (``info``) and its curves, ``metric -> Series(value, index=step)``.

    Series are sorted by step, finite, one value per step; treat them as read-only.
    """

    run_id: str
    info: Mapping[str, Any]
    curves: Mapping[str, pd.Series] = field(default_factory=dict)

    def series(self, metric: str) -> pd.Series:
        """The curve of ``metric`` (empty if never logged)."""
        return self.curves.get(metric, _EMPTY)

    def has(self, metric: str) -> bool:
        return len(self.series(metric)) > 0

    def param(self, key: str) -> float | None:
        """A numeric run param by dotted key (``key`` or ``params.key`` column), or ``None``."""
        for k in (key, f"params.{key}"):
            v = self.info.get(k)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            try:
                return float(v)
            except (TypeError, ValueError):
                return None
        return None

    def train_steps(self) -> np.ndarray:
        """Steps at which a per-step training metric was logged (sorted, unique)."""
        parts = [self.series(m).index.to_numpy() for m in TRAIN_STEP_METRICS if self.has(m)]
        return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)

    def _counter(self, names: Sequence[str]) -> pd.Series | None:
        for m in names:
            if self.has(m):
                return self.series(m)
        return None

    def samples_per_step(self) -> pd.Series | None:
        """Completions sampled at each training step (see module docstring), or ``None``."""
        counted = self._counter(SAMPLE_COUNTERS)
        if counted is not None:
            return counted
        factors = [self.param(k) for k in SAMPLES_PARAMS]
        if all(f is not None for f in factors):
            steps = self.train_steps()
            if steps.size:
                return pd.Series(float(np.prod(factors)), index=steps)
        tokens = self._counter(TOKEN_COUNTERS)
        if tokens is not None and self.has(LENGTH_MEAN):
            n = (tokens / self.series(LENGTH_MEAN)).dropna()
            return n[np.isfinite(n)]
        return None

    def tokens_per_step(self) -> pd.Series | None:
        """Response tokens sampled at each training step (see module docstring), or ``None``."""
        counted = self._counter(TOKEN_COUNTERS)
        if counted is not None:
            return counted
        samples = self._counter(SAMPLE_COUNTERS)
        if samples is None:
            samples = self.samples_per_step()
        if samples is not None and self.has(LENGTH_MEAN):
            return (self.series(LENGTH_MEAN) * samples).dropna()
        return None

    def cumulative(self, x: str) -> pd.Series | None:
        """Cumulative ``"samples"`` or ``"tokens"`` through each training step, or ``None``."""
        per_step = {"samples": self.samples_per_step, "tokens": self.tokens_per_step}[x]()
        return None if per_step is None else per_step.sort_index().cumsum()

    @staticmethod
    def at_steps(cumulative: pd.Series, steps: Iterable[Any], *, before: bool = False) -> np.ndarray:
        """Value of a cumulative count at ``steps``: through the last training step ``<= step``,
        or ``< step`` with ``before`` (for evals, which run before their step samples)."""
        steps = np.asarray(list(steps) if not isinstance(steps, np.ndarray) else steps)
        pos = np.searchsorted(cumulative.index.to_numpy(), steps, side="left" if before else "right")
        vals = np.concatenate([[0.0], cumulative.to_numpy(dtype=float)])
        return vals[pos]


def _check_columns(df: pd.DataFrame, required: Iterable[str], what: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing} (has {list(df.columns)})")


def iter_runs(
    history: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    metrics: Iterable[str] | None = None,
) -> Iterator[RunCurves]:
    """One :class:`RunCurves` per run: the rows of ``runs`` in order (with or without history),
    then runs found only in ``history`` (their info from history's ``run_id, variant, seed``).

    ``metrics`` restricts the curves loaded (``None``: all).
    """
    _check_columns(history, ("run_id", "step", "metric", "value"), "history")
    h = history if metrics is None else history[history["metric"].isin(list(metrics))]
    h = h[np.isfinite(h["value"].to_numpy(dtype=float))]
    # Group on integer codes, not strings (12M points at search scale): the last point logged per (run,
    # metric, step) is kept; a history from the reader is already in (run, metric, step) order.
    run_code, run_names = pd.factorize(h["run_id"])
    metric_code, metric_names = pd.factorize(h["metric"])
    step, value = h["step"].to_numpy(), h["value"].to_numpy(dtype=float)
    if not lex_sorted(run_code, metric_code, step):
        order = np.lexsort((step, metric_code, run_code))  # stable: equal keys keep their logged order
        run_code, metric_code, step, value = run_code[order], metric_code[order], step[order], value[order]
    last = np.ones(len(step), dtype=bool)
    last[:-1] = (run_code[1:] != run_code[:-1]) | (metric_code[1:] != metric_code[:-1]) | (step[1:] != step[:-1])
    run_code, metric_code, step, value = run_code[last], metric_code[last], step[last], value[last]
    starts = np.flatnonzero(np.r_[True, (run_code[1:] != run_code[:-1]) | (metric_code[1:] != metric_code[:-1])])
    starts = starts[starts < len(step)]  # no point at all: no group
    ends = np.r_[starts[1:], len(step)]
    # runs (and each run's metrics) in name order, as a sort on the strings gave them: runs found only in
    # the history come out in that order
    run_rank = np.argsort(np.argsort(np.asarray(run_names, dtype=str)))
    metric_rank = np.argsort(np.argsort(np.asarray(metric_names, dtype=str)))
    groups = np.lexsort((metric_rank[metric_code[starts]], run_rank[run_code[starts]]))
    curves: dict[str, dict[str, pd.Series]] = {}
    for a, b in zip(starts[groups].tolist(), ends[groups].tolist(), strict=True):
        rid, met = run_names[run_code[a]], metric_names[metric_code[a]]
        idx = pd.Index(step[a:b], name="step")
        curves.setdefault(rid, {})[met] = pd.Series(value[a:b], index=idx, name=met)

    seen: set[str] = set()
    if runs is not None:
        _check_columns(runs, ID_COLUMNS, "runs")
        for info in runs.to_dict("records"):
            rid = info["run_id"]
            if rid in seen:
                raise ValueError(f"runs lists run_id {rid!r} twice")
            seen.add(rid)
            yield RunCurves(rid, info, curves.get(rid, {}))
    extra = [rid for rid in curves if rid not in seen]
    if extra:
        _check_columns(history, ID_COLUMNS, "history")
        ids = history.drop_duplicates("run_id").set_index("run_id")
        for rid in extra:
            info = {"run_id": rid, "variant": ids.at[rid, "variant"], "seed": ids.at[rid, "seed"]}
            yield RunCurves(rid, info, curves[rid])


# --------------------------------------------------------------------------------------------
# Registry of summary metrics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryMetric:
    """A registered per-run summary: ``fn(run: RunCurves, **params) -> float``.

    ``higher_is_better`` is its healthy direction (``None``: no preferred direction); ``reads``
    the history metrics it needs (``summarize_runs`` loads only those); ``censored`` what an
    ``inf`` value means, a template of its parameters (``"never reached {threshold}"``; empty:
    the summary is never censored); ``bounds`` the range its finite values lie in by construction
    (an accuracy in [0, 1]), which ``compare`` cuts the per-arm intervals to.
    """

    name: str
    fn: Callable[..., float]
    higher_is_better: bool | None
    reads: tuple[str, ...]
    description: str
    censored: str = ""
    bounds: tuple[float, float] = (-math.inf, math.inf)

    def censored_reason(self, **params: Any) -> str:
        """``censored`` with the parameters filled in (defaults where not given)."""
        return self.censored.format(**(self.params | params)) if self.censored else ""

    @property
    def params(self) -> dict[str, Any]:
        """Keyword parameters and their defaults."""
        sig = inspect.signature(self.fn)
        return {k: p.default for k, p in list(sig.parameters.items())[1:]}

    def __call__(self, run: RunCurves, **params: Any) -> float:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ValueError(
                f"summary metric {self.name!r} has no parameter(s) {unknown} (valid: {sorted(self.params) or 'none'})"
            )
        return float(self.fn(run, **params))


SUMMARY_METRICS: Registry[SummaryMetric] = Registry("summary metric")


def summary_metric(
    name: str,
    *,
    higher_is_better: bool | None,
    reads: Sequence[str],
    censored: str = "",
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Decorator: register ``fn(run, **params) -> float`` as summary metric ``name``.

    Its docstring's first paragraph is its description. Returns ``fn`` unchanged.
    """

    def add(fn: Callable[..., float]) -> Callable[..., float]:
        doc = inspect.getdoc(fn) or ""
        SUMMARY_METRICS.register(name)(
            SummaryMetric(name, fn, higher_is_better, tuple(reads), doc.split("\n\n")[0], censored, bounds)
        )
        return fn

    return add


def _last_mean(s: pd.Series, k: int) -> float:
    if k < 1:
        raise ValueError(f"window must be >= 1, got {k}")
    return float(s.iloc[-k:].mean()) if len(s) else math.nan


@summary_metric("final_eval_accuracy", higher_is_better=True, reads=[EVAL_ACCURACY], bounds=(0.0, 1.0))
def final_eval_accuracy(run: RunCurves, k: int = FINAL_EVALS) -> float:
    """Final eval/accuracy: the mean of the last 3 evals after step 0 (fewer if fewer were logged;
    NaN if none), as `workbench run` prints it.

    ``k`` sets how many. The one definition of "final" (:mod:`workbench.metrics.final`, which says
    why step 0 is left out)."""
    return _final_eval(run.series(EVAL_ACCURACY), k)


def _final_eval(s: pd.Series, k: int) -> float:
    return final_eval_value(s.index.to_numpy(), s.to_numpy(), k)


@summary_metric("eval_auc", higher_is_better=True, reads=[EVAL_ACCURACY], bounds=(0.0, 1.0))
def eval_auc(run: RunCurves) -> float:
    """Area under the ``eval/accuracy`` curve over steps, divided by the step span.

    Trapezoid rule (``numpy.trapezoid``) between the first and last eval, normalised by
    ``last_step - first_step``, so it is the time-averaged accuracy (in [0, 1]); a single eval
    gives its value. Over the run's own span: compare runs evaluated over the same steps.
    """
    s = run.series(EVAL_ACCURACY)
    if len(s) == 0:
        return math.nan
    if len(s) == 1:
        return float(s.iloc[0])
    x = s.index.to_numpy(dtype=float)
    return float(np.trapezoid(s.to_numpy(), x) / (x[-1] - x[0]))


def _first_reaching(s: pd.Series, threshold: float) -> Any:
    hit = s.index[s.to_numpy() >= threshold]
    return hit[0] if len(hit) else None


@summary_metric(
    "steps_to_threshold",
    higher_is_better=False,
    reads=[EVAL_ACCURACY],
    censored="never reached {threshold}",
    bounds=(0.0, math.inf),
)
def steps_to_threshold(run: RunCurves, threshold: float = 0.5) -> float:
    """First eval step with ``eval/accuracy >= threshold``; ``inf`` (censored) if never reached,
    NaN without evals."""
    s = run.series(EVAL_ACCURACY)
    if len(s) == 0:
        return math.nan
    step = _first_reaching(s, threshold)
    return math.inf if step is None else float(step)


@summary_metric(
    "tokens_to_threshold",
    higher_is_better=False,
    reads=[EVAL_ACCURACY, *COUNT_METRICS],
    censored="never reached {threshold}",
    bounds=(0.0, math.inf),
)
def tokens_to_threshold(run: RunCurves, threshold: float = 0.5) -> float:
    """Sampled tokens before the first eval step with ``eval/accuracy >= threshold`` (the eval at
    step ``s`` runs before step ``s`` samples, so steps ``< s`` count).

    ``inf`` (censored) if never reached; NaN without evals or token counts (module docstring).
    """
    s = run.series(EVAL_ACCURACY)
    cum = run.cumulative("tokens")
    if len(s) == 0 or cum is None:
        return math.nan
    step = _first_reaching(s, threshold)
    if step is None:
        return math.inf
    return float(RunCurves.at_steps(cum, [step], before=True)[0])


@summary_metric(
    "tokens_per_correct",
    higher_is_better=False,
    reads=[ACCURACY_TRAIN, LENGTH_MEAN, *COUNT_METRICS],
    censored="nothing correct",
    bounds=(0.0, math.inf),
)
def tokens_per_correct(run: RunCurves) -> float:
    """Sampled tokens per correct sampled completion over the whole run.

    ``sum_t tokens_t / sum_t (accuracy/train_t x samples_t)`` over the steps where both are
    known (tokens and samples as in the module docstring). When neither a token nor a sample
    count is available, samples per step are taken as constant, which cancels:
    ``sum_t length/mean_t / sum_t accuracy/train_t``. ``inf`` if no completion was correct,
    NaN without ``accuracy/train`` or any length/token information.
    """
    acc = run.series(ACCURACY_TRAIN)
    if len(acc) == 0:
        return math.nan
    tokens, samples = run.tokens_per_step(), run.samples_per_step()
    if tokens is not None and samples is not None:
        num, den = tokens, acc * samples
    elif run.has(LENGTH_MEAN):
        num, den = run.series(LENGTH_MEAN), acc
    else:
        return math.nan
    both = pd.concat([num.rename("num"), den.rename("den")], axis=1, join="inner").dropna()
    if both.empty:
        return math.nan
    total, correct = float(both["num"].sum()), float(both["den"].sum())
    if correct <= 0.0:
        return math.inf if total > 0 else math.nan
    return total / correct


@summary_metric(
    "final_length_ratio",
    higher_is_better=False,
    reads=[LENGTH_CORRECT_MEAN, LENGTH_INCORRECT_MEAN],
    bounds=(0.0, math.inf),
)
def final_length_ratio(run: RunCurves, window: int = 10) -> float:
    """``mean(length/incorrect_mean) / mean(length/correct_mean)`` over the last ``window`` steps
    where both are logged (a ratio > 1: wrong answers ramble, Dr. GRPO's length bias)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    incorrect, correct = _at_common_steps(run.series(LENGTH_INCORRECT_MEAN), run.series(LENGTH_CORRECT_MEAN))
    if not len(incorrect):
        return math.nan
    c = float(correct[-window:].mean())
    return float(incorrect[-window:].mean()) / c if c > 0 else math.nan


def _at_common_steps(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The values of two curves at the steps both logged, in step order, where both are numbers
    (an inner join on the step; numpy, not ``pd.concat``: 25x faster per run, which counts at 3,000 runs)."""
    _, ia, ib = np.intersect1d(a.index.to_numpy(), b.index.to_numpy(), assume_unique=True, return_indices=True)
    va, vb = a.to_numpy(dtype=float)[ia], b.to_numpy(dtype=float)[ib]
    keep = ~(np.isnan(va) | np.isnan(vb))
    return va[keep], vb[keep]


@summary_metric("final_entropy", higher_is_better=None, reads=[ENTROPY_MEAN], bounds=(0.0, math.inf))
def final_entropy(run: RunCurves, window: int = 10) -> float:
    """Mean of ``entropy/mean`` over the last ``window`` logged steps (no preferred direction)."""
    return _last_mean(run.series(ENTROPY_MEAN), window)


@summary_metric("final_reward", higher_is_better=True, reads=[REWARD_MEAN])
def final_reward(run: RunCurves, window: int = 10) -> float:
    """Mean of ``reward/mean`` over the last ``window`` logged steps."""
    return _last_mean(run.series(REWARD_MEAN), window)


def catalogue_bounds(metric: str) -> tuple[float, float]:
    """The range of a logged metric's values from the metrics catalogue (unbounded if not catalogued)."""

    return metric_bounds(metric)


def catalogue_direction(metric: str) -> bool | None:
    """``higher_is_better`` of a logged metric from the metrics catalogue (docs/metrics.md): ``up`` ->
    True, ``down`` -> False, ``stable``/``none``/not catalogued -> None."""

    healthy = {m.name: m.healthy for m in CATALOGUE}.get(metric)
    return {"up": True, "down": False}.get(healthy or "")


def resolve_summary(name: str) -> SummaryMetric:
    """A registered summary metric, or ``final:<metric>``: the mean of the metric's last values."""
    if name.startswith("final:") and len(name) > len("final:"):
        metric = name[len("final:") :]
        evals = metric.startswith("eval/")  # an eval curve: "final" as everywhere (workbench.metrics.final)
        default = FINAL_EVALS if evals else 10

        def final_value(run: RunCurves, window: int = default) -> float:
            s = run.series(metric)
            return _final_eval(s, window) if evals else _last_mean(s, window)

        return SummaryMetric(
            name,
            final_value,
            catalogue_direction(metric),
            (metric,),
            f"{FINAL_EVAL_DEFINITION.capitalize()} of {metric}."
            if evals
            else f"Mean of the last {default} logged values of {metric}.",
            bounds=catalogue_bounds(metric),  # a mean of values in a range lies in it
        )
    return SUMMARY_METRICS.get(name)


def summary_name(metric: str) -> str:
    """A summary-panel metric as a summary metric name: registered names as they are, logged
    metric names (with a ``/``) as ``final:<metric>``."""
    if metric in SUMMARY_METRICS or metric.startswith("final:"):
        resolve_summary(metric)
        return metric
    if "/" in metric:
        return f"final:{metric}"
    resolve_summary(metric)  # ValueError: unknown summary metric ... (valid: ...)
    return metric


def summarize_runs(
    history: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per run: the ``runs`` columns (``run_id, variant, seed, status, health, ...``),
    then one column per summary metric (``metrics``: names for :func:`resolve_summary`;
    default all registered). ``params`` maps a metric name to its keyword parameters, e.g.
    ``{"steps_to_threshold": {"threshold": 0.8}}``. Runs without history get NaN summaries;
    runs only in ``history`` are added with their ``run_id, variant, seed``.
    """
    names = list(metrics) if metrics is not None else SUMMARY_METRICS.names()
    if len(set(names)) != len(names):
        raise ValueError(f"metrics lists a name twice: {names}")
    specs = [resolve_summary(n) for n in names]
    params = dict(params or {})
    stray = sorted(set(params) - set(names))
    if stray:
        raise ValueError(f"params given for metrics not requested: {stray} (requested: {names})")
    for spec in specs:  # fail before the loop on a bad parameter name
        unknown = sorted(set(params.get(spec.name, {})) - set(spec.params))
        if unknown:
            raise ValueError(
                f"summary metric {spec.name!r} has no parameter(s) {unknown} (valid: {sorted(spec.params)})"
            )
    if runs is not None:
        clash = sorted(set(names) & set(runs.columns))
        if clash:
            raise ValueError(f"summary metric names clash with runs columns: {clash}")
    reads = {m for spec in specs for m in spec.reads}
    rows = []
    for run in iter_runs(history, runs, reads):
        row = dict(run.info)
        for spec in specs:
            row[spec.name] = spec(run, **params.get(spec.name, {}))
        rows.append(row)
    base_cols = list(runs.columns) if runs is not None else list(ID_COLUMNS)
    out = pd.DataFrame(rows, columns=[*base_cols, *names])
    # what an inf means per metric, for the comparison's words ("never reached 0.5 in 4/6 runs")
    out.attrs["censored"] = {s.name: s.censored_reason(**params.get(s.name, {})) for s in specs if s.censored}
    # the summaries' parameters (e.g. final_eval_accuracy's k): the per-problem intervals weight the evals alike
    out.attrs["params"] = {name: dict(p) for name, p in params.items()}
    return out


# --------------------------------------------------------------------------------------------
# Curve alignment
# --------------------------------------------------------------------------------------------


ALIGN_X = ("step", "samples", "tokens")


def align_curves(
    history: pd.DataFrame,
    metric: str,
    x: str = "step",
    *,
    runs: pd.DataFrame | None = None,
    grid: int | Sequence[float] | np.ndarray | str | None = "auto",
) -> pd.DataFrame:
    """One metric's curves of every run on a common x axis: ``"step"``, ``"samples"`` or ``"tokens"``.

    Returns a tidy frame ``run_id, variant, seed, <x>, value`` (plus ``step`` when ``x`` is not
    step and no grid is used). Samples/tokens are cumulative counts through each step (module
    docstring). ``grid``: ``None`` keeps each run's own x values; an int ``n`` interpolates every
    run linearly onto ``n`` evenly spaced points spanning all runs (a run gives no value outside
    its own x range, no extrapolation); an array gives the points; ``"auto"`` is ``None`` for
    step and samples (shared x values across runs) and 200 points for tokens. A run without the
    counts needed for ``x`` raises ``ValueError``. Runs that never logged ``metric`` are absent.
    """
    if x not in ALIGN_X:
        raise ValueError(f"unknown x {x!r} (valid: {', '.join(ALIGN_X)})")
    if isinstance(grid, str):
        if grid != "auto":
            raise ValueError(f"unknown grid {grid!r} (valid: 'auto', None, an int, an array)")
        grid = 200 if x == "tokens" else None
    if x == "step" and grid is None:  # the common case (dashboards, compare's curves): whole-frame operations
        return _step_curves(history, metric, runs)
    return _align_by_run(history, metric, x, runs, grid)


def _step_curves(history: pd.DataFrame, metric: str, runs: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`align_curves` on ``x="step"`` without a grid, as :func:`_align_by_run` gives it (same
    rows, order and dtypes: runs in :func:`iter_runs` order, steps ascending, the last value of a
    step logged twice) but from grouped columns instead of one Series per run: at 3000 runs the
    per-run path took most of ``compare``'s report time."""
    _check_columns(history, ("run_id", "step", "metric", "value"), "history")
    h = history.loc[history["metric"] == metric, ["run_id", "step", "value"]]
    h = h[np.isfinite(h["value"].to_numpy(dtype=float))]
    h = h.drop_duplicates(["run_id", "step"], keep="last")
    cols = ["run_id", "variant", "seed", "step", "value"]
    if h.empty:
        return pd.DataFrame(columns=cols)
    info: dict[str, tuple[Any, Any]] = {}  # run_id -> (variant, seed), in iter_runs order
    if runs is not None:
        _check_columns(runs, ID_COLUMNS, "runs")
        for rid, variant, seed in zip(*(runs[c].tolist() for c in ID_COLUMNS), strict=True):
            if rid in info:
                raise ValueError(f"runs lists run_id {rid!r} twice")
            info[rid] = (variant, seed)
    logged = pd.unique(h["run_id"])
    extra = sorted(rid for rid in logged if rid not in info)  # iter_runs: history-only runs after, by run_id
    if extra:
        _check_columns(history, ID_COLUMNS, "history")
        ids = history.drop_duplicates("run_id").set_index("run_id").loc[extra]
        info |= zip(extra, zip(ids["variant"].tolist(), ids["seed"].tolist(), strict=True), strict=True)
    position = pd.Index(list(info), dtype=object).get_indexer(h["run_id"].astype(object))
    order = np.lexsort((h["step"].to_numpy(), position))  # by run (iter_runs order), then step
    position = position[order]
    variants, seeds = (np.array([v[k] for v in info.values()], dtype=object) for k in (0, 1))
    return pd.DataFrame(
        {
            "run_id": np.array(list(info), dtype=object)[position].tolist(),
            "variant": variants[position].tolist(),
            "seed": seeds[position].tolist(),
            "step": h["step"].to_numpy()[order],
            "value": h["value"].to_numpy(dtype=float)[order],
        }
    )


def _align_by_run(
    history: pd.DataFrame,
    metric: str,
    x: str,
    runs: pd.DataFrame | None,
    grid: int | Sequence[float] | np.ndarray | None,
) -> pd.DataFrame:
    """:func:`align_curves` run by run (any ``x``, any grid)."""
    load = [metric] if x == "step" else [metric, *COUNT_METRICS]
    per_run: list[tuple[RunCurves, np.ndarray, np.ndarray, np.ndarray]] = []
    for run in iter_runs(history, runs, load):
        s = run.series(metric)
        if len(s) == 0:
            continue
        steps = s.index.to_numpy()
        if x == "step":
            xs = steps.astype(float)
        else:
            cum = run.cumulative(x)
            if cum is None:
                raise ValueError(
                    f"run {run.run_id!r}: cannot align on {x}: it logged no "
                    f"{' / '.join(TOKEN_COUNTERS if x == 'tokens' else SAMPLE_COUNTERS)} counter, "
                    f"no {' x '.join(SAMPLES_PARAMS)} params" + (f" with {LENGTH_MEAN}" if x == "tokens" else "")
                )
            xs = RunCurves.at_steps(cum, steps, before=metric.startswith("eval/"))
        per_run.append((run, steps, xs, s.to_numpy(dtype=float)))

    cols = ["run_id", "variant", "seed", x, "value"]
    if not per_run:
        return pd.DataFrame(columns=cols)
    if grid is not None:
        if isinstance(grid, (int, np.integer)):
            lo = min(float(xs.min()) for _, _, xs, _ in per_run)
            hi = max(float(xs.max()) for _, _, xs, _ in per_run)
            points = np.linspace(lo, hi, int(grid))
        else:
            points = np.asarray(grid, dtype=float)
    frames = []
    for run, steps, xs, vals in per_run:
        ids = {"run_id": run.run_id, "variant": run.info.get("variant"), "seed": run.info.get("seed")}
        if grid is None:
            data = {**ids, x: xs if x != "step" else steps, "value": vals}
            if x != "step":
                data["step"] = steps
            frames.append(pd.DataFrame(data))
            continue
        # keep the last value at a repeated x (evals before any training all sit at x = 0)
        keep = np.r_[xs[1:] != xs[:-1], True]
        xu, vu = xs[keep], vals[keep]
        inside = points[(points >= xu[0]) & (points <= xu[-1])]
        frames.append(pd.DataFrame({**ids, x: inside, "value": np.interp(inside, xu, vu)}))
    return pd.concat(frames, ignore_index=True)
