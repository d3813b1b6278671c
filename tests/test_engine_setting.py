"""``engine: workbench | trl``: a run setting whose default leaves every existing run key and param as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from workbench.config import NOT_IN_RUN_KEY, RUN_KEY_VERSION, RunConfig
from workbench.study import expand, load_study

STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))


def key_without_engine(cfg: RunConfig) -> str:
    """run_key as it was computed before the setting existed: the same formula over a dump with no `engine`."""
    neutral = cfg.model_copy(
        update={
            section: getattr(cfg, section).model_copy(update=dict.fromkeys(names))
            for section, names in NOT_IN_RUN_KEY.items()
        }
    )
    payload = neutral.model_dump(mode="json", exclude={"tracking", "engine"}, exclude_defaults=True)
    blob = json.dumps({"v": RUN_KEY_VERSION, "config": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_the_default_run_key_is_the_one_main_had_before_the_setting():
    # RunConfig().run_key() on main at 90c2c42, before `engine` existed
    assert RunConfig().run_key() == "6369ff827488799e"
    assert RunConfig().engine == "workbench"


@pytest.mark.slow  # every shipped study expanded: ~40 s on 2 cores
@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_shipped_studies_keep_their_run_keys_and_params(path):
    for spec in expand(load_study(path)):
        if spec.config.engine != "workbench":  # engines_trl's TRL arms: new runs, keyed with their engine
            continue
        assert spec.run_key == key_without_engine(spec.config), spec.label
        assert "engine" not in spec.config.flat()  # MLflow params of a workbench run: as before
        assert "engine" not in spec.config.model_dump(mode="json")


def test_engine_trl_is_a_different_run_and_a_param():
    cfg = RunConfig.model_validate({"engine": "trl"})
    assert cfg.run_key() != RunConfig().run_key()
    assert cfg.flat()["engine"] == "trl"
    with pytest.raises(ValueError, match="engine"):
        RunConfig.model_validate({"engine": "verl"})
