"""Re-derive the verdicts of docs/findings.md with the statuses of `compare` after issue #28.

The studies' MLflow stores are gone (re-running them is #37), so this works from the numbers the
page printed: per comparison the paired Δ, its interval and the Holm p-value of the old
`compare --format md` (2026-11-24). From them, per comparison:

* the **old interval's level**: the old `compare` showed Holm's per-step interval, at 1 − α/d with
  d the comparison's Holm divisor (m, m−1, ... while Holm rejected, then the divisor of the stop);
  the order comes from the raw p-values, so d and the raw p are solved together (fixed point);
* the **SE** of the paired difference: interval half-width / t_{1 − α/(2d), n−1}; the **raw p**
  2·P(T_{n−1} > |Δ|/SE), checked against the page's Holm p (printed: the largest mismatch);
* the **simultaneous interval** the new `compare` shows: Δ ± t_{1 − α/(2m), n−1}·SE (Bonferroni
  over the metric's m comparisons);
* the **MDE** the new `compare` prints for an undecided row: the |Δ| the paired t-test at the
  row's Holm level α/d (= Holm's first step α/m unless an earlier comparison of the family was
  rejected) detects with 80% power: statsmodels' TTestPower effect size × SD of the differences
  (SE·√n), what `workbench.compare.stats.minimum_detectable_effect` computes;
* **TOST** at a SESOI where the study YAML declares one (only `dr_grpo_length_bias` does);
* **Holm over the whole study** (every comparison of every metric), the standard the page applies
  to its headlines;
* the **activity gate**: the knob's activity from the page's own readings (below 1% = not testable).

    PYTHONPATH=$PWD python benchmarks/findings_rederive.py            # every table
    PYTHONPATH=$PWD python benchmarks/findings_rederive.py --study dapo_ablation
"""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from workbench.compare.sequential import Design

ALPHA = 0.05
POWER = 0.8
MIN_ACTIVITY = 0.01  # the gate's default minimum (docs/reports.md, "Knob activity")


@dataclass
class Row:
    """One comparison as the page printed it (old `compare`, paired seeds)."""

    study: str
    family: str  # the old Holm family: one metric (or one question's table)
    arm: str
    n: int  # paired seeds
    delta: float
    lo: float  # old Holm per-step interval
    hi: float
    p_holm_page: float  # NaN where the page gives none
    gate: str = ""  # "not testable: ..." when the knob acted below the minimum (page's readings)
    sesoi: float = math.nan  # declared in the study YAML
    family_size: int = 0  # comparisons in the family when not all are listed here (0: the rows listed)
    # filled by derive()
    divisor: float = math.nan
    se: float = math.nan
    p_raw: float = math.nan
    p_holm: float = math.nan
    p_holm_study: float = math.nan
    sim_lo: float = math.nan
    sim_hi: float = math.nan
    mde: float = math.nan
    p_tost: float = math.nan
    verdict: str = ""


# --- the page's numbers (docs/findings.md before #28), one line per comparison ---------------------
# clip_higher's knob: clip/frac_high 0.12% (eps 0.2) vs 0.07% (eps 0.28) of tokens at the last step,
# "about 0.1%" over training; dapo_ablation: 0.12% (dapo) vs 0.27% (no_clip_higher).
CLIP_HIGHER_GATE = "not testable: clip_high acted on ~0.1% of tokens (min 1%)"
DAPO_CLIP_GATE = "not testable: clip_high acted on 0.27% of tokens (min 1%)"
# the overlong filter's reading (length/truncated_frac, 0.05-0.8% of responses per arm); the soft
# punishment's own reading (reward/overlong_soft/nonzero_frac) was not logged by these runs
DAPO_OVERLONG_GATE = "not testable: overlong filter acted on ≤0.8% of responses (min 1%)"
# precision_mismatch: mismatch/is_clipped_frac at most 0.057% of tokens in any step of a bf16 run
TIS_GATE = "not testable: correction acted on ≤0.057% of tokens (min 1%)"

ROWS = [
    # dr_grpo_length_bias, 7 seeds (the second look); one comparison per metric
    Row("dr_grpo_length_bias", "final:length/incorrect_mean", "dr_grpo", 7, -0.7669, -1.375, -0.1586, 0.022),
    Row("dr_grpo_length_bias", "final_length_ratio", "dr_grpo", 7, -0.01541, -0.03722, 0.0064, 0.135, sesoi=0.1),
    Row("dr_grpo_length_bias", "final_eval_accuracy", "dr_grpo", 7, -0.0119, -0.02509, 0.001278, 0.069, sesoi=0.03),
    # the first look, 5 seeds (rounded on the page)
    Row("dr_grpo_length_bias@5", "final:length/incorrect_mean", "dr_grpo", 5, -0.72, -1.41, -0.03, 0.044),
    Row("dr_grpo_length_bias@5", "final_length_ratio", "dr_grpo", 5, -0.023, -0.044, -0.001, 0.044, sesoi=0.1),
    # clip_higher, 5 seeds; one comparison per metric; the knob's own metric is not gated
    Row("clip_higher", "final_entropy", "eps_high_028", 5, -0.004836, -0.03536, 0.02568, 0.683, gate=CLIP_HIGHER_GATE),
    Row("clip_higher", "final:clip/frac_high", "eps_high_028", 5, -0.0004919, -0.001237, 0.0002528, 0.141),
    Row(
        "clip_higher",
        "final_eval_accuracy",
        "eps_high_028",
        5,
        0.009333,
        -0.02691,
        0.04558,
        0.514,
        gate=CLIP_HIGHER_GATE,
    ),
    # dapo_ablation, 5 seeds, each arm against full DAPO
    Row("dapo_ablation", "final_eval_accuracy", "no_overlong", 5, 0.0, -0.09005, 0.09005, 1.0, gate=DAPO_OVERLONG_GATE),
    Row("dapo_ablation", "final_eval_accuracy", "grpo", 5, -0.006667, -0.07289, 0.05955, 1.0),
    Row("dapo_ablation", "final_eval_accuracy", "no_token_level_loss", 5, -0.024, -0.09481, 0.04681, 0.652),
    Row(
        "dapo_ablation",
        "final_eval_accuracy",
        "no_clip_higher",
        5,
        -0.02667,
        -0.04668,
        -0.006657,
        0.018,
        gate=DAPO_CLIP_GATE,
    ),
    Row("dapo_ablation", "final_eval_accuracy", "no_dynamic_sampling", 5, -0.02933, -0.08974, 0.03107, 0.417),
    Row("dapo_ablation", "eval_auc", "no_overlong", 5, -0.00475, -0.06436, 0.05486, 0.732, gate=DAPO_OVERLONG_GATE),
    Row("dapo_ablation", "eval_auc", "grpo", 5, -0.0125, -0.05877, 0.03377, 0.563),
    Row("dapo_ablation", "eval_auc", "no_clip_higher", 5, -0.01838, -0.03737, 0.0006169, 0.056, gate=DAPO_CLIP_GATE),
    Row("dapo_ablation", "eval_auc", "no_token_level_loss", 5, -0.02175, -0.05313, 0.009633, 0.133),
    Row("dapo_ablation", "eval_auc", "no_dynamic_sampling", 5, -0.02262, -0.05836, 0.01311, 0.133),
    # final:length/truncated_frac is the overlong filter's own activity metric: not gated for no_overlong
    Row("dapo_ablation", "final:length/truncated_frac", "no_dynamic_sampling", 5, -0.005391, -0.0128, 0.002024, 0.115),
    Row("dapo_ablation", "final:length/truncated_frac", "no_overlong", 5, -0.005391, -0.01208, 0.001303, 0.103),
    Row(
        "dapo_ablation",
        "final:length/truncated_frac",
        "no_clip_higher",
        5,
        -0.004271,
        -0.01016,
        0.001619,
        0.115,
        gate=DAPO_CLIP_GATE,
    ),
    Row("dapo_ablation", "final:length/truncated_frac", "no_token_level_loss", 5, -0.002031, -0.01114, 0.007074, 0.725),
    Row("dapo_ablation", "final:length/truncated_frac", "grpo", 5, 0.002109, -0.02181, 0.02603, 0.725),
    # precision_mismatch, 5 seeds, each arm against bf16 at the same TIS setting (sampler dtype: no gate)
    Row("precision_mismatch", "final:mismatch/kl", "fp32/null", 5, -5.598e-05, -9.258e-05, -1.938e-05, 0.011),
    Row("precision_mismatch", "final:mismatch/kl", "fp16/null", 5, -5.469e-05, -8.709e-05, -2.228e-05, 0.011),
    Row("precision_mismatch", "final:mismatch/kl", "fp16/tis", 5, -5.016e-05, -7.8e-05, -2.233e-05, 0.011),
    Row(
        "precision_mismatch",
        "final:mismatch/prob_abs_diff_mean",
        "fp32/null",
        5,
        -0.0006885,
        -0.0008552,
        -0.0005217,
        0.001,
    ),
    Row(
        "precision_mismatch",
        "final:mismatch/prob_abs_diff_mean",
        "fp16/null",
        5,
        -0.0005777,
        -0.0006903,
        -0.0004651,
        0.001,
    ),
    Row(
        "precision_mismatch",
        "final:mismatch/prob_abs_diff_mean",
        "fp16/tis",
        5,
        -0.0006843,
        -0.0008391,
        -0.0005295,
        0.001,
    ),
    Row("precision_mismatch", "final:mismatch/prob_abs_diff_max", "fp32/null", 5, -0.05056, -0.06784, -0.03327, 0.001),
    Row("precision_mismatch", "final:mismatch/prob_abs_diff_max", "fp16/tis", 5, -0.05839, -0.09659, -0.02019, 0.013),
    Row("precision_mismatch", "final:mismatch/prob_abs_diff_max", "fp16/null", 5, -0.04102, -0.0573, -0.02475, 0.002),
    Row("precision_mismatch", "final_eval_accuracy", "fp16/null", 5, 0.02067, -0.01096, 0.0523, 0.182),
    Row("precision_mismatch", "final_eval_accuracy", "fp16/tis", 5, 0.002, -0.02588, 0.02988, 1.0),
    Row("precision_mismatch", "final_eval_accuracy", "fp32/null", 5, 0.01133, -0.05124, 0.0739, 1.0),
    # the TIS question: every arm against bf16/null (4 comparisons; the page lists two with intervals,
    # in points rounded to 0.1, and nothing was rejected, so every divisor is 4)
    Row(
        "precision_mismatch:tis",
        "final_eval_accuracy vs bf16/null",
        "bf16/tis",
        5,
        0.015,
        -0.047,
        0.076,
        0.72,
        gate=TIS_GATE,
        family_size=4,
    ),
    Row(
        "precision_mismatch:tis",
        "final_eval_accuracy vs bf16/null",
        "fp32/null",
        5,
        0.011,
        -0.057,
        0.079,
        0.72,
        family_size=4,
    ),
    # loss_aggregation, 5 seeds, each mode against seq_mean_token_mean (aggregation: no gate)
    Row("loss_aggregation", "final_eval_accuracy", "seq_mean_token_sum_norm", 5, 0.008, -0.01656, 0.03256, 0.799),
    Row("loss_aggregation", "final_eval_accuracy", "seq_mean_token_sum", 5, -0.004, -0.04604, 0.03804, 0.901),
    Row("loss_aggregation", "final_eval_accuracy", "token_mean", 5, -0.009333, -0.0536, 0.03493, 0.901),
    Row("loss_aggregation", "final_length_ratio", "token_mean", 5, -0.04468, -0.08408, -0.005279, 0.033),
    Row("loss_aggregation", "final_length_ratio", "seq_mean_token_sum", 5, -0.03169, -0.05642, -0.006961, 0.033),
    Row("loss_aggregation", "final_length_ratio", "seq_mean_token_sum_norm", 5, -0.01711, -0.03247, -0.001755, 0.036),
    Row("loss_aggregation", "final:length/incorrect_mean", "token_mean", 5, -1.741, -4.614, 1.133, 0.222),
    Row("loss_aggregation", "final:length/incorrect_mean", "seq_mean_token_sum", 5, -1.146, -3.638, 1.347, 0.222),
    Row("loss_aggregation", "final:length/incorrect_mean", "seq_mean_token_sum_norm", 5, -0.741, -1.962, 0.4803, 0.222),
]


#: the catalogue's direction of each compared summary (None: no preferred direction)
DIRECTION = {
    "final:length/incorrect_mean": False,
    "final_length_ratio": False,
    "final_eval_accuracy": True,
    "eval_auc": True,
    "final_entropy": None,
    "final:clip/frac_high": None,
    "final:length/truncated_frac": False,
    "final:mismatch/kl": False,
    "final:mismatch/prob_abs_diff_mean": False,
    "final:mismatch/prob_abs_diff_max": False,
}


def holm_divisors(p: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Holm's divisor per hypothesis as the old `compare` used it for its intervals: m, m−1, ...
    while Holm rejects, then the divisor of the first non-rejection for it and all after it."""
    m = p.size
    order = np.argsort(p, kind="stable")
    steps = m - np.arange(m, dtype=float)
    rejected = np.logical_and.accumulate(p[order] < alpha / steps)
    stop = int(rejected.sum())
    sorted_div = steps.copy()
    if stop < m:
        sorted_div[stop:] = steps[stop]
    out = np.empty(m)
    out[order] = sorted_div
    return out


def holm_divisors_by_rank(rank: np.ndarray, rows: list[Row]) -> np.ndarray:
    """Holm divisors when the p-values have the order ``rank`` (0 = smallest) and each is solved at
    its divisor: step down from m while the comparison at that step rejects (its interval, at
    1 - α/step, excludes 0; the same decision as p < α/step)."""
    m = len(rows)
    order = np.argsort(rank)
    div = np.full(m, float(m))
    for k, i in enumerate(order):
        div[order[k:]] = m - k  # this one and, if Holm stops here, all after it
        if not (rows[i].lo > 0.0 or rows[i].hi < 0.0):  # not rejected at this step (interval holds 0)
            break
    return div


def paired_p(delta: float, se: float, n: int) -> float:
    return 1.0 if delta == 0.0 else float(2.0 * sps.t.sf(abs(delta) / se, n - 1))


def _fill(rows: list[Row], div: np.ndarray) -> None:
    for r, d in zip(rows, div, strict=True):
        r.divisor = float(d)
        r.se = (r.hi - r.lo) / 2.0 / sps.t.ppf(1.0 - ALPHA / (2.0 * d), r.n - 1)
        r.p_raw = paired_p(r.delta, r.se, r.n)


def solve_family(rows: list[Row]) -> None:
    """SE and raw p of each comparison of one old Holm family, from its interval at the Holm level
    that depends on the raw p's order. Every order of the family is tried; an order is consistent
    when the p-values it gives sort that way and give the same Holm divisors back. Near-ties can
    have two consistent orders (loss_aggregation's length ratio): the one whose Holm p-values
    match the printed ones is taken."""
    m = rows[0].family_size or len(rows)
    if rows[0].family_size:  # some members not listed: the page shows no rejection, so all at α/m
        _fill(rows, np.full(len(rows), float(m)))
    else:
        best, best_err = None, math.inf
        for order in itertools.permutations(range(len(rows))):
            p_assumed = np.empty(len(rows))
            p_assumed[list(order)] = np.arange(len(rows))  # ranks stand in for p to get the divisors
            _fill(rows, holm_divisors_by_rank(p_assumed, rows))
            p = np.array([r.p_raw for r in rows])
            consistent = np.array_equal(holm_divisors(p), np.array([r.divisor for r in rows]))
            adj = multipletests(p, alpha=ALPHA, method="holm")[1]
            err = (
                max(abs(a - r.p_holm_page) for a, r in zip(adj, rows, strict=True) if r.p_holm_page > 0.001)
                if any(r.p_holm_page > 0.001 for r in rows)
                else 0.0
            )
            if consistent and err < best_err:
                best, best_err = [r.divisor for r in rows], err
        _fill(rows, np.array(best))
    if rows[0].family_size:
        for r in rows:  # Holm's adjusted p is at most Bonferroni's; the unlisted members are unknown
            r.p_holm = min(1.0, r.p_raw * m)
    else:
        adj = multipletests([r.p_raw for r in rows], alpha=ALPHA, method="holm")[1]
        for r, a in zip(rows, adj, strict=True):
            r.p_holm = float(a)
    for r in rows:
        t_sim = sps.t.ppf(1.0 - ALPHA / (2.0 * m), r.n - 1)
        r.sim_lo, r.sim_hi = r.delta - t_sim * r.se, r.delta + t_sim * r.se
        sd_diff = r.se * math.sqrt(r.n)
        d_es = TTestPower().solve_power(nobs=r.n, alpha=ALPHA / r.divisor, power=POWER, alternative="two-sided")
        r.mde = float(d_es) * sd_diff
        if math.isfinite(r.sesoi):  # TOST on the same t statistic; one comparison per metric here
            r.p_tost = float(
                max(sps.t.sf((r.delta + r.sesoi) / r.se, r.n - 1), sps.t.cdf((r.delta - r.sesoi) / r.se, r.n - 1))
            )


def verdict(r: Row) -> str:
    """The new `compare`'s verdict text for the row (activity gate last, as `apply_gate` does)."""
    rejected = r.p_holm < ALPHA
    word = ""
    if rejected:
        higher_is_better = DIRECTION[r.family.split(" ")[0]]
        if higher_is_better is None:
            word = "higher" if r.delta > 0 else "lower"
        else:
            word = "better" if (r.delta > 0) == higher_is_better else "worse"
    elif math.isfinite(r.p_tost) and r.p_tost < ALPHA:
        word = f"equivalent (|Δ| < {r.sesoi:g})"
    else:
        word = f"inconclusive with {r.n} seeds (MDE {r.mde:.3g})"
    if r.gate:
        tested = word
        word = r.gate
        if r.sim_lo <= 0.0 <= r.sim_hi:
            word += f"; |Δ| > {round_up(max(abs(r.sim_lo), abs(r.sim_hi)))} excluded"
        word += f" [the test alone: {tested}]"
    return word


def round_up(x: float) -> str:
    """2 significant digits, away from 0 (as `compare` states an excluded effect)."""
    digits = 1 - math.floor(math.log10(abs(x)))
    return f"{math.ceil(x * 10**digits) / 10**digits:.{max(digits, 0)}f}"


def derive(rows: list[Row]) -> None:
    families: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        families.setdefault((r.study, r.family), []).append(r)
    for members in families.values():
        solve_family(members)
    studies: dict[str, list[Row]] = {}
    for r in rows:
        studies.setdefault(r.study, []).append(r)
    for members in studies.values():
        adj = multipletests([r.p_raw for r in members], alpha=ALPHA, method="holm")[1]
        for r, a in zip(members, adj, strict=True):
            r.p_holm_study = float(a)
    for r in rows:
        r.verdict = verdict(r)


def fmt(x: float) -> str:
    return f"{x:.4g}"


def pfmt(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def table(rows: list[Row]) -> str:
    head = (
        "| metric | arm | seeds | Δ | simultaneous 95% CI | p raw | p_holm (metric) | p_holm (study) "
        "| SD of differences | MDE (α/d) | verdict now |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r.family} | {r.arm} | {r.n} | {fmt(r.delta)} | [{fmt(r.sim_lo)}, {fmt(r.sim_hi)}] "
            f"| {pfmt(r.p_raw)} | {pfmt(r.p_holm)} | {pfmt(r.p_holm_study)} | {fmt(r.se * math.sqrt(r.n))} "
            f"| {fmt(r.mde)} (α/{r.divisor:g}) | {r.verdict.replace('|', chr(92) + '|')} |"
        )
    return "\n".join(lines)


def consistency(rows: list[Row]) -> float:
    """Largest |p_holm re-derived − p_holm printed| over the rows whose printed value is not a bound."""
    worst = 0.0
    for r in rows:
        if r.p_holm_page > 0.001 and not r.family_size:  # "<0.001" rows print 0.001 here
            worst = max(worst, abs(r.p_holm - r.p_holm_page))
    return worst


def sequential_thresholds() -> list[str]:
    """What a planned `run --until-decided --max-seeds 7` would have tested dr_grpo_length_bias at."""
    out = []
    for looks in ((5, 7), (3, 5, 7)):
        for spending in ("obrien_fleming", "pocock"):
            d = Design.planned(looks, spending=spending)
            steps = ", ".join(f"{n} seeds at {a:.4f}" for n, a in zip(d.looks, d.look_alpha, strict=True))
            out.append(f"looks {'/'.join(map(str, looks))}, {spending}: {steps}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=None, help="one study (prefix match), else all")
    args = ap.parse_args()
    derive(ROWS)
    print(f"largest |p_holm re-derived - p_holm printed| (page rounds to 0.001): {consistency(ROWS):.4f}")
    for study in dict.fromkeys(r.study for r in ROWS):
        if args.study and not study.startswith(args.study):
            continue
        print(f"\n### {study}\n")
        print(table([r for r in ROWS if r.study == study]))
        if study.startswith("dr_grpo") and "@" not in study:
            for r in (r for r in ROWS if r.study == study and math.isfinite(r.p_tost)):
                print(f"TOST {r.family} at SESOI {r.sesoi:g}: p = {r.p_tost:.4f}")
            print("\n".join(sequential_thresholds()))
        if study == "dapo_ablation":
            for fam in ("final_eval_accuracy", "eval_auc"):
                sds = {r.arm: r.se * math.sqrt(r.n) for r in ROWS if r.study == study and r.family == fam}
                others = [v for k, v in sds.items() if k != "no_clip_higher"]
                print(
                    f"{fam}: SD of paired differences no_clip_higher {sds['no_clip_higher']:.4g}, others "
                    f"{min(others):.4g}-{max(others):.4g} ({min(others) / sds['no_clip_higher']:.1f}-"
                    f"{max(others) / sds['no_clip_higher']:.1f}x)"
                )


if __name__ == "__main__":
    main()
