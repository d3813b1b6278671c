"""What "final" means for an eval curve: one definition, used by every output that says "final".

``workbench run``'s end-of-run table, ``compare``'s ``final_eval_accuracy`` (and ``final:eval/...``),
its intervals over eval problems and the notebook API all call :func:`final_eval_value`, and print
:data:`FINAL_EVAL_DEFINITION` next to the number.

Why the mean of the last 3 evals *after step 0*:
* the mean of a few late checkpoints, not the last one alone: a greedy eval moves from checkpoint to
  checkpoint as the policy moves; averaging the last 3 lowers that noise in every run without
  changing what is estimated much once a curve has flattened;
* step 0 left out: the eval at step 0 runs before the first update, so it scores the initial model,
  the same for every variant at a seed. In a short run (20 steps, an eval every 10: evals at 0, 10,
  20) "the last 3" would average it in and pull every variant's final accuracy, and every
  difference, a third of the way back to the starting point. That is how ``run`` once printed
  0.360 and ``compare`` 0.327 for the same run.
A run with no eval after step 0 (never trained, or stopped before its first later eval) has no
final value (NaN): its initial accuracy is not a result of its training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FINAL_EVALS", "FINAL_EVAL_DEFINITION", "definition", "final_eval_value", "final_eval_weights"]

#: How many of the last evals after step 0 "final" averages.
FINAL_EVALS = 3


def definition(k: int = FINAL_EVALS) -> str:
    """The definition in words, for the outputs: ``"mean of the last 3 evals after step 0"``."""
    return "the last eval after step 0" if k == 1 else f"mean of the last {k} evals after step 0"


#: The definition in words, as every output states it.
FINAL_EVAL_DEFINITION = definition()


def final_eval_weights(steps: Sequence[float] | np.ndarray, k: int = FINAL_EVALS) -> np.ndarray:
    """Weight ``1/n`` on each of the last ``n = min(k, evals after step 0)`` evals at ``steps``
    (sorted ascending), 0 elsewhere; all zeros when no eval is after step 0."""
    if k < 1:
        raise ValueError(f"window must be >= 1, got {k}")
    import numpy as np  # deferred: FINAL_EVAL_DEFINITION is read by `workbench --help`'s import of the CLI

    steps = np.asarray(steps, dtype=float)
    weights = np.zeros(steps.size)
    after = np.flatnonzero(steps > 0)[-k:]
    if after.size:
        weights[after] = 1.0 / after.size
    return weights


def final_eval_value(
    steps: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, k: int = FINAL_EVALS
) -> float:
    """The final value of an eval curve (``values`` at ascending ``steps``): the mean of its last
    ``k`` values after step 0 (fewer if fewer were logged); NaN when none is after step 0."""
    weights = final_eval_weights(steps, k)
    if not weights.any():
        return math.nan
    import numpy as np  # deferred: as above

    return float(np.asarray(values, dtype=float)[weights > 0].mean())
