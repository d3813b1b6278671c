"""SESOIs with a pedigree (issue 52): a study states beside each SESOI the measured size of the phenomenon an
"equivalent" would deny, the published effect scaled to this setting and whether the SESOI was set before any
data; `plan` and `compare` refuse an equivalence question whose SESOI is at least the phenomenon."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.analysis.comparison import smallest_effects
from workbench.cli.main import app
from workbench.errors import AnalysisError
from workbench.study import StudyError, load_study

ROOT = Path(__file__).resolve().parents[2]

STUDY = """name: s
base: {model: {builtin: tiny}}
variants: {a: {}, b: {algorithm: {preset: dr_grpo}}}
seeds: [0, 1, 2]
compare:
  baseline: a
  metrics: [final_length_ratio]
  sesoi: {final_length_ratio: SESOI}
  noise_sd: {final_length_ratio: 0.063}
  sesoi_pedigree:
    final_length_ratio: {phenomenon: 0.070, published: "incorrect responses grow longer (Liu et al. 2025)", set_before_data: false}
"""


@pytest.fixture(autouse=True)
def no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/none.db")  # `plan` reads no pilot from it


def plan(tmp_path: Path, sesoi: str):
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.replace("SESOI", sesoi))
    return study, CliRunner().invoke(app, ["plan", str(study)], catch_exceptions=False)


def test_plan_refuses_a_sesoi_at_least_the_size_of_the_phenomenon(tmp_path):
    """SESOI 0.1 against a measured ratio gap of 0.070 (dr_grpo_length_bias before issue 52): an "equivalent"
    there would not exclude the whole bias. One line, exit 2, naming the metric, the file and both numbers."""
    study, out = plan(tmp_path, "0.1")
    assert out.exit_code == 2
    lines = [x for x in out.output.splitlines() if x.strip()]
    assert len(lines) == 1, out.output
    assert str(study) in lines[0] and "compare.sesoi.final_length_ratio = 0.1" in lines[0]
    assert "phenomenon = 0.07" in lines[0]
    # equal is refused too: an interval inside ±phenomenon cannot exclude the phenomenon's own size
    assert plan(tmp_path, "0.07")[1].exit_code == 2


def test_plan_accepts_a_sesoi_below_the_phenomenon_and_prints_its_pedigree(tmp_path):
    _, out = plan(tmp_path, "0.023")
    assert out.exit_code == 0, out.output
    # 0.023 / 0.070 = 32.9%; the header says when the SESOI was set
    assert (
        "SESOI pedigree: 0.023 is 33% of the phenomenon it would deny (0.07, measured); set after data on this "
        "question were seen" in " ".join(out.output.split())
    )


def test_compare_refuses_it_too_and_a_command_line_override_is_checked_the_same_way(tmp_path):
    """`compare` resolves its SESOIs through the same function; --sesoi may not lift a SESOI past the phenomenon."""
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.replace("SESOI", "0.023"))
    compare = load_study(study).compare
    assert smallest_effects(compare, None, str(study)) == {"final_length_ratio": 0.023}
    with pytest.raises(AnalysisError, match=r"s\.yaml: compare\.sesoi\.final_length_ratio = 0\.08 is at least"):
        smallest_effects(compare, ["final_length_ratio=0.08"], str(study))


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        ("{phenomenon: -1, published: x, set_before_data: true}", "phenomenon", "positive number"),
        ("{phenomenon: 0.07, published: '', set_before_data: true}", "published", "in words"),
        ("{phenomenon: 0.07, published: x, set_before_data: maybe}", "set_before_data", "true or false"),
        ("{phenomenon: 0.07, published: x}", "final_length_ratio", "missing 'set_before_data'"),
        ("{phenomenon: 0.07, published: x, set_before_data: true, size: 2}", "size", "unknown"),
        ("0.07", "final_length_ratio", "expected {phenomenon"),
    ],
)
def test_a_bad_pedigree_is_one_line_naming_the_field_and_file(tmp_path, entry, field, says):
    study = tmp_path / "s.yaml"
    text = STUDY.replace("SESOI", "0.023")
    text = text[: text.index("    final_length_ratio: {phenomenon")] + f"    final_length_ratio: {entry}\n"
    study.write_text(text)
    with pytest.raises(StudyError) as e:
        load_study(study)
    lines = [x for x in str(e.value).splitlines() if "sesoi_pedigree" in x]
    assert len(lines) == 1, str(e.value)
    assert "s.yaml" in lines[0] and field in lines[0] and says in lines[0]


def test_a_pedigree_needs_a_sesoi_beside_it(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(
        STUDY.replace("SESOI", "0.023")
        .replace("metrics: [final_length_ratio]", "metrics: [final_length_ratio, final_eval_accuracy]")
        .replace("    final_length_ratio: {phenomenon", "    final_eval_accuracy: {phenomenon")
    )
    with pytest.raises(StudyError, match=r"compare\.sesoi_pedigree\.final_eval_accuracy.*no compare\.sesoi"):
        load_study(study)


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        ("dr_grpo_length_bias", {"final:length/incorrect_mean", "final_length_ratio"}),
        ("loss_aggregation", {"final_length_ratio"}),  # its incorrect length is secondary, with no SESOI
    ],
)
def test_the_length_bias_studies_state_a_pedigree_below_every_phenomenon(name, metrics):
    compare = load_study(ROOT / "studies" / f"{name}.yaml").compare
    pedigree = compare["sesoi_pedigree"]
    assert metrics <= set(pedigree)
    for metric, entry in pedigree.items():
        assert compare["sesoi"][metric] < entry["phenomenon"], metric
    smallest_effects(compare, None, name)  # not refused
