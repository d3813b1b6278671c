"""Malformed studies: every error names FILE:LINE, the YAML path, and what would be right."""

from __future__ import annotations

import pytest

from workbench.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from workbench.algorithms.presets import PRESETS
from workbench.study import StudyError, load_study, validate_study

HEAD = """\
name: t
base:
  model: {builtin: tiny}
  learner: {lr: 1.0e-4}
  algorithm: {preset: grpo}
"""  # lines 1-5 of most cases below

# (id, files {name: text}, expected error lines; "..." at the end of a line = prefix match)
CASES = [
    ("missing-file", {}, ["x.yaml: no such study file"]),
    (
        "empty-file",
        {"x.yaml": "# only a comment\n"},
        ["x.yaml: empty study file: expected a mapping with at least 'name' and 'base'"],
    ),
    (
        "bad-yaml",
        {"x.yaml": "name: t\nbase:\n  model: {builtin: tiny\n  learner: {}\n"},
        ["x.yaml:4:10: invalid YAML: ..."],
    ),
    (
        "bad-yaml-tab",
        {"x.yaml": "name: t\nbase:\n\tmodel: {}\n"},
        ["x.yaml:3:1: invalid YAML: found character '\\t' that cannot start any token ..."],
    ),
    (
        "not-a-mapping",
        {"x.yaml": "- name: t\n"},
        ["x.yaml:1: a study file is a mapping of fields (name, base, variants, ...), got a list"],
    ),
    (
        "unknown-top-level",
        {"x.yaml": HEAD + "variant:\n  a: {}\n"},
        ["x.yaml:6 variant: unknown field; did you mean 'variants'?"],
    ),
    (
        "unknown-top-level-no-match",
        {"x.yaml": HEAD + "zzz: 1\n"},
        [
            "x.yaml:6 zzz: unknown field (valid: base, compare, description, exclude, execution, grid, health, "
            "include, name, replicate, search, seeds, tracking, variants, version, zip)"
        ],
    ),
    (
        "missing-name",
        {"x.yaml": "base: {model: {builtin: tiny}}\n"},
        [
            "x.yaml:1 name: missing required field (the study's name, also its MLflow experiment: "
            "letters, digits, '_', '-', '.')"
        ],
    ),
    (
        "bad-name",
        {"x.yaml": HEAD.replace("name: t", "name: my study!")},
        [
            "x.yaml:1 name: 'my study!' is not a safe MLflow experiment name: use letters, digits, '_', '-', '.' "
            "(at most 200), starting with a letter or digit, e.g. 'my-study'"
        ],
    ),
    (
        "version",
        {"x.yaml": "version: 2\n" + HEAD},
        ["x.yaml:1 version: unsupported study version 2; this workbench reads version 1"],
    ),
    (
        "unknown-base-section",
        {"x.yaml": HEAD + "  algo: {preset: dapo}\n"},
        ["x.yaml:6 base.algo: unknown field; did you mean 'algorithm'?"],
    ),
    (
        "unknown-base-field",
        {"x.yaml": HEAD + "  rollout:\n    group_sise: 4\n"},
        ["x.yaml:7 base.rollout.group_sise: unknown field; did you mean 'group_size'?"],
    ),
    (
        "unknown-variant-field",
        {"x.yaml": HEAD + "variants:\n  grpo: {}\n  dapo:\n    algorithm:\n      preset: dapo\n      clip_hi: 0.3\n"},
        ["x.yaml:11 variants.dapo.algorithm.clip_hi: unknown field; did you mean 'clip_high'?"],
    ),
    (
        "type-number",
        {"x.yaml": HEAD.replace("lr: 1.0e-4", "lr: fast")},
        ["x.yaml:4 base.learner.lr: expected a number, got 'fast'"],
    ),
    (
        "type-int-bound",
        {"x.yaml": HEAD + "  rollout: {group_size: 0}\n"},
        ["x.yaml:6 base.rollout.group_size: must be >= 1, got 0"],
    ),
    (
        "type-literal",
        {"x.yaml": HEAD + "variants:\n  half:\n    sampler: {dtype: float8}\n"},
        ["x.yaml:8 variants.half.sampler.dtype: expected 'float32', 'bfloat16' or 'float16', got 'float8'"],
    ),
    ("type-section", {"x.yaml": HEAD + "  rollout: 5\n"}, ["x.yaml:6 base.rollout: expected a mapping, got 5"]),
    (
        "model-one-source",
        {"x.yaml": HEAD + "variants:\n  local:\n    model: {path: /models/q}\n"},
        ["x.yaml:8 variants.local.model: model needs exactly one of 'builtin: tiny' or 'path: DIR'"],
    ),
    (
        "unknown-preset",
        {"x.yaml": HEAD + "variants:\n  d:\n    algorithm: {preset: dappo}\n"},
        [
            "x.yaml:8 variants.d.algorithm.preset: unknown preset 'dappo'; did you mean 'dapo'? "
            f"(valid: {', '.join(sorted(PRESETS))})"
        ],
    ),
    (
        "unknown-estimator",
        {"x.yaml": HEAD.replace("preset: grpo", "preset: grpo, estimator: rlo")},
        [f"x.yaml:5 base.algorithm.estimator: {ADVANTAGE_ESTIMATORS.unknown_message('rlo')}"],
    ),
    (
        "unknown-loss",
        {"x.yaml": HEAD + "grid:\n  algorithm.loss: [ppo_clip, ppo]\n"},
        [f"x.yaml:7 grid.algorithm.loss[1]: {POLICY_LOSSES.unknown_message('ppo')}"],
    ),
    (
        "grid-value-on-own-line",
        {"x.yaml": HEAD + "grid:\n  learner.lr:\n    - 1.0e-4\n    - -1\n"},
        ["x.yaml:9 grid.learner.lr[1]: must be > 0, got -1"],
    ),
    (
        "grid-not-a-list",
        {"x.yaml": HEAD + "grid:\n  learner.lr: 3.0e-4\n"},
        ["x.yaml:7 grid.learner.lr: expected a list, got 0.0003 (an axis is a list of values, e.g. [0.0003])"],
    ),
    (
        "grid-empty",
        {"x.yaml": HEAD + "grid:\n  learner.lr: []\n"},
        ["x.yaml:7 grid.learner.lr: empty list: an axis needs at least one value (a study with no runs is an error)"],
    ),
    (
        "grid-unknown-path",
        {"x.yaml": HEAD + "grid:\n  algorithm.clip_hi: [0.2]\n"},
        [
            "x.yaml:7 grid.algorithm.clip_hi: unknown run-config path 'algorithm.clip_hi': no field 'clip_hi' "
            "in 'algorithm'; did you mean 'algorithm.clip_high'?"
        ],
    ),
    (
        "grid-short-path",
        {"x.yaml": HEAD + "grid:\n  lr: [0.1]\n"},
        ["x.yaml:7 grid.lr: unknown run-config path 'lr': no field 'lr'; did you mean 'learner.lr'?"],
    ),
    (
        "grid-into-a-value",
        {"x.yaml": HEAD + "grid:\n  learner.lr.max: [0.1]\n"},
        ["x.yaml:7 grid.learner.lr.max: 'learner.lr' is a single value, not a section; use 'learner.lr' itself"],
    ),
    (
        "grid-seed",
        {"x.yaml": HEAD + "grid:\n  seed: [1, 2]\n"},
        ["x.yaml:7 grid.seed: the seed is set per run by 'seeds:', not by a path"],
    ),
    (
        "grid-and-zip-same-axis",
        {"x.yaml": HEAD + "grid:\n  learner.lr: [0.1]\nzip:\n  learner.lr: [0.2]\n"},
        ["x.yaml:9 zip.learner.lr: 'learner.lr' is already an axis in 'grid'; an axis appears once"],
    ),
    (
        "zip-unequal",
        {"x.yaml": HEAD + "zip:\n  sampler.dtype: [float32, float16]\n  algorithm.correction: [tis]\n"},
        [
            "x.yaml:6 zip: zip lists must have equal lengths (they are paired); got sampler.dtype: 2, "
            "algorithm.correction: 1"
        ],
    ),
    (
        "duplicate-variant",
        {"x.yaml": HEAD + "variants:\n  dapo: {}\n  grpo: {}\n  dapo: {algorithm: {preset: dapo}}\n"},
        ["x.yaml:9 variants.dapo: duplicate key 'dapo' (first written at line 7); a mapping's keys must be unique"],
    ),
    (
        "variant-not-identifier",
        {"x.yaml": HEAD + "variants:\n  dr-grpo: {}\n"},
        [
            "x.yaml:7 variants.dr-grpo: variant name 'dr-grpo' is not an identifier (letters, digits, '_'; "
            "not starting with a digit), e.g. 'dr_grpo'"
        ],
    ),
    (
        "variants-empty",
        {"x.yaml": HEAD + "variants: {}\n"},
        ["x.yaml:6 variants: no variants; omit 'variants:' for a single variant named 'base'"],
    ),
    (
        "variant-not-mapping",
        {"x.yaml": HEAD + "variants:\n  a: dapo\n"},
        ["x.yaml:7 variants.a: expected a mapping, got 'dapo'"],
    ),
    (
        "seeds-type",
        {"x.yaml": HEAD + "seeds:\n  - 0\n  - one\n"},
        ["x.yaml:8 seeds[1]: expected an integer, got 'one'"],
    ),
    ("seeds-duplicate", {"x.yaml": HEAD + "seeds: [0, 1, 0]\n"}, ["x.yaml:6 seeds[2]: seed 0 appears twice"]),
    (
        "seed-in-base",
        {"x.yaml": HEAD + "  seed: 3\n"},
        ["x.yaml:6 base.seed: the seed is set per run by the study's 'seeds:' list; remove it here"],
    ),
    (
        "exclude-unknown-variant",
        {
            "x.yaml": HEAD + "variants: {grpo: {}, dapo: {algorithm: {preset: dapo}}}\n"
            "exclude:\n  - {variant: dappo, seed: 0}\n"
        },
        ["x.yaml:8 exclude[0].variant: unknown variant 'dappo'; did you mean 'dapo'?"],
    ),
    (
        "exclude-unknown-path",
        {"x.yaml": HEAD + "exclude:\n  - {learner.lrr: 0.1}\n"},
        [
            "x.yaml:7 exclude[0].learner.lrr: unknown run-config path 'learner.lrr': no field 'lrr' in 'learner'; "
            "did you mean 'learner.lr'? (exclude keys are 'variant', 'seed' or run-config paths)"
        ],
    ),
    (
        "everything-excluded",
        {"x.yaml": HEAD + "exclude:\n  - {seed: 0}\n"},
        ["x.yaml:6 exclude: the study expands to no runs"],
    ),
    (
        "health-unknown-rule",
        {"x.yaml": HEAD + "health:\n  rules:\n    entropy_colapse: {patience: 3}\n"},
        [
            "x.yaml:8 health.rules.entropy_colapse: unknown health rule 'entropy_colapse'; "
            "did you mean 'entropy_collapse'? ..."
        ],
    ),
    (
        "execution-parallel",
        {"x.yaml": HEAD + "execution: {parallel: 0}\n"},
        ["x.yaml:6 execution.parallel: expected a positive integer, got 0"],
    ),
    (
        "compare-baseline",
        {"x.yaml": HEAD + "variants: {grpo: {}}\ncompare: {baseline: grpoo}\n"},
        ["x.yaml:7 compare.baseline: unknown variant 'grpoo'; did you mean 'grpo'?"],
    ),
    (
        "compare-sequential-key",
        {"x.yaml": HEAD + "variants: {grpo: {}}\ncompare:\n  sequential: {every: 2}\n"},
        ["x.yaml:8 compare.sequential.every: unknown key 'every' (valid: looks, spending, futility, amendments)"],
    ),
    (
        "compare-sequential-futility",
        {"x.yaml": HEAD + "variants: {grpo: {}}\ncompare:\n  sequential: {futility: worse}\n"},
        ["x.yaml:8 compare.sequential.futility: expected improvement, worsening, difference or none, got 'worse'"],
    ),
    (
        "compare-sequential-looks",
        {"x.yaml": HEAD + "variants: {grpo: {}}\ncompare:\n  sequential: {looks: [5, 3]}\n"},
        [
            "x.yaml:8 compare.sequential.looks: expected increasing seed counts of at least 2, e.g. [3, 5, 7, 10], "
            "got [5, 3]"
        ],
    ),
    (
        "same-run-twice",
        {"x.yaml": HEAD + "variants:\n  a: {}\n  b: {learner: {lr: 1.0e-4}}\n"},
        ["x.yaml:8 variants.b: runs 'a/seed=0' and 'b/seed=0' have the same resolved config ..."],
    ),
    (
        "include-missing",
        {"x.yaml": "include: common.yaml\nname: t\n"},
        [
            "x.yaml:1 include: no such file 'common.yaml' (looked for common.yaml; "
            "include paths are relative to this file)"
        ],
    ),
    (
        "include-cycle",
        {
            "x.yaml": "include: sub/a.yaml\nname: t\n",
            "sub/a.yaml": "include: b.yaml\n",
            "sub/b.yaml": "name: b\ninclude: ../x.yaml\n",
        },
        ["sub/b.yaml:2 include: include cycle: x.yaml -> sub/a.yaml -> sub/b.yaml -> x.yaml"],
    ),
    ("include-self", {"x.yaml": "include: x.yaml\n"}, ["x.yaml:1 include: include cycle: x.yaml -> x.yaml"]),
    (
        "include-not-a-string",
        {"x.yaml": "include: [a.yaml]\n"},
        ['x.yaml:1 include: expected a path to another study file, got ["a.yaml"]'],
    ),
    (
        "error-in-included-file",
        {
            "x.yaml": "include: base.yaml\nname: t\n",
            "base.yaml": "base:\n  model: {builtin: tiny}\n  learner:\n    lr: slow\n",
        },
        ["base.yaml:4 base.learner.lr: expected a number, got 'slow'"],
    ),
    (
        "included-file-bad-yaml",
        {"x.yaml": "include: base.yaml\nname: t\n", "base.yaml": "base: [\n"},
        ["base.yaml:2:1: invalid YAML: ..."],
    ),
    (
        "override-in-child-wins-location",
        {
            "x.yaml": "include: base.yaml\nname: t\nbase:\n  learner: {lr: fast}\n",
            "base.yaml": "base:\n  model: {builtin: tiny}\n  learner: {lr: 0.1}\n",
        },
        ["x.yaml:4 base.learner.lr: expected a number, got 'fast'"],
    ),
    (
        "several-errors",
        {"x.yaml": HEAD.replace("lr: 1.0e-4", "lr: fast") + "seeds: []\nvariants:\n  a: {algo: {}}\n"},
        ["x.yaml:6 seeds: empty list: give at least one seed, e.g. [0]"],
    ),
]


def check(err: StudyError, expected: list[str]) -> None:
    lines = str(err).splitlines()
    assert len(lines) == len(expected), str(err)
    for got, want in zip(lines, expected, strict=True):
        if want.endswith("..."):
            assert got.startswith(want[:-3].rstrip(". ")), f"{got!r} does not start with {want[:-3]!r}"
        else:
            assert got == want


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed(write, files, expected):
    for name, text in files.items():
        write(name, text)
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    check(err.value, expected)
    assert isinstance(err.value, ValueError)
    assert all(str(i) == line for i, line in zip(err.value.issues, str(err.value).splitlines(), strict=True))


def test_table_has_at_least_15_kinds():
    assert len(CASES) >= 15


def test_all_errors_are_reported_not_just_the_first(write):
    write(
        "x.yaml",
        """
        name: t
        base:
          model: {builtin: tiny}
          learner: {lr: fast}
          algorithm: {preset: grpo}
        variants:
          a: {algo: {}}
          b:
            sampler: {dtype: float8}
        grid:
          rollout.group_siz: [4]
        """,
    )
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    check(
        err.value,
        [
            "x.yaml:11 grid.rollout.group_siz: unknown run-config path 'rollout.group_siz': no field 'group_siz' "
            "in 'rollout'; did you mean 'rollout.group_size'?",
        ],
    )
    path = write("y.yaml", open("x.yaml").read().replace("group_siz:", "group_size:"))  # noqa: SIM115 - a test's one read
    with pytest.raises(StudyError) as err:
        load_study(path)
    check(
        err.value,
        [
            "y.yaml:4 base.learner.lr: expected a number, got 'fast'",
            "y.yaml:7 variants.a.algo: unknown field; did you mean 'algorithm'?",
            "y.yaml:9 variants.b.sampler.dtype: expected 'float32', 'bfloat16' or 'float16', got 'float8'",
        ],
    )


def test_errors_without_a_file_still_name_the_path():
    with pytest.raises(StudyError) as err:
        validate_study(
            {"name": "t", "base": {"learner": {"lr": "fast"}}, "variants": {"x": {"algorithm": {"clip_hi": 1}}}}
        )
    assert str(err.value).splitlines() == [
        "base.learner.lr: expected a number, got 'fast'",
        "variants.x.algorithm.clip_hi: unknown field; did you mean 'clip_high'?",
    ]


def test_unknown_preset_does_not_hide_other_algorithm_errors(write):
    write("x.yaml", HEAD + "variants:\n  a:\n    algorithm: {preset: dappo, clip_hi: 0.3}\n")
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    lines = str(err.value).splitlines()
    assert lines[0].startswith("x.yaml:8 variants.a.algorithm.preset: unknown preset 'dappo'; did you mean 'dapo'?")
    assert lines[1] == "x.yaml:8 variants.a.algorithm.clip_hi: unknown field; did you mean 'clip_high'?"
    assert len(lines) == 2


def test_error_from_a_grid_value_inside_a_section(write):
    write("x.yaml", HEAD + "grid:\n  rollout:\n    - {steps: 3}\n    - {stepz: 4}\n")
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    assert str(err.value) == "x.yaml:9 grid.rollout[1].stepz: unknown field; did you mean 'steps'?"


def test_combination_error_points_at_what_varies(write):
    # hidden_size comes from base, num_heads from the grid: the grid value is what broke it
    text = HEAD.replace("{builtin: tiny}", "{builtin: tiny, tiny: {hidden_size: 96}}")
    write("x.yaml", text + "grid:\n  model.tiny.num_heads: [4, 5]\n")
    with pytest.raises(StudyError) as err:
        load_study("x.yaml")
    assert str(err.value) == "x.yaml:7 grid.model.tiny.num_heads[1]: hidden_size=96 must be divisible by num_heads=5"


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_study_through_the_cli_exits_2_and_writes_nothing(write, tmp_path, monkeypatch, files, expected):
    """What a user sees: the same lines, exit code 2, and no MLflow store created."""
    from typer.testing import CliRunner

    from workbench.cli.main import app

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name, text in files.items():
        write(name, text)
    result = CliRunner().invoke(app, ["run", "x.yaml", "--quiet"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    first = expected[0][:-3].rstrip(". ") if expected[0].endswith("...") else expected[0]
    assert first in " ".join(result.output.split()), result.output
    assert not (tmp_path / "mlflow.db").exists()
