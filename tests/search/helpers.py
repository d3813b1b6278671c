"""Helpers for the search tests: small search studies on the micro model, and reading a search back."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import micro_run_config

# Completions longer than 1 token are penalised (DAPO's soft overlong punishment), so rewards differ
# within a group and the learning rate matters even though the micro model never answers correctly.
SHAPING = {"shaping": [{"name": "overlong_soft", "params": {"max_length": 8, "cache_length": 7}}]}
# Entropy collapse is a *failing* rule that fires at once: a diverging learning rate trips it at step 1.
STRICT_HEALTH = {"rules": {"entropy_collapse": {"baseline_steps": 1, "patience": 1, "severity": "fail"}}}


def search_run_config(steps: int = 4, eval_every: int = 1, **overrides) -> dict:
    from workbench.config import deep_merge

    cfg = micro_run_config(rollout={"steps": steps, "eval_every": eval_every}, reward=SHAPING)
    return deep_merge(cfg, overrides)


def write_search_study(
    path: Path,
    name: str,
    search: dict,
    *,
    steps: int = 4,
    eval_every: int = 1,
    health: dict | None = None,
    base: dict | None = None,
    **extra,
) -> Path:
    data = {"name": name, "base": base or search_run_config(steps, eval_every)}
    if health is not None:
        data["health"] = health
    data["search"] = search
    path.write_text(yaml.safe_dump(data | extra, sort_keys=False))
    return path


def load_spec(path: Path, overrides: list[str] | None = None):
    from workbench.search.spec import parse_search
    from workbench.study import apply_overrides, load_study

    study = load_study(path)
    if overrides:
        study = apply_overrides(study, overrides)
    return parse_search(study)


def optuna_trials(spec, storage_url: str) -> list:
    """The search's trials as a separate process sees them."""
    from workbench.search.report import open_search

    return open_search(spec, storage_url).get_trials(deepcopy=False)


def trial_runs(client, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'trial'") if exp else []
