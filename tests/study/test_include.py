"""include: inherit another study file, deep-override it; cycles are errors (see test_errors too)."""

from __future__ import annotations

from workbench.study import expand, load_study

from .conftest import DATA


def test_child_inherits_and_deep_overrides():
    child = load_study(DATA / "child.yaml")
    assert child.name == "child" and child.include == "common.yaml"
    assert list(child.variants) == ["grpo", "dr_grpo", "dapo"]  # inherited order, then new ones
    assert child.seeds == [7]  # lists are replaced, not appended
    assert child.base["rollout"] == {"steps": 20, "group_size": 8}  # mappings merge
    specs = {s.variant: s for s in expand(child)}
    assert [s.seed for s in specs.values()] == [7, 7, 7]
    assert specs["dr_grpo"].config.learner.lr == 3e-4
    assert specs["dr_grpo"].config.algorithm.estimator == "dr_grpo"  # parent's override kept
    assert specs["grpo"].config.rollout.steps == 20
    assert specs["dapo"].config.tracking.experiment == "child"


def test_parent_alone_is_unchanged():
    parent = load_study(DATA / "common.yaml")
    assert len(expand(parent)) == 6 and parent.base["rollout"]["steps"] == 50


def test_include_chain_relative_to_each_file(write):
    write("studies/base/a.yaml", "name: a\nbase: {model: {builtin: tiny}, learner: {lr: 0.1}}\n")
    write("studies/base/b.yaml", "include: a.yaml\nbase: {learner: {lr: 0.2}}\nseeds: [0, 1]\n")
    write("studies/c.yaml", "include: base/b.yaml\nname: c\nbase: {rollout: {steps: 3}}\n")
    specs = expand(load_study("studies/c.yaml"))
    assert [(s.config.learner.lr, s.config.rollout.steps, s.seed) for s in specs] == [(0.2, 3, 0), (0.2, 3, 1)]
