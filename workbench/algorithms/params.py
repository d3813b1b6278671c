"""A registered unit's own parameters: its keyword-only arguments, with the unit's defaults.

``algorithm.loss_params`` / ``algorithm.estimator_params`` in a run config, and the
``**loss_params`` / ``**estimator_params`` of ``compute_policy_loss`` / ``compute_advantages``,
are checked here against the unit's signature, so a new unit declares its knobs once: in
its signature (as reward shapers do).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workbench.errors import suggest_and_list


def keyword_params(fn: Callable[..., Any], *, exclude: Iterable[str] = ()) -> list[str]:
    """Names of ``fn``'s keyword-only parameters, in signature order, less ``exclude``."""
    skip = set(exclude)
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in skip]


def required_param(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` has a keyword-only parameter ``name`` without a default."""
    param = inspect.signature(fn).parameters.get(name)
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is param.empty


def unknown_param_message(kind: str, unit: str, key: str, valid: list[str]) -> str:
    """One line naming the unknown key, the unit and the keys it takes, with a did-you-mean hint."""
    return f"{kind} {unit!r} has no parameter {key!r}{suggest_and_list(key, sorted(valid), none='no parameters')}"


def check_unit_params(kind: str, unit: str, fn: Callable[..., Any], params: Mapping[str, Any], *,
                      exclude: Iterable[str] = (), check_types: bool = False) -> dict[str, Any]:
    """``params`` checked against ``fn``'s keyword-only parameters (less ``exclude``).

    Raises ``ValueError`` on a key the unit does not take (``unknown_param_message``) and, with
    ``check_types``, on a value its annotation rejects (pydantic's lax rules, no inf/NaN).
    Returns the params, values converted to the annotated types.
    """
    valid = keyword_params(fn, exclude=exclude)
    for key in params:
        if key not in valid:
            raise ValueError(unknown_param_message(kind, unit, str(key), valid))
    if not check_types:
        return dict(params)
    from pydantic import ConfigDict, TypeAdapter, ValidationError

    hints = typing.get_type_hints(fn, include_extras=True)  # keep Annotated constraints (e.g. > 0)
    out: dict[str, Any] = {}
    for key, value in params.items():
        adapter = TypeAdapter(hints.get(key, Any), config=ConfigDict(allow_inf_nan=False))
        try:
            out[key] = adapter.validate_python(value)
        except ValidationError as error:
            reason = error.errors()[0]["msg"]
            raise ValueError(f"{kind} {unit!r} parameter {key!r}: {reason}, got {value!r}") from None
    return out
