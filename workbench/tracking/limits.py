"""MLflow's own limits on what a run holds, as one-line reasons: what an import checks before its first
write (a bulk write into a SQLite store bypasses MLflow's validation, so an over-long metric key would
be stored, and a bad parameter key would fail half-way through an import)."""

from __future__ import annotations

from typing import Any

__all__ = ["entity_problem", "metric_name_problem"]


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 12]}... ({len(text)} chars)"


def metric_name_problem(name: str) -> str | None:
    """Why MLflow would refuse ``name`` as a metric key (MLflow's own validation), or None."""
    from mlflow.exceptions import MlflowException  # deferred: mlflow
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, _validate_metric_name

    if len(name) > MAX_ENTITY_KEY_LENGTH:
        return f"metric name {_short(name)} is longer than MLflow's {MAX_ENTITY_KEY_LENGTH} characters"
    try:
        _validate_metric_name(name)
    except MlflowException:
        return (
            f"metric name {_short(name)} is not a valid MLflow metric name (letters, digits, '_', '-', '.', "
            "' ', ':', '/'; no '..' or leading '/')"
        )
    return None


def entity_problem(kind: str, key: str, value: str | None = None) -> str | None:
    """Why MLflow would refuse ``key`` (and ``value``) as a run's ``kind`` ("parameter" or "tag"), by
    MLflow's own rules, or None. Values over MLflow's length limits are problems too: MLflow would
    refuse them or, with ``MLFLOW_TRUNCATE_LONG_VALUES``, cut them in silence."""
    from mlflow.exceptions import MlflowException  # deferred: mlflow
    from mlflow.utils.validation import (
        MAX_ENTITY_KEY_LENGTH,
        MAX_PARAM_VAL_LENGTH,
        MAX_TAG_VAL_LENGTH,
        _validate_param_name,
        _validate_tag_name,
    )

    if not isinstance(key, str) or not key:
        return f"{kind} name {_short(key)} is empty or not text"
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        return f"{kind} name {_short(key)} is longer than MLflow's {MAX_ENTITY_KEY_LENGTH} characters"
    try:
        (_validate_param_name if kind == "parameter" else _validate_tag_name)(key)
    except MlflowException:
        return (
            f"{kind} name {_short(key)} is not one MLflow accepts (letters, digits, '_', '-', '.', ' ', ':', '/'; "
            "no '..' or leading '/')"
        )
    limit = MAX_PARAM_VAL_LENGTH if kind == "parameter" else MAX_TAG_VAL_LENGTH
    if value is not None and len(value) > limit:
        return f"{kind} {_short(key)}: a value of {len(value):,} characters, over MLflow's {limit:,}"
    return None
