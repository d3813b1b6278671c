"""``replicate: {cold_start: k}``: k independent cold starts per arm, the seeds nested in each; k = 1 (the
default) leaves every run, run key and plan as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.execution.plan import plan_rows
from workbench.models.tiny import cold_start_seed, tiny_cache_key
from workbench.study import StudyError, arm_of_label, expand, load_study, validate_study

from .conftest import DATA

STUDIES = sorted((Path(__file__).parents[2] / "studies").glob("*.yaml"))
#: label and run_key of every run of every shipped study, written by the code before replicate: existed (studies
#: added later, engines_trl and staleness, by the code that added them; spurious_rewards's two *_noclip arms added
#: 2026-11-29 beside its unchanged keys): a changed run key fails here
SHIPPED = json.loads((DATA / "shipped_run_keys.json").read_text())
BASE = {"model": {"builtin": "tiny"}, "learner": {"lr": 1e-4}, "algorithm": {"preset": "grpo"}}


def with_replicate(study, k: int):
    out = study.model_copy(update={"replicate": {"cold_start": k}})
    out._origin = study._origin
    return out


@pytest.mark.parametrize("path", STUDIES, ids=[p.name for p in STUDIES])
def test_shipped_studies_keep_their_runs(path):
    """Every shipped study's runs keep their labels and run keys; the ones that replicate keep them at cold
    start 0 (the model they were run on), so a re-run adds cold starts 1.. and reuses the runs it has."""
    study = load_study(path)
    specs = expand(study)
    expected = [tuple(x) for x in SHIPPED[path.name]]
    if study.replicate.get("cold_start", 1) == 1:
        assert [(s.label, s.run_key) for s in specs] == expected
        once = expand(with_replicate(study, 1))  # written out, k = 1 is the default: the same plan, byte for byte
        assert json.dumps(plan_rows(once, {})) == json.dumps(plan_rows(specs, {}))
        assert all(s.cold_start is None and "model.cold_start" not in s.config.flat() for s in specs)
    else:
        first = [(s.label.replace("/cold_start=0/", "/"), s.run_key) for s in specs if s.cold_start == 0]
        golden = dict(expected)
        assert first and all(golden.get(label) == key for label, key in first)  # the runs made before, reused
        assert len({s.run_key for s in specs}) == len(specs)


def test_cold_starts_nest_the_seeds():
    specs = expand(
        validate_study(
            {
                "name": "t",
                "base": BASE,
                "variants": {"a": {}, "b": {"learner": {"lr": 3e-4}}},
                "seeds": [0, 1],
                "replicate": {"cold_start": 2},
            }
        )
    )
    assert [s.label for s in specs] == [
        "a/cold_start=0/seed=0",
        "a/cold_start=0/seed=1",
        "a/cold_start=1/seed=0",
        "a/cold_start=1/seed=1",
        "b/cold_start=0/seed=0",
        "b/cold_start=0/seed=1",
        "b/cold_start=1/seed=0",
        "b/cold_start=1/seed=1",
    ]
    assert [s.cold_start for s in specs] == [0, 0, 1, 1] * 2
    assert [s.config.model.cold_start for s in specs] == [0, 0, 1, 1] * 2
    assert [s.seed for s in specs] == [0, 1] * 4
    assert len({s.run_key for s in specs}) == 8  # the index enters the key
    assert {arm_of_label(s.label) for s in specs} == {"a", "b"}  # a cold start is a replicate, not an arm
    assert [r["cold_start"] for r in plan_rows(specs, {})] == [0, 0, 1, 1] * 2
    # cold start 0 is the run the study had without replicate: same key
    alone = expand(validate_study({"name": "t", "base": BASE, "variants": {"a": {}}, "seeds": [0, 1]}))
    assert [s.run_key for s in alone] == [s.run_key for s in specs[:2]]


def test_arm_of_label():
    assert arm_of_label("dapo/lr=3e-05/cold_start=12/seed=4") == "dapo/lr=3e-05"
    assert arm_of_label("dapo/lr=3e-05/seed=4") == "dapo/lr=3e-05"
    assert arm_of_label("dapo/seed=1") == "dapo"


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"replicate": {"cold_start": 0}}, "replicate.cold_start: expected an integer >= 1"),
        ({"replicate": {"cold_start": "two"}}, "replicate.cold_start: expected an integer >= 1"),
        ({"replicate": {"cold_starts": 2}}, "replicate.cold_starts: unknown"),
        (
            {"base": {**BASE, "model": {"builtin": "tiny", "cold_start": 1}}},
            "base.model.cold_start: the cold-start index",
        ),
        ({"grid": {"model.cold_start": [0, 1]}}, "grid.model.cold_start: model.cold_start is set per run"),
        ({"variants": {"v": {"model": {"cold_start": 2}}}}, "variants.v.model.cold_start: the cold-start index"),
        (
            {"replicate": {"cold_start": 3}, "compare": {"sequential": {"looks": [3, 6]}}},
            "replicate.cold_start: compare.sequential adds seeds at each look",
        ),
    ],
)
def test_bad_replicate_settings(fields, line):
    with pytest.raises(StudyError) as err:
        expand(validate_study({"name": "t", "base": BASE, **fields}))
    assert line in str(err.value)


def test_a_model_path_without_a_priming_stage_has_no_cold_start_to_replicate(tmp_path):
    base = {"model": {"path": str(tmp_path)}, "algorithm": {"preset": "grpo"}}
    with pytest.raises(StudyError, match=r"replicate\.cold_start: base: model\.cold_start: model\.path has no cold"):
        expand(validate_study({"name": "t", "base": base, "replicate": {"cold_start": 2}}))
    ok = expand(validate_study({"name": "t", "base": base}))  # one cold start: nothing to replicate, nothing refused
    assert len(ok) == 1


def test_each_cold_start_has_its_own_seed_and_cached_model():
    assert cold_start_seed(7, 0) == 7  # the cold start every earlier run used
    seeds = {cold_start_seed(s, i) for s in (0, 1) for i in range(4)}
    assert len(seeds) == 8  # no index of one seed repeats another's
    cfg = RunConfig.model_validate({"model": {"builtin": "tiny"}})
    keys = [tiny_cache_key(cfg.model.model_copy(update={"cold_start": i}), cfg.task) for i in range(3)]
    assert len(set(keys)) == 3
    assert keys[0] == tiny_cache_key(cfg.model, cfg.task)


def test_two_cold_starts_are_two_models():
    """The built model itself differs by index (init and SFT order), and index 0 is the model of the plain config."""
    from workbench.models.tiny import build_tiny_model
    from workbench.tasks import build_task

    cfg = RunConfig.model_validate(
        {
            "model": {
                "builtin": "tiny",
                "tiny": {
                    "hidden_size": 16,
                    "num_layers": 1,
                    "num_heads": 2,
                    "intermediate_size": 16,
                    "sft_max_steps": 2,
                    "sft_batch_size": 4,
                    "sft_check_every": 1000,
                },
            }
        }
    )

    def weights(index: int):
        model, _, _ = build_tiny_model(
            cfg.model.model_copy(update={"cold_start": index}), build_task(cfg.task), progress=False
        )
        return model.model.embed_tokens.weight.detach().clone()

    plain = build_tiny_model(cfg.model, build_task(cfg.task), progress=False)[0].model.embed_tokens.weight
    w0, w1 = weights(0), weights(1)
    assert bool((w0 == plain).all())  # bit for bit: the same seeds, the same operations
    assert not bool((w0 == w1).all())


def test_only_picks_one_cold_start():
    from workbench.analysis.selection import filter_specs

    specs = expand(validate_study({"name": "t", "base": BASE, "seeds": [0, 1], "replicate": {"cold_start": 3}}))
    assert [s.label for s in filter_specs(specs, "cold_start=2")] == [
        "base/cold_start=2/seed=0",
        "base/cold_start=2/seed=1",
    ]
