"""Group-sequential seeding: seeds run in rounds, every comparison decided at planned looks, at a
level that keeps the family-wise false "better/worse" rate at alpha however many looks are taken.

Why: testing again at the same alpha after adding seeds because a first test was not significant
inflates the false-positive rate (A/A simulation in ``tests/compare/test_sequential.py``: 5 then 7
seeds at 0.05 each gives ~8%; looks at 3, 5, 7, 10 seeds give ~13%).

The design (:class:`Design`), fixed before the first look and recorded in MLflow:

* **Looks** at planned seed counts per arm, default 3, 5, 7, 10 (``compare.sequential.looks``),
  capped by ``--max-seeds`` (the cap becomes the last look). Information fraction of look ``k``:
  ``t_k = n_k / n_K``.
* **Alpha spending** (Lan and DeMets 1983): the cumulative alpha allowed by look ``k`` is
  ``alpha(t_k)`` for a spending function (:data:`SPENDING`):
  ``obrien_fleming`` (default; ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``: almost nothing spent early,
  nearly the full alpha at the last look) or ``pocock`` (``alpha ln(1 + (e - 1) t)``: even spending).
* **Levels per look: the increments, combined by Bonferroni** (:attr:`Design.look_alpha`): look ``k``
  tests at ``alpha(t_k) - alpha(t_{k-1})``. Neither scipy nor statsmodels implements group-sequential
  boundaries. The exact Lan-DeMets boundaries assume the look statistics are jointly normal with
  correlation ``sqrt(t_j / t_k)``; with 3 seeds the paired t statistic has 2 degrees of freedom and a
  failed run switches the test to Mann-Whitney, so that joint law does not hold. The union bound needs
  nothing but valid p-values at each look: P(any false rejection) <= sum of the increments = alpha,
  for any test, any df, any dependence between looks. It is conservative: with O'Brien-Fleming
  spending at 3/5/7/10 seeds the last look tests at 0.031 where exact normal boundaries would allow
  about 0.04 (the simulation measures the family-wise rate at ~3%, not 5%).
* **Several comparisons** (arms x metrics; the family is ``compare``'s, issue 52): every comparison of
  every primary metric forms one study-wide family (:data:`PRIMARY_FAMILY`); each secondary metric's
  comparisons form their own family and are exploratory (they stop no study and earn no seeds). At
  look ``k``, Holm at the look's level over the comparisons of a family not yet declared better or
  worse, the comparisons already stopped for another reason counting with p = 1 (they stay in the
  family: dropping them would raise the others' level on the strength of an unrejected hypothesis).
  This is a closed test whose local tests are Bonferroni over looks and hypotheses, so the
  family-wise error over all looks and comparisons of the family is at most alpha (Maurer and Bretz
  2013, "Multiple testing in group sequential trials using graphical approaches", with Holm's graph).
  Per-metric families (``family="metric"``: the records of studies run before issue 52) let a study
  with m primary metrics make up to m alpha of false rejections; the simulation in
  ``tests/compare/test_sequential_family.py`` measures both.

After each look a comparison **stops** when it is declared (:func:`decide_family`): better / worse
(higher / lower without a direction); equivalent or not testable (the compare machinery's status at
the level passed to it: :meth:`Design.compare_level`); or **futile**: with a smallest effect of
interest (``compare.sesoi``) for the metric, the one-sided ``1 - 0.05/K`` upper confidence bound of
the improvement is below it (an improvement of the SESOI or more is excluded; the chance of stopping
a true improvement of the SESOI for futility, over all K looks, is at most 5%; ``futility: worsening``
asks the same of a loss, ``difference`` of both sides at once). Futility never
rejects anything, so it does not touch the false-positive rate. At the last look every open
comparison ends **inconclusive**. The study stops when every comparison has stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from workbench.registry import Registry
from workbench.study.sequential_keys import FUTILITY_SIDES, SEQUENTIAL_KEYS

__all__ = [
    "DECIDED",
    "DEFAULT_LOOKS",
    "REJECTED",
    "SPENDING",
    "PRIMARY_FAMILY",
    "Design",
    "decide_families",
    "decide_family",
    "family_of",
    "futile",
    "futility_bound",
    "holm_adjusted",
]

DEFAULT_LOOKS: tuple[int, ...] = (3, 5, 7, 10)
#: Statuses that stop a comparison; the first four are rejections of "no difference".
REJECTED: tuple[str, ...] = ("better", "worse", "higher", "lower")
DECIDED: tuple[str, ...] = (*REJECTED, "equivalent", "not testable", "futile")
#: Statuses of the compare machinery under which no difference may be declared (the verdict is withheld).
UNTESTABLE: tuple[str, ...] = ("withheld", "no data", "not testable")
FUTILITY_ERROR = 0.05  # chance, over all looks, of stopping a true improvement of the SESOI for futility

# --------------------------------------------------------------------------------------------
# Spending functions: f(t, alpha) -> cumulative alpha allowed at information fraction t
# --------------------------------------------------------------------------------------------

SPENDING: Registry[Callable[[np.ndarray, float], np.ndarray]] = Registry("alpha spending function")


@SPENDING.register("obrien_fleming")
def obrien_fleming(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming-type: ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``."""
    t = np.asarray(t, dtype=float)
    return 2.0 * sps.norm.sf(sps.norm.isf(alpha / 2.0) / np.sqrt(t))


@SPENDING.register("pocock")
def pocock(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets Pocock-type: ``alpha ln(1 + (e - 1) t)``."""
    return alpha * np.log1p((math.e - 1.0) * np.asarray(t, dtype=float))


SPENDING_NAMES = {"obrien_fleming": "O'Brien-Fleming-type", "pocock": "Pocock-type"}


@dataclass(frozen=True)
class Design:
    """A group-sequential design: looks at planned seed counts, total alpha and its spending."""

    looks: tuple[int, ...] = DEFAULT_LOOKS
    alpha: float = 0.05
    spending: str = "obrien_fleming"

    def __post_init__(self) -> None:
        looks = tuple(int(n) for n in self.looks)
        if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
            raise ValueError(f"looks must be increasing seed counts of at least 2, got {list(self.looks)}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        SPENDING.get(self.spending)  # unknown name -> ValueError listing the valid ones
        object.__setattr__(self, "looks", looks)

    @classmethod
    def planned(
        cls,
        looks: Sequence[int] = DEFAULT_LOOKS,
        *,
        max_seeds: int | None = None,
        alpha: float = 0.05,
        spending: str = "obrien_fleming",
    ) -> Design:
        """The looks capped by ``max_seeds``: the looks below it, then ``max_seeds`` itself as the last."""
        looks = [int(n) for n in looks]
        if max_seeds is not None:
            looks = [n for n in looks if n < max_seeds] + [int(max_seeds)]
        return cls(tuple(looks), alpha, spending)

    @property
    def information(self) -> np.ndarray:
        """Information fraction of each look: seeds at the look / seeds at the last."""
        return np.asarray(self.looks, dtype=float) / self.looks[-1]

    @property
    def cumulative_alpha(self) -> np.ndarray:
        """Alpha spent by each look (the last is ``alpha``, exactly)."""
        spent = SPENDING.get(self.spending)(self.information, self.alpha)
        spent[-1] = self.alpha  # both functions give alpha at t = 1; no rounding residue
        return spent

    @property
    def look_alpha(self) -> np.ndarray:
        """The level each look tests at: the increment of spent alpha (they sum to ``alpha``)."""
        return np.diff(self.cumulative_alpha, prepend=0.0)

    def compare_level(self, look: int, n_open: int, n_family: int) -> float:
        """The alpha to pass to the compare machinery (Holm over the ``n_open`` comparisons it is
        given) at look ``look`` (0-based), so that its decisions (equivalence, better/worse) are at
        most as liberal as Holm at the look's level over the whole family of ``n_family``: Holm at
        ``a m'/m`` over ``m'`` of ``m`` hypotheses has every step's threshold at or below Holm at
        ``a`` over all ``m`` with the others at p = 1."""
        return float(self.look_alpha[look]) * n_open / max(n_family, 1)

    def phrase(self, taken: int | None = None) -> str:
        """``"looks 3,5 of 3/5/7/10, α spent 0.0059 of 0.05 (O'Brien-Fleming-type spending)"``."""
        plan = "/".join(str(n) for n in self.looks)
        name = SPENDING_NAMES.get(self.spending, self.spending)
        if taken is None:
            return f"looks at {plan} seeds, α {self.alpha:g} ({name} spending)"
        if taken == 0:
            return f"no look yet of {plan}, α spent 0 of {self.alpha:g} ({name} spending)"
        done = ",".join(str(n) for n in self.looks[:taken])
        return (
            f"looks {done} of {plan}, α spent {float(self.cumulative_alpha[taken - 1]):.2g} of "
            f"{self.alpha:g} ({name} spending)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "alpha": self.alpha, "spending": self.spending}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Design:
        return cls(tuple(d["looks"]), float(d["alpha"]), str(d["spending"]))


def futility_side(settings: Any) -> str:
    """The study's ``compare.sequential.futility`` (default ``improvement``); ``ValueError`` naming the key."""
    side = (settings or {}).get("futility", "improvement") if isinstance(settings, Mapping) else "improvement"
    if side not in FUTILITY_SIDES:
        raise ValueError(f"compare.sequential.futility: expected one of {', '.join(FUTILITY_SIDES)}, got {side!r}")
    return side


def design_from_settings(settings: Any, *, max_seeds: int | None = None, alpha: float = 0.05) -> Design:
    """The design of a study's ``compare.sequential`` mapping (``looks``, ``spending``; absent:
    the defaults), capped by ``max_seeds``. ``ValueError`` naming the key for anything else
    (``futility`` is read by :func:`futility_side`: it is not part of the α design)."""
    settings = {} if settings is None else settings
    if not isinstance(settings, Mapping):
        raise ValueError(f"compare.sequential: expected a mapping (looks, spending, futility), got {settings!r}")
    unknown = sorted(set(settings) - set(SEQUENTIAL_KEYS))
    if unknown:
        raise ValueError(f"compare.sequential: unknown key {unknown[0]!r} (valid: {', '.join(SEQUENTIAL_KEYS)})")
    futility_side(settings)
    looks = settings.get("looks", DEFAULT_LOOKS)
    if not isinstance(looks, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) for n in looks):
        raise ValueError(f"compare.sequential.looks: expected a list of seed counts, e.g. [3, 5, 7, 10], got {looks!r}")
    spending = settings.get("spending", "obrien_fleming")
    if not isinstance(spending, str) or spending not in SPENDING:
        raise ValueError(f"compare.sequential.spending: {SPENDING.unknown_message(str(spending))}")
    if max_seeds is not None and max_seeds < 2:
        raise ValueError(f"--max-seeds: at least 2 seeds are needed for a test, got {max_seeds}")
    try:
        return Design.planned(looks, max_seeds=max_seeds, alpha=alpha, spending=spending)
    except ValueError as e:
        raise ValueError(f"compare.sequential.looks: {e}") from None


# --------------------------------------------------------------------------------------------
# Decisions at a look
# --------------------------------------------------------------------------------------------


def holm_adjusted(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each row of ``p`` [..., m] (NaN: not in the row's family, stays
    NaN): the running max of ``p_(r) (m - r + 1)`` over the sorted p-values, ``m`` the row's finite
    count. Row-wise :func:`workbench.compare.stats.adjust_pvalues` (``"holm"``), vectorised for the
    simulations (a test checks they agree)."""
    p = np.asarray(p, dtype=float)
    finite = np.isfinite(p)
    order = np.argsort(np.where(finite, p, np.inf), axis=-1, kind="stable")
    ps = np.take_along_axis(np.where(finite, p, np.inf), order, axis=-1)
    m = finite.sum(axis=-1, keepdims=True)
    steps = np.maximum(m - np.arange(p.shape[-1]), 1)  # m, m-1, ..., 1 (then 1 for the NaN tail)
    with np.errstate(invalid="ignore"):
        adj = np.maximum.accumulate(np.minimum(1.0, ps * steps), axis=-1)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=-1)
    return np.where(finite, out, np.nan)


def decide_family(
    design: Design, look: int, status: Any, p_value: Any, rejection: Any, compare_status: Any, futility: Any
) -> np.ndarray:
    """The statuses of one family's comparisons after look ``look`` (0-based); every argument is an
    array ``[..., m]`` (one row per study in a simulation, one family in ``workbench run``).

    ``status``: each comparison's status before the look (``""``: still open); ``p_value``: its
    test's raw two-sided p-value at this look (ignored unless open); ``rejection``: what a
    rejection would be called (``better``/``worse``/``higher``/``lower``, from the sign of the
    difference); ``compare_status``: the compare machinery's status at
    :meth:`Design.compare_level` (``equivalent``, ``not testable``, ``withheld``, ...);
    ``futility``: whether the futility rule holds (:func:`futile`).

    Holm at the look's level (:attr:`Design.look_alpha`) over the comparisons not yet rejected,
    those stopped for another reason at p = 1; an open one rejected takes its ``rejection``; an
    open one not rejected stops as ``equivalent`` / ``not testable`` when compare says so, as
    ``futile`` when ``futility``; at the last look the rest end ``inconclusive``.
    """
    status = np.asarray(status, dtype=object)
    compare_status = np.asarray(compare_status, dtype=object)
    level = float(design.look_alpha[look])
    is_open = status == ""
    p = np.where(is_open, np.nan_to_num(np.asarray(p_value, dtype=float), nan=1.0), 1.0)
    p[np.isin(compare_status, UNTESTABLE)] = 1.0  # a withheld verdict is never a rejection, but counts in m
    p[np.isin(status, REJECTED)] = np.nan  # out of the family (a NaN p-value does not count in Holm's m)
    rejected = is_open & (np.nan_to_num(holm_adjusted(p), nan=1.0) < level)
    named = np.isin(compare_status, ("equivalent", "not testable"))
    last = look == len(design.looks) - 1
    out = status.copy()
    out[is_open] = "inconclusive" if last else ""
    out[is_open & np.asarray(futility, dtype=bool)] = "futile"
    out[is_open & named] = compare_status[is_open & named]
    out[rejected] = np.asarray(rejection, dtype=object)[rejected]
    return out


PRIMARY_FAMILY = "primary"  # the study-wide Holm family of every primary metric's comparisons
#: How a sequential design groups its comparisons into Holm families: ``primary`` (one study-wide family of
#: the primary metrics, each secondary metric its own: ``compare``'s default) or ``metric`` (each metric its own:
#: how looks were decided before issue 52, kept to replay such a record as it was taken).
FAMILIES: tuple[str, ...] = (PRIMARY_FAMILY, "metric")


def family_of(metric: str, secondary: Sequence[str], family: str = PRIMARY_FAMILY) -> str:
    """The Holm family a metric's comparisons are decided in (:data:`FAMILIES`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown sequential family {family!r} (valid: {', '.join(FAMILIES)})")
    if family == PRIMARY_FAMILY and metric not in secondary:
        return PRIMARY_FAMILY
    return f"metric:{metric}"


def decide_families(
    design: Design,
    look: int,
    family: Sequence[str],
    status: Any,
    p_value: Any,
    rejection: Any,
    compare_status: Any,
    futility: Any,
) -> np.ndarray:
    """:func:`decide_family` on each family of comparisons: ``family`` [m] labels each column of the
    other arguments (arrays ``[..., m]``, as :func:`decide_family` takes them) with its Holm family
    (:func:`family_of`); the comparisons of one label are decided together, at the look's full level."""
    labels = np.asarray(family, dtype=object)
    status = np.asarray(status, dtype=object)
    if labels.shape != status.shape[-1:]:
        raise ValueError(f"family: one label per comparison, got {labels.shape[0]} for {status.shape[-1]}")
    args = [np.asarray(a, dtype=object if i != 1 else float) for i, a in enumerate((status, p_value, rejection))]
    more = [np.asarray(compare_status, dtype=object), np.asarray(futility, dtype=bool)]
    out = status.copy()
    for label in dict.fromkeys(labels.tolist()):
        cols = labels == label
        out[..., cols] = decide_family(design, look, *(a[..., cols] for a in (*args, *more)))
    return out


def futility_confidence(design: Design) -> float:
    """One-sided confidence of the futility bound: ``1 - 0.05 / K`` (Bonferroni over the K looks)."""
    return 1.0 - FUTILITY_ERROR / len(design.looks)


def futility_bound(delta: Any, se: Any, df: Any, *, improvement_sign: float, confidence: float) -> Any:
    """The one-sided ``confidence`` bound of the difference ``delta`` on the asked side, in the difference's
    own units and sign: ``delta + t * se`` (its upper bound) when ``improvement_sign`` is +1, ``delta - t * se``
    (its lower bound) when it is -1. :func:`futile` compares it with the SESOI, and a futile verdict prints it
    (the bound that decided). Vectorised; NaN where an input is."""
    delta, se, df = (np.asarray(a, dtype=float) for a in (delta, se, df))
    with np.errstate(invalid="ignore"):
        return delta + improvement_sign * (sps.t.ppf(confidence, df) * se)


def futile(delta: Any, se: Any, df: Any, *, sesoi: float, improvement_sign: float, confidence: float) -> Any:
    """Whether the one-sided ``confidence`` upper bound of the effect on the asked side (``improvement_sign *
    delta``: +1 when higher is better, -1 when lower is; the opposite for a ``worsening`` question) is
    below ``sesoi``: an effect of the smallest size of interest on that side is excluded. That upper bound is
    ``improvement_sign *`` :func:`futility_bound` (the bound a futile verdict prints: the same number, so the
    verdict and its printed bound cannot disagree). Vectorised; NaN inputs give False."""
    bound = futility_bound(delta, se, df, improvement_sign=improvement_sign, confidence=confidence)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(improvement_sign * bound, nan=math.inf) < sesoi


def rejection_name(delta: float, higher_is_better: bool | None) -> str:
    """What rejecting "no difference" declares, from the difference's sign and the metric's direction."""
    up = delta > 0.0
    if higher_is_better is None:
        return "higher" if up else "lower"
    return "better" if up == higher_is_better else "worse"


def row_status(row: Mapping[str, Any]) -> str:
    """A compared row's machine status: its ``status`` column when the table has one, else read
    from its verdict text (the words are :mod:`workbench.compare.wording`'s)."""
    given = row.get("status")
    if isinstance(given, str) and given:
        return given
    verdict = str(row.get("verdict", ""))
    for status in (*REJECTED, "equivalent", "not testable", "withheld", "no data"):
        if verdict == status or verdict.startswith(status + " ") or verdict.startswith(status + ":"):
            return status
    return "inconclusive"
