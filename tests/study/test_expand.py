"""Expansion: counts, order, precedence, deep merge, exclude, labels."""

from __future__ import annotations

import itertools

import pytest

from workbench.config import RunConfig
from workbench.study import RunSpec, Study, StudyError, expand, load_study, validate_study

from .conftest import DATA

BASE = {"model": {"builtin": "tiny"}, "learner": {"lr": 1e-4}, "algorithm": {"preset": "grpo"}}


def study(**fields) -> Study:
    return validate_study({"name": "t", "base": BASE, **fields})


def test_sanity_example():
    specs = expand(load_study(DATA / "sanity.yaml"))
    assert [(s.variant, s.seed, s.grid, s.label) for s in specs] == [
        ("base", 0, {}, "base/seed=0"),
        ("base", 1, {}, "base/seed=1"),
    ]
    cfg = specs[1].config
    assert isinstance(cfg, RunConfig) and cfg.seed == 1 and cfg.learner.lr == 1e-4  # '1e-4' is a float
    assert cfg.tracking.experiment == "sanity"
    assert all(s.run_key == s.config.run_key() for s in specs)


def test_design_example():
    st = load_study(DATA / "grpo_vs_dr_grpo.yaml")
    specs = expand(st)
    assert [s.label for s in specs[:4]] == [
        "grpo/lr=3e-05/seed=0",
        "grpo/lr=3e-05/seed=1",
        "grpo/lr=3e-05/seed=2",
        "grpo/lr=0.0001/seed=0",
    ]
    assert len(specs) == 12 and specs[-1].label == "dr_grpo/lr=0.0001/seed=2"
    assert st.compare["baseline"] == "grpo" and st.search["direction"] == "maximize"
    assert {s.config.tracking.experiment for s in specs} == {"grpo-vs-dr-grpo"}


def test_ablation_count_and_order():
    st = load_study(DATA / "ablation.yaml")
    specs = expand(st)
    # 3 variants x 2 lr x 2 zip points x 2 seeds = 24, minus 4 (dr_grpo @ lr 3e-5) minus 2 (dapo bf16 seed 1)
    assert len(specs) == 18
    full = [
        (v, lr, dt, corr, seed)
        for v in ["grpo", "dr_grpo", "dapo"]
        for lr in [3e-5, 1e-4]
        for dt, corr in [("float32", None), ("bfloat16", "tis")]
        for seed in [0, 1]
    ]
    kept = [
        p
        for p in full
        if not (p[0] == "dr_grpo" and p[1] == 3e-5) and not (p[0] == "dapo" and p[2] == "bfloat16" and p[4] == 1)
    ]
    got = [
        (s.variant, s.grid["learner.lr"], s.grid["sampler.dtype"], s.grid["algorithm.correction"], s.seed)
        for s in specs
    ]
    assert got == kept
    assert specs[0].label == "grpo/lr=3e-05/dtype=float32/correction=null/seed=0"
    assert list(specs[0].grid) == ["learner.lr", "sampler.dtype", "algorithm.correction"]
    for s in specs:
        assert (s.config.learner.lr, s.config.sampler.dtype, s.config.algorithm.correction) == (
            s.grid["learner.lr"],
            s.grid["sampler.dtype"],
            s.grid["algorithm.correction"],
        )
        assert s.config.seed == s.seed
        assert s.config.tracking.uri == "sqlite:///mlruns.db" and s.config.tracking.experiment == "ablation"
    assert len({s.run_key for s in specs}) == len({s.label for s in specs}) == 18


def health_preset(cfg: RunConfig) -> str:
    health = cfg.health  # a HealthConfig (or, in older configs, a plain dict)
    return health["preset"] if isinstance(health, dict) else health.preset


def test_ablation_precedence_and_health():
    by_variant = {s.variant: s.config for s in expand(load_study(DATA / "ablation.yaml"))}
    # study health (off) beats base health (default); the dapo variant's health beats both
    assert health_preset(by_variant["grpo"]) == "off"
    assert health_preset(by_variant["dapo"]) == "strict"
    # a preset fills unset fields; an explicit value in the variant wins over the preset
    assert by_variant["dapo"].algorithm.clip_high == 0.3
    assert by_variant["dapo"].algorithm.agg_mode == "token-mean"
    assert by_variant["dr_grpo"].algorithm.estimator == "dr_grpo"


def test_precedence_grid_over_variant_over_base():
    st = study(
        variants={"a": {"learner": {"lr": 2e-4}, "rollout": {"steps": 5}}, "b": {}},
        grid={"learner.lr": [5e-4]},
    )
    assert {s.variant: s.config.learner.lr for s in expand(st)} == {"a": 5e-4, "b": 5e-4}
    st = study(variants={"a": {"learner": {"lr": 2e-4}}, "b": {}})
    assert {s.variant: s.config.learner.lr for s in expand(st)} == {"a": 2e-4, "b": 1e-4}


def test_variant_is_a_deep_merge():
    base = {**BASE, "learner": {"lr": 1e-4, "weight_decay": 0.1}, "rollout": {"steps": 7, "group_size": 4}}
    st = validate_study(
        {"name": "t", "base": base, "variants": {"v": {"learner": {"lr": 3e-4}, "rollout": {"steps": 9}}}}
    )
    (spec,) = expand(st)
    assert (spec.config.learner.lr, spec.config.learner.weight_decay) == (3e-4, 0.1)  # sibling kept
    assert (spec.config.rollout.steps, spec.config.rollout.group_size) == (9, 4)
    assert st.base["learner"]["lr"] == 1e-4  # inputs untouched


def test_grid_on_a_section_value_and_nested_default():
    st = study(grid={"rollout": [{"steps": 3}, {"steps": 4, "group_size": 2}]})
    specs = expand(st)
    assert [(s.config.rollout.steps, s.config.rollout.group_size) for s in specs] == [(3, 8), (4, 2)]


def test_cartesian_product_of_two_axes_last_axis_fastest():
    st = study(grid={"learner.lr": [1e-4, 2e-4, 3e-4], "rollout.group_size": [2, 4]}, seeds=[0, 1])
    specs = expand(st)
    assert len(specs) == 12
    want = list(itertools.product([1e-4, 2e-4, 3e-4], [2, 4], [0, 1]))
    assert [(s.grid["learner.lr"], s.grid["rollout.group_size"], s.seed) for s in specs] == want


def test_zip_is_paired_not_crossed():
    st = study(zip={"sampler.dtype": ["float32", "float16", "bfloat16"], "algorithm.correction": [None, "tis", "mis"]})
    assert [(s.config.sampler.dtype, s.config.algorithm.correction) for s in expand(st)] == [
        ("float32", None),
        ("float16", "tis"),
        ("bfloat16", "mis"),
    ]


def test_exclude_matches_all_keys_of_an_entry():
    st = study(
        variants={"a": {}, "b": {"algorithm": {"preset": "dapo"}}},
        grid={"learner.lr": [1e-4, 2e-4]},
        seeds=[0, 1],
        exclude=[{"variant": "b", "seed": 1}, {"learner.lr": 0.0002, "variant": "a"}],
    )
    labels = [s.label for s in expand(st)]
    assert labels == [
        "a/lr=0.0001/seed=0",
        "a/lr=0.0001/seed=1",
        "b/lr=0.0001/seed=0",
        "b/lr=0.0002/seed=0",
    ]


def test_exclude_can_match_resolved_values_not_on_an_axis():
    # clip_high comes from the dapo preset: exclusion looks at the resolved config
    st = study(
        variants={"grpo": {}, "dapo": {"algorithm": {"preset": "dapo"}}},
        seeds=[0],
        exclude=[{"algorithm.clip_high": 0.28}],
    )
    assert [s.variant for s in expand(st)] == ["grpo"]


def test_exclude_drops_invalid_combinations_without_error():
    # float16 sampling with an unknown correction would be invalid; the exclusion removes it first
    st = study(
        zip={"sampler.dtype": ["float32", "float16"], "algorithm.correction": ["tis", "nope"]},
        exclude=[{"sampler.dtype": "float16"}],
    )
    assert [s.config.algorithm.correction for s in expand(st)] == ["tis"]


def test_default_variant_and_seed():
    (spec,) = expand(study())
    assert (spec.variant, spec.seed, spec.label) == ("base", 0, "base/seed=0")
    st = study(variants={"grpo": None})  # `grpo:` with nothing after it
    assert [s.variant for s in expand(st)] == ["grpo"]


def test_label_uses_full_path_when_last_names_clash():
    st = study(grid={"model.tiny.seed": [1], "task.seed": [2, 3]})
    assert expand(st)[0].label == "base/model.tiny.seed=1/task.seed=2/seed=0"


def test_duplicate_run_key_names_both_labels():
    with pytest.raises(StudyError) as err:
        study(variants={"a": {}, "b": {"learner": {"lr": 1e-4}}})
    assert "'a/seed=0' and 'b/seed=0' have the same resolved config" in str(err.value)


def test_explicit_experiment_wins():
    (spec,) = expand(study(tracking={"experiment": "elsewhere"}))
    assert spec.config.tracking.experiment == "elsewhere"


def test_runspec_is_frozen_and_hashable():
    (spec,) = expand(study())
    assert isinstance(spec, RunSpec)
    with pytest.raises(AttributeError):
        spec.seed = 3  # type: ignore[misc]  # the point: a frozen RunSpec refuses the assignment
    assert {spec: 1}[spec] == 1
    a, b = expand(study(seeds=[0, 1]))
    a.config.learner.lr = 5e-4  # configs of different seeds share nothing
    assert b.config.learner.lr == 1e-4


def test_yaml_dialect(write):
    path = write(
        "d.yaml",
        """
        name: d
        base: {model: {builtin: tiny}, learner: {lr: 3e-5}}
        health: {preset: off}
        grid: {rollout.group_size: [2]}
        """,
    )
    (spec,) = expand(load_study(path))
    assert spec.config.learner.lr == 3e-5 and health_preset(spec.config) == "off"


def test_yaml_anchors_and_merge_keys(write):
    path = write(
        "m.yaml",
        """
        name: m
        base: {model: {builtin: tiny}}
        variants:
          a: &common
            learner: {lr: 2.0e-4}
            rollout: {steps: 3}
          b:
            <<: *common
            rollout: {steps: 4}
        """,
    )
    specs = expand(load_study(path))
    assert [(s.config.learner.lr, s.config.rollout.steps) for s in specs] == [(2e-4, 3), (2e-4, 4)]
