"""The planned seeds of ``workbench plan STUDY`` in the terminal (the plan: :mod:`workbench.analysis.seed_plan`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.cli.output import console

if TYPE_CHECKING:
    from workbench.analysis.seed_plan import MetricSeedPlan

__all__ = ["print_seed_plan"]


def print_seed_plan(plans: list[MetricSeedPlan]) -> None:
    """The plan in the terminal: one line per metric, with the SD used and where it came from."""
    if not plans:
        return
    console.print(
        "[bold]planned seeds[/bold] (80% power to detect |Δ| = SESOI with the paired t-test at "
        "Holm's first-step level α/m; SD of a paired difference = √2 × noise SD):",
        highlight=False,
    )
    for planned in plans:
        p, secondary = planned.plan, planned.secondary
        name = f"{p.metric} (secondary)" if secondary else p.metric
        if p.seeds is None and secondary and p.sesoi is None:
            console.print(
                f"  {name}: reported, not planned for (no SESOI; compare.primary names the metrics the "
                "study is designed to decide)",
                highlight=False,
                soft_wrap=True,
            )
            continue
        if p.seeds is None:
            console.print(f"  {name}: nothing planned: {p.why}", highlight=False, soft_wrap=True)
            continue
        level = "the last look's α/m" if p.level_source != "alpha / m" else "α/m"
        console.print(
            f"  {name}: {p.seeds} seeds per arm (study has {p.seeds_in_study}); SESOI {p.sesoi:g}, "
            f"noise SD {p.noise_sd:.4g} ({p.sd_source}), m = {p.comparisons} comparisons, "
            f"{level} = {p.alpha:.4g}",
            highlight=False,
            soft_wrap=True,
        )
        if p.power_at_cap is not None:
            console.print(
                f"    capped at {p.cap} seeds per arm: power {p.power_at_cap:.2f} to detect |Δ| = SESOI, "
                f"TOST power {p.tost_power_at_cap:.2f} to show equivalence within ±SESOI at a true Δ of 0",
                highlight=False,
                soft_wrap=True,
            )
        if planned.pedigree is not None and p.sesoi is not None:
            g = planned.pedigree
            when = (
                "set before any data on this question"
                if g["set_before_data"]
                else "set after data on this question were seen"
            )
            console.print(
                f"    SESOI pedigree: {p.sesoi:g} is {p.sesoi / g['phenomenon']:.0%} of the phenomenon it "
                f"would deny ({g['phenomenon']:g}, measured); {when}; published: {g['published']}",
                highlight=False,
                soft_wrap=True,
            )
