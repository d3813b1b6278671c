"""The one error reporter (workbench/errors.py): "did you mean" (what counts as close, its wording),
value formatting, the issue type and pydantic errors explained."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workbench.errors import (
    Issue,
    IssueError,
    closest_match,
    did_you_mean,
    explain_pydantic_error,
    format_path,
    pydantic_issues,
    show_value,
    suggest_and_list,
    suggest_or_list,
    suggestion_hint,
    unknown_message,
)
from workbench.registry import Registry

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "workbench"


def test_the_nearest_choice_is_suggested():
    # ratio("grop", "grpo") = 2·3/8 = 0.75 ≥ 0.6; ratio("grop", "dapo") = 2·1/8 = 0.25
    assert closest_match("grop", ["dapo", "grpo"]) == "grpo"
    assert did_you_mean("grop", ["dapo", "grpo"]) == "; did you mean 'grpo'?"


def test_nothing_close_gives_no_hint():
    # ratio("zzz", "grpo") = 0: below the 0.6 cutoff
    assert closest_match("zzz", ["grpo"]) is None
    assert did_you_mean("zzz", ["grpo"]) == ""
    assert suggestion_hint(None) == ""


def test_the_cutoff_is_difflibs_ratio_of_0_6():
    # ratio("abcde", "abcxy") = 2·3/10 = 0.6 (kept); ratio("abcde", "abxyz") = 2·2/10 = 0.4 (dropped)
    assert difflib.SequenceMatcher(None, "abcde", "abcxy").ratio() == pytest.approx(0.6)
    assert closest_match("abcde", ["abcxy"]) == "abcxy"
    assert closest_match("abcde", ["abxyz"]) is None


def test_non_string_words_are_compared_as_text():
    assert closest_match(12, ["123", "x"]) == "123"


def test_a_registry_lookup_uses_it():
    registry: Registry[int] = Registry("unit")
    registry.register("grpo")(1)
    with pytest.raises(ValueError, match=r"^unknown unit 'grop'; did you mean 'grpo'\? \(valid: grpo\)$"):
        registry.get("grop")


def test_did_you_mean_is_implemented_only_in_errors_py():
    others = [
        path.relative_to(PACKAGE_ROOT.parent)
        for path in PACKAGE_ROOT.rglob("*.py")
        if path.name != "errors.py" and "get_close_matches" in path.read_text()
    ]
    assert others == [], f"use workbench.errors.closest_match / did_you_mean instead: {others}"


def test_the_did_you_mean_wording_is_written_only_in_errors_py():
    others = [
        path.relative_to(PACKAGE_ROOT.parent)
        for path in PACKAGE_ROOT.rglob("*.py")
        if path.name != "errors.py" and "did you mean" in path.read_text()
    ]
    assert others == [], f"use workbench.errors (did_you_mean, suggest_or_list, suggest_and_list): {others}"


# --------------------------------------------------------------------------------------------
# The rest of the reporter: suggestions with the valid names, values, the issue type, pydantic
# --------------------------------------------------------------------------------------------


def test_suggest_or_list_lists_the_choices_only_without_a_hint():
    assert suggest_or_list("grop", ["dapo", "grpo"]) == "; did you mean 'grpo'?"
    assert suggest_or_list("zzz", ["dapo", "grpo"]) == " (valid: dapo, grpo)"
    assert suggest_or_list("zzz", []) == ""  # nothing to suggest, nothing to list


def test_suggest_and_list_always_lists_the_choices():
    assert suggest_and_list("grop", ["dapo", "grpo"]) == "; did you mean 'grpo'? (valid: dapo, grpo)"
    assert suggest_and_list("zzz", ["dapo", "grpo"]) == " (valid: dapo, grpo)"
    assert suggest_and_list("zzz", []) == " (valid: none)"
    assert suggest_and_list("zzz", [], none="no parameters") == " (valid: no parameters)"


def test_unknown_message_sorts_the_choices():
    # ratio("lrr", "lr") = 2·2/5 = 0.8
    assert unknown_message("lrr", ["lr", "betas"]) == "unknown field; did you mean 'lr'?"
    assert unknown_message("zzz", ["b", "a"], "variant") == "unknown variant (valid: a, b)"
    assert unknown_message("zzz", []) == "unknown field"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        ("off", "'off'"),
        (1e-4, "0.0001"),
        (3, "3"),
        ([1, "x", None], '[1, "x", null]'),
        ({"lr": 0.5}, '{"lr": 0.5}'),
    ],
)
def test_values_are_shown_as_written_in_yaml(value, shown):
    assert show_value(value) == shown


def test_long_values_are_cut_to_the_limit_with_an_ellipsis():
    assert show_value("x" * 58) == "'" + "x" * 58 + "'"  # 60 characters: kept whole
    cut = show_value("x" * 59)  # 61 characters: the first 57 and "..."
    assert cut == "'" + "x" * 56 + "..." and len(cut) == 60
    assert show_value(list(range(100)), limit=10) == "[0, 1, ..."


def test_a_path_writes_list_indices_in_brackets():
    assert format_path(("variants", "dapo", "reward", "shaping", 0, "name")) == "variants.dapo.reward.shaping[0].name"
    assert format_path(("grid", "learner.lr", 2)) == "grid.learner.lr[2]"
    assert format_path(("flags", True)) == "flags.True"  # a bool key is a key, not an index
    assert format_path(()) == ""


def test_an_issue_is_one_line_file_line_path_message():
    assert (
        str(Issue("expected a number, got 'x'", "base.learner.lr", "s.yaml", 3))
        == "s.yaml:3 base.learner.lr: expected a number, got 'x'"
    )
    assert str(Issue("invalid YAML: oops", "", "s.yaml", 3, 7)) == "s.yaml:3:7: invalid YAML: oops"
    assert str(Issue("no such study file", file="s.yaml")) == "s.yaml: no such study file"
    assert str(Issue("must be > 0, got 0", "lr")) == "lr: must be > 0, got 0"
    assert str(Issue("bad")) == "bad"


def test_an_issue_error_keeps_each_line_once_in_reading_order():
    err = IssueError(
        [
            Issue("x", "p", "b.yaml", 2),
            Issue("y", "q", "a.yaml", 9),
            Issue("z", "r", "b.yaml", 1),
            Issue("x", "p", "b.yaml", 2),  # the same base error, reported once per run: shown once
            Issue("w", "s", "b.yaml"),  # no line: after the file's numbered lines
        ]
    )
    assert isinstance(err, ValueError)
    assert err.lines == ["b.yaml:1 r: z", "b.yaml:2 p: x", "b.yaml s: w", "a.yaml:9 q: y"]
    assert str(err) == "\n".join(err.lines)


class _Learner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = Field(gt=0)
    steps: int = 1


class _Algorithm(BaseModel):
    preset: str = "grpo"

    @model_validator(mode="before")
    @classmethod
    def _known_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") not in (None, "grpo"):
            raise ValueError(f"unknown preset {data['preset']!r}")
        return data


class _Root(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    learner: _Learner
    algorithm: _Algorithm = _Algorithm()
    tags: dict[str, int] = {}


def _fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    return {(): list(_Root.model_fields), ("learner",): list(_Learner.model_fields)}.get(loc)


def test_a_pydantic_error_is_explained_at_its_path():
    with pytest.raises(ValidationError) as info:
        _Root.model_validate(
            {
                "learner": {"lr": -1, "stepz": 2},
                "algorithm": {"preset": "grop"},
                "tags": {1: 2, "ok": "many"},
            }
        )
    explained = dict(pydantic_issues(info.value, _fields_at, {"name": "the run's name"}))
    assert explained == {
        ("name",): "missing required field (the run's name)",
        ("learner", "lr"): "must be > 0, got -1",
        ("learner", "stepz"): "unknown field; did you mean 'steps'?",  # ratio("stepz", "steps") = 0.8
        # the validator's "unknown preset 'grop'" points at the key holding the name
        ("algorithm", "preset"): "unknown preset 'grop'",
        ("tags",): "keys must be strings, got 1",
        ("tags", "ok"): "expected an integer, got 'many'",
    }


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ({"type": "float_parsing", "loc": ("lr",), "msg": "", "input": "abc"}, "expected a number, got 'abc'"),
        (
            {"type": "less_than_equal", "loc": ("p",), "msg": "", "input": 2.5, "ctx": {"le": 1.0}},
            "must be <= 1, got 2.5",
        ),
        (
            {"type": "literal_error", "loc": ("d",), "msg": "", "input": 0, "ctx": {"expected": "'a' or 'b'"}},
            "expected 'a' or 'b', got 0",
        ),
        (
            {"type": "too_short", "loc": ("panels",), "msg": "", "input": [], "ctx": {"min_length": 1}},
            "must not be empty",
        ),
        ({"type": "missing", "loc": ("a", "b"), "msg": "", "input": {}}, "missing required field"),
        # anything else: pydantic's own text, lower-cased, on one line, with the value
        (
            {"type": "url_parsing", "loc": ("u",), "msg": "Input should be\na valid URL", "input": "x"},
            "input should be a valid URL, got 'x'",
        ),
    ],
)
def test_each_kind_of_pydantic_error_reads_as_a_sentence(error, message):
    assert explain_pydantic_error(error) == message


def test_debug_logs_follow_each_in_process_command(tmp_path, monkeypatch):
    """`--debug` shows the workbench's logs on stderr; the next command without it (a test's or a
    notebook's, in the same process) must not inherit that handler: it once did, and wrote to a closed
    stream of an earlier test's runner ("--- Logging error ---" in every later command's output)."""
    import logging

    from typer.testing import CliRunner

    from workbench.cli.main import app

    monkeypatch.chdir(tmp_path)
    # setenv, not delenv: delenv of an unset variable records nothing, and the "1" that --debug exports
    # below would then be restored after the test and leak into every later one
    monkeypatch.setenv("WORKBENCH_DEBUG", "0")

    def debug_handlers():
        return [h for h in logging.getLogger("workbench").handlers if getattr(h, "workbench_debug", False)]

    assert CliRunner().invoke(app, ["--debug", "algorithms"]).exit_code == 0
    assert len(debug_handlers()) == 1 and logging.getLogger("workbench").level == logging.DEBUG
    monkeypatch.setenv("WORKBENCH_DEBUG", "0")
    assert CliRunner().invoke(app, ["algorithms"]).exit_code == 0
    assert debug_handlers() == [] and logging.getLogger("workbench").level == logging.NOTSET
