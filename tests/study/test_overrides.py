"""`--set a.b.c=value` overrides on studies, run configs and plain dicts."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.study import StudyError, apply_overrides, expand, load_study, parse_override

from .conftest import DATA


def test_parse_override_values_are_yaml():
    assert parse_override("learner.lr=3e-4") == (["learner", "lr"], 3e-4)
    assert parse_override("seeds=[0, 1]") == (["seeds"], [0, 1])
    assert parse_override("health.preset=off") == (["health", "preset"], "off")
    assert parse_override("algorithm.correction=null") == (["algorithm", "correction"], None)
    assert parse_override("algorithm.correction=") == (["algorithm", "correction"], None)
    assert parse_override("name=a=b") == (["name"], "a=b")


@pytest.mark.parametrize(
    "text,message",
    [
        ("learner.lr", "(--set learner.lr): expected KEY=VALUE, e.g. learner.lr=3e-4"),
        ("=3", "(--set =3): expected KEY=VALUE, e.g. learner.lr=3e-4"),
        ("learner..lr=3", "(--set learner..lr=3): malformed key 'learner..lr': expected dotted names like learner.lr"),
        ("x=[1,", "(--set x=[1,): invalid YAML value '[1,': ..."),
    ],
)
def test_parse_override_errors(text, message):
    with pytest.raises(StudyError) as err:
        parse_override(text)
    if message.endswith("..."):
        assert str(err.value).startswith(message[:-3])
    else:
        assert str(err.value) == message


def test_config_dict_overrides_are_deep_and_pure():
    cfg = {"learner": {"lr": 1e-4, "dtype": "float32"}}
    out = apply_overrides(cfg, ["learner.lr=3e-4", "sampler.backend=hf"])
    assert out == {"learner": {"lr": 3e-4, "dtype": "float32"}, "sampler": {"backend": "hf"}}
    assert cfg == {"learner": {"lr": 1e-4, "dtype": "float32"}}


def test_run_config_overrides_validate():
    cfg = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    assert apply_overrides(cfg, ["rollout.steps=5"]).rollout.steps == 5
    with pytest.raises(StudyError, match=r"rollout.steps: must be >= 1, got 0"):
        apply_overrides(cfg, ["rollout.steps=0"])


def test_setting_through_a_value_is_an_error():
    with pytest.raises(StudyError, match="learner.lr is 0.0001, not a mapping"):
        apply_overrides({"learner": {"lr": 1e-4}}, ["learner.lr.x=1"])


def test_study_overrides_win_over_base_and_variants():
    study = load_study(DATA / "ablation.yaml")
    out = apply_overrides(study, ["algorithm.clip_high=0.25", "rollout.steps=5", "seeds=[3]"])
    specs = expand(out)
    assert {s.config.algorithm.clip_high for s in specs} == {0.25}  # dapo's own 0.3 overridden too
    assert {s.config.rollout.steps for s in specs} == {5}
    assert {s.seed for s in specs} == {3}
    assert expand(study)[0].config.rollout.steps == 100  # the original is untouched


def test_study_overrides_of_study_fields():
    study = load_study(DATA / "ablation.yaml")
    out = apply_overrides(
        study,
        [
            "grid.learner.lr=[2e-4]",
            "variants.dr_grpo.learner.weight_decay=0.1",
            "health.preset=strict",
            "tracking.experiment=elsewhere",
            "exclude=[]",
        ],
    )
    specs = expand(out)
    assert len(specs) == 3 * 2 * 2 and {s.grid["learner.lr"] for s in specs} == {2e-4}
    assert {s.config.learner.weight_decay for s in specs if s.variant == "dr_grpo"} == {0.1}
    assert {s.config.tracking.experiment for s in specs} == {"elsewhere"}


def test_study_override_errors_name_the_override_and_keep_file_lines():
    study = load_study(DATA / "ablation.yaml")
    with pytest.raises(StudyError) as err:
        apply_overrides(study, ["learner.lr=fast"])
    assert (
        str(err.value) == "(--set learner.lr=fast) learner.lr: 'learner.lr' is a grid axis of this study; "
        "set its values with --set grid.learner.lr=[...]"
    )
    with pytest.raises(StudyError) as err:
        apply_overrides(study, ["rollout.steps=fast", "lr=1"])
    assert str(err.value).splitlines() == [
        "(--set lr=1) lr: unknown run-config path 'lr': no field 'lr'; did you mean 'learner.lr'?",
    ]
    with pytest.raises(StudyError) as err:
        apply_overrides(study, ["rollout.steps=fast"])
    assert str(err.value) == "(--set rollout.steps=fast) base.rollout.steps: expected an integer, got 'fast'"
    with pytest.raises(StudyError) as err:
        apply_overrides(study, ["variants.dapo.algorithm.clip_hi=0.3"])
    assert str(err.value) == (
        "(--set variants.dapo.algorithm.clip_hi=0.3) variants.dapo.algorithm.clip_hi: unknown field; "
        "did you mean 'clip_high'?"
    )


def test_study_dict_overrides():
    data = {"name": "t", "base": {"learner": {"lr": 1e-4}}, "variants": {"a": {"learner": {"lr": 2e-4}}, "b": {}}}
    out = apply_overrides(data, ["learner.lr=5e-4", "grid.rollout.steps=[1, 2]"])
    assert out["base"]["learner"]["lr"] == 5e-4 and out["variants"]["a"]["learner"]["lr"] == 5e-4
    assert out["variants"]["b"] == {} and out["grid"] == {"rollout.steps": [1, 2]}
    assert data["base"]["learner"]["lr"] == 1e-4
