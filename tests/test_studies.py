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


def test_sanity_evaluates_enough_problems_for_its_20_point_promise():
    """The demo promises +20 points of held-out accuracy. With n problems the standard error of a
    difference of two accuracies is at most sqrt(2 * 0.25 / n) (p = 0.5 on both sides); 20 points are
    more than 5 of them only when n >= 313, so the demo's eval set (task.eval_size, not cut by
    rollout.eval_size) keeps at least 400."""
    from workbench.tasks import build_task

    (spec,) = expand(load_study(STUDIES[0].parent / "sanity.yaml"))
    held_out = len(build_task(spec.config.task).eval_problems())
    cap = spec.config.rollout.eval_size
    evaluated = held_out if cap is None else min(cap, held_out)
    assert evaluated >= 400
    assert 0.20 / (2 * 0.25 / evaluated) ** 0.5 > 5
