"""Presets as data with a citation per value; `workbench algorithms`. (docs/algorithms.md and the README's
preset table are generated from the same data: tests/test_generated_docs.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.algorithms.presets import PAPERS, PRESET_INFO, PRESET_LIST, PRESETS
from workbench.cli.preset_docs import format_value
from workbench.config import AlgorithmConfig

ROOT = Path(__file__).parents[2]


def workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", *args],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "80"},
        timeout=120,
    )


def test_settings_are_shown_as_a_study_writes_them():
    assert [format_value(v) for v in (0.28, 3e-4, ["overlong"], {"temperature_neg": 2.0}, "tis")] == [
        "0.28",
        "0.0003",
        "[overlong]",
        "{temperature_neg: 2}",
        "tis",
    ]


@pytest.mark.parametrize("preset", PRESET_LIST, ids=lambda p: p.name)
def test_every_preset_value_has_a_paper_and_resolves(preset):
    assert preset.paper in PAPERS and preset.settings
    for key, setting in preset.settings.items():
        assert setting.paper in PAPERS, key
        assert setting.paper.url.startswith("https://"), key
        assert key in AlgorithmConfig.model_fields, key
    resolved = AlgorithmConfig(preset=preset.name)
    for key, setting in preset.settings.items():
        assert getattr(resolved, key) == setting.value, key  # a preset value is what a run gets
    assert PRESETS[preset.name] == preset.values()


def test_olmo3_is_the_recipe_of_the_grpo_plus_plus_overview():
    """Zero-gradient filtering + active sampling, token-level loss, no KL, clip-higher, TIS, no std."""
    a = AlgorithmConfig(preset="olmo3")
    assert a.batch_filter == "zero_std" and a.max_sampling_rounds > 1  # filter, then refill
    assert a.agg_mode == "token-mean"
    assert a.kl_coef == 0.0
    assert a.clip_high > a.clip_low
    assert a.correction == "tis"
    assert a.estimator == "dr_grpo"  # r - mean_g: no std division
    assert PRESET_INFO["olmo3"].settings["correction"].paper.short == "TIS"


@pytest.mark.slow
def test_algorithms_lists_every_preset_with_its_resolved_settings():
    result = workbench("algorithms")  # stdout is a pipe: one tab-separated line per preset
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[:5] == ["preset", "estimator", "loss", "aggregation", "clip (low, high)"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert list(rows) == list(PRESETS) == [preset.name for preset in PRESET_LIST]  # every preset, in order
    assert rows["olmo3"][1:5] == ["dr_grpo", "ppo_clip", "token-mean", "0.2, 0.28"]
    assert rows["gspo"][4] == "0.0003, 0.0004"


@pytest.mark.slow
def test_show_dapo_gives_clip_high_with_its_citation():
    result = workbench("algorithms", "show", "dapo")
    assert result.returncode == 0, result.stderr
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in result.stdout.splitlines()}
    assert rows["clip_high"] == ["0.28", "DAPO §3.1"]
    assert rows["batch_filter"] == ["zero_std", "DAPO §3.2"]
    assert rows["kl_coef"] == ["0", "default (not set by the preset)"]


def test_show_unknown_preset_is_one_line_and_exit_2():
    result = workbench("algorithms", "show", "dapoo")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "did you mean 'dapo'" in result.stderr


def test_a_missing_field_takes_the_preset_value_and_an_explicit_null_switches_it_off():
    """``batch_filter: null`` under ``preset: dapo`` is DAPO without dynamic sampling (a study's
    variant must be able to remove one component of a preset), and a resolved config read back
    resolves to itself."""
    full = AlgorithmConfig(preset="dapo")
    assert full.batch_filter == "zero_std" and full.token_filters == ["overlong"]
    ablated = AlgorithmConfig.model_validate({"preset": "dapo", "batch_filter": None, "token_filters": []})
    assert ablated.batch_filter is None and ablated.filter_on is None and ablated.token_filters == []
    assert ablated.clip_high == full.clip_high == 0.28  # the other components stay DAPO's
    for config in (full, ablated):
        assert AlgorithmConfig.model_validate(config.model_dump(mode="json")) == config
