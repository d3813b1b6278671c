"""The one "did you mean" (workbench/errors.py): what counts as close, and its wording."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from workbench.errors import closest_match, did_you_mean, suggestion_hint
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
    others = [path.relative_to(PACKAGE_ROOT.parent) for path in PACKAGE_ROOT.rglob("*.py")
              if path.name != "errors.py" and "get_close_matches" in path.read_text()]
    assert others == [], f"use workbench.errors.closest_match / did_you_mean instead: {others}"
