"""Every study shipped in studies/ is valid and expands to the runs it promises."""

from pathlib import Path

import pytest

from workbench.study import expand, load_study

STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_is_valid(path):
    specs = expand(load_study(path))
    assert specs and len({s.run_key for s in specs}) == len(specs)


def test_sanity_is_one_grpo_run_with_overlong_shaping():
    (spec,) = expand(load_study(STUDIES[0].parent / "sanity.yaml"))
    assert spec.config.algorithm.preset == "grpo"
    assert [t.name for t in spec.config.reward.shaping] == ["overlong_soft"]
