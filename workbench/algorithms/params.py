"""A registered unit's own parameters: its keyword-only arguments, with the unit's defaults.

``algorithm.loss_params`` / ``algorithm.estimator_params`` in a run config, and the
``**loss_params`` / ``**estimator_params`` of ``compute_policy_loss`` / ``compute_advantages``,
are checked here against the unit's signature, so a new unit declares its knobs once: in
its signature (as reward shapers do). The clip bounds are loss parameters like any other; a
run config also spells them as fields of their own (``LOSS_PARAM_FIELDS``).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workbench.errors import suggest_and_list

# Loss parameters a run config spells as ``algorithm`` fields of their own: presets set them and studies
# vary them across losses, and that spelling is the one a resolved config stores (and ``run_key`` hashes).
# ``algorithm.loss_params.clip_high`` is the same parameter as ``algorithm.clip_high``
# (``hoist_loss_param_fields``), so both spellings make the same config.
LOSS_PARAM_FIELDS = ("clip_low", "clip_high", "dual_clip")


def keyword_params(fn: Callable[..., Any], *, exclude: Iterable[str] = ()) -> list[str]:
    """Names of ``fn``'s keyword-only parameters, in signature order, less ``exclude``."""
    skip = set(exclude)
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in skip
    ]


def missing_params(fn: Callable[..., Any], given: Iterable[str], *, exclude: Iterable[str] = ()) -> list[str]:
    """``fn``'s keyword-only parameters without a default that ``given`` lacks (less ``exclude``), in order."""
    have = set(given) | set(exclude)
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty and p.name not in have
    ]


def hoist_loss_param_fields(algorithm: Mapping[str, Any]) -> dict[str, Any]:
    """``algorithm`` (a run config's ``algorithm`` mapping) with ``loss_params.clip_high`` (and the other
    ``LOSS_PARAM_FIELDS``) moved to the field ``clip_high``: one parameter, one place.

    Raises ``ValueError`` when both spellings are given with different values.
    """
    out = dict(algorithm)
    params = out.get("loss_params")
    if not isinstance(params, Mapping):
        return out  # not a mapping: the schema says so
    params = dict(params)
    for key in LOSS_PARAM_FIELDS:
        if key not in params:
            continue
        value = params.pop(key)
        if key in out and out[key] != value:
            raise ValueError(
                f"{key} and loss_params.{key} are one parameter, given as {out[key]!r} and {value!r}: set it once"
            )
        out[key] = value
    out["loss_params"] = params
    return out


def unknown_param_message(kind: str, unit: str, key: str, valid: list[str]) -> str:
    """One line naming the unknown key, the unit and the keys it takes, with a did-you-mean hint."""
    return f"{kind} {unit!r} has no parameter {key!r}{suggest_and_list(key, sorted(valid), none='no parameters')}"


def check_unit_params(
    kind: str,
    unit: str,
    fn: Callable[..., Any],
    params: Mapping[str, Any],
    *,
    exclude: Iterable[str] = (),
    check_types: bool = False,
) -> dict[str, Any]:
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
