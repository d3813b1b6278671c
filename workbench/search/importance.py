"""Which parameters mattered: Optuna's parameter importances of a search, or why there are none.

The numbers are ``optuna.importance.get_param_importances`` with Optuna's default evaluator (the
same as the report's importance plot), over the COMPLETE trials. Optuna returns numbers even
where they mean nothing (one complete trial gives every parameter an equal share; a single
parameter always gets 1.0), so those cases are answered with a reason instead.
"""

from __future__ import annotations

import math
import warnings

from workbench.search.spec import SearchSpec

__all__ = ["param_importances"]


def param_importances(ostudy, spec: SearchSpec) -> tuple[dict[str, list[float]], str]:
    """``({param: [importance per objective]}, "")``, most important first (by the first
    objective); or ``({}, reason)``: one line saying why importances cannot be computed."""
    from optuna.importance import get_param_importances
    from optuna.trial import TrialState

    if len(spec.params) < 2:
        (name,) = spec.params
        return {}, f"one parameter ({name}): its importance is 1 by definition"
    complete = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}, f"{len(complete)} complete trial(s): importances need at least 2"
    names = spec.objective_names()
    out: dict[str, list[float]] = {name: [] for name in spec.params}
    for i, (name, direction) in enumerate(zip(names, spec.directions, strict=True)):
        values = [t.values[i] for t in complete]
        if not all(math.isfinite(v) for v in values) or len(set(values)) < 2:
            return {}, f"every complete trial has the same (or a non-finite) {name}: nothing to attribute"
        # single objective: Optuna reads the study's direction; several: it ranks low targets
        # better, so a maximised objective is negated (as the report's importance plots do)
        sign = -1.0 if direction == "maximize" else 1.0
        target = None if not spec.multi_objective else (lambda t, i=i, sign=sign: sign * t.values[i])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # experimental-feature and equal-quantile notes
                got = get_param_importances(ostudy, target=target)
        except (ValueError, RuntimeError) as error:
            return {}, f"Optuna could not compute them: {' '.join(str(error).split())[:200]}"
        for param, column in out.items():
            column.append(float(got.get(param, 0.0)))
    ranked = sorted(out.items(), key=lambda kv: -kv[1][0])
    return dict(ranked), ""
