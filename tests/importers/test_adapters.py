"""Contract suite over every registered adapter, and hand-computed conversions."""

from __future__ import annotations

import json
import math

import pytest

from workbench.importers import ADAPTERS, SOURCE_PREFIX, ImportSourceError
from workbench.importers.adapters import Adapter, MetricMapping
from workbench.metrics import CATALOGUE

CANONICAL = {m.name for m in CATALOGUE}


@pytest.mark.parametrize("framework", ADAPTERS.names())
def test_every_mapping_targets_a_canonical_name_and_cites_its_source(framework):
    adapter = ADAPTERS.get(framework)
    assert adapter.framework == framework and adapter.version
    for m in adapter.mappings:
        assert m.defined_in, m.source
        if m.canonical is None:  # kept apart on purpose: the caveat must say why
            assert m.caveat, m.source
        else:
            assert m.canonical in CANONICAL, (m.source, m.canonical)
            assert not m.canonical.startswith(SOURCE_PREFIX)


@pytest.mark.parametrize("framework", ADAPTERS.names())
def test_unmapped_metrics_are_kept_under_source(framework):
    adapter = ADAPTERS.get(framework)
    out = adapter.convert_step({"some/new_metric": 2.5, "nan_metric": math.nan})
    assert out["source/some/new_metric"] == 2.5
    assert math.isnan(out["source/nan_metric"])  # a NaN point is kept, not dropped


def test_trl_step_converted_by_hand():
    out = ADAPTERS.get("trl").convert_step(
        {
            "reward": 0.25,
            "entropy": 1.5,
            "completions/mean_length": 7.0,
            "clip_ratio/low_mean": 0.125,
            "grad_norm": 3.0,
            "learning_rate": 1e-4,
            "cispo_clip_ratio": 0.5,
        }
    )
    assert out == {
        "reward/mean": 0.25,
        "entropy/mean": 1.5,
        "length/mean": 7.0,
        "clip/frac_low": 0.125,
        "grad/norm": 3.0,
        "source/learning_rate": 1e-4,
        "source/cispo_clip_ratio": 0.5,
    }


def test_an_adapter_cannot_map_two_sources_onto_one_name():
    with pytest.raises(ValueError, match="several source metrics"):
        Adapter(
            "x",
            "1",
            (MetricMapping("a", "reward/mean", "f.py"), MetricMapping("b", "reward/mean", "f.py")),
            file_reader=lambda p: [],
            file_kind="x",
        )


def test_trainer_state_merges_entries_of_one_step(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text(
        json.dumps(
            {
                "log_history": [
                    {"step": 2, "loss": 0.5, "entropy": None},  # TRL logs None when a window had no valid value
                    {"step": 1, "loss": 0.75},
                    {"step": 2, "train_runtime": 9.0, "note": "text is not a metric"},
                ]
            }
        )
    )
    steps = ADAPTERS.get("trl").read_file(str(path))
    assert [s for s, _ in steps] == [1, 2]
    assert steps[0][1] == {"loss": 0.75}
    two = steps[1][1]
    assert two["loss"] == 0.5 and two["train_runtime"] == 9.0 and math.isnan(two["entropy"])
    assert "note" not in two


def test_missing_file_is_bad_input(tmp_path):
    with pytest.raises(ImportSourceError, match="no such file"):
        ADAPTERS.get("trl").read_file(str(tmp_path / "absent.json"))


@pytest.mark.parametrize("framework", ADAPTERS.names())
def test_docs_show_each_adapter_table_as_registered(framework):
    from pathlib import Path

    from workbench.importers.adapters import markdown_table

    docs = (Path(__file__).parents[2] / "docs" / "import.md").read_text(encoding="utf-8")
    assert markdown_table(ADAPTERS.get(framework)) in docs, "regenerate the table in docs/import.md"


def test_trl_vllm_importance_sampling_keys_converted_by_hand():
    """TRL's GRPOTrainer with vllm_importance_sampling_correction logs |Δ logp| and the applied IS weight under
    sampling/*: they land on the flight recorder's names; the min/max of the applied weight have no
    canonical counterpart (the workbench's are of the raw ratio) and stay under source/."""
    out = ADAPTERS.get("trl").convert_step(
        {
            "sampling/sampling_logp_difference/mean": 0.0125,
            "sampling/sampling_logp_difference/max": 0.75,
            "sampling/importance_sampling_ratio/mean": 0.98,
            "sampling/importance_sampling_ratio/min": 0.5,
            "sampling/importance_sampling_ratio/max": 2.0,
        }
    )
    assert out == {
        "mismatch/log_ratio_abs_mean": 0.0125,
        "mismatch/log_ratio_abs_max": 0.75,
        "mismatch/is_weight_mean": 0.98,
        "source/sampling/importance_sampling_ratio/min": 0.5,
        "source/sampling/importance_sampling_ratio/max": 2.0,
    }
