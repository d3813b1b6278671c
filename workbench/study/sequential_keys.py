"""The vocabulary of a study's ``compare.sequential`` (``workbench run --until-decided``), in one place for
the study check that refuses a bad file (:mod:`workbench.study.schema`) and the design that reads it
(:mod:`workbench.compare.sequential`)."""

from __future__ import annotations

__all__ = ["FUTILITY_SIDES", "SEQUENTIAL_KEYS"]

SEQUENTIAL_KEYS: tuple[str, ...] = ("looks", "spending", "futility", "amendments")
#: ``compare.sequential.amendments``: a list of sentences, one per change made to the study after a look
#: (what changed and why, e.g. "added variant dr_grpo_norm after look 1: ..."). A study whose arms changed
#: after a look is refused unless a new amendment declares it; the record then carries every amendment.
#: ``compare.sequential.futility``: which side of the SESOI a futility stop excludes. ``improvement``: the
#: variant cannot be a SESOI better than the baseline (a question "does the variant help?"); ``worsening``: it
#: cannot be a SESOI worse (an ablation's "does removing it hurt?", the baseline being the full method);
#: ``difference``: it can be neither (a question "do the two differ?", e.g. two engines on one setting);
#: ``none``: no futility stops. Futility is non-binding, so the side never changes the design's α.
FUTILITY_SIDES: tuple[str, ...] = ("improvement", "worsening", "difference", "none")
