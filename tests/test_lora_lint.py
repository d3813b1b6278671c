"""Config lint for LoRA (workbench/analysis/lint.py ``lora_at_the_full_finetune_lr``, and the rank check in
workbench/config.py): a LoRA arm at the study's own full fine-tuning learning rate gets one ``warning:`` line
citing the ~10x rule; a rank the built-in model's layers cannot hold is an error, exit 2, one line."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.execution_helpers import fast_run_config
from workbench.analysis.lint import STUDY_LINT_RULES, lint_specs
from workbench.cli.main import app
from workbench.config import LoraConfig
from workbench.study import expand, load_study

LORA = {"learner": {"lora": {"rank": 1}}}


def write_study(path: Path, **study) -> Path:
    data = {"name": "lint", "base": fast_run_config(learner={"lr": 1.0e-4})} | study
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def lines_of(path: Path) -> list[str]:
    return lint_specs(expand(load_study(path)))


def test_lora_at_the_full_finetune_lr_is_one_line_citing_the_rule(tmp_path):
    path = write_study(tmp_path / "s.yaml", variants={"full": {}, "lora_r1": LORA}, seeds=[0, 1, 2])
    (line,) = lines_of(path)  # three seeds, one line
    assert line.startswith(
        "warning: learner.lr=0.0001 is the full fine-tuning learning rate of this study, used "
        "with learner.lora in lora_r1: LoRA learns best at ~10x the full fine-tuning learning "
        'rate (Thinking Machines, "LoRA Without Regret"; tinker-cookbook '
        "get_lora_lr_over_full_finetune_lr = 10)"
    )
    assert line.endswith("add one at ~0.001")
    assert LoraConfig.LR_OVER_FULL_FINETUNE == 10  # the number the line cites is the one the unit declares


def test_quiet_at_10x_or_when_the_study_also_tries_10x_or_has_no_full_finetuning(tmp_path):
    ten_x = {"learner": {"lora": {"rank": 1}, "lr": 1.0e-3}}
    assert lines_of(write_study(tmp_path / "a.yaml", variants={"full": {}, "lora": ten_x})) == []
    # a rank study that runs LoRA at both rates on purpose
    both = write_study(tmp_path / "b.yaml", variants={"full": {}, "lora": LORA, "lora_10x": ten_x})
    assert lines_of(both) == []
    # no full fine-tuning arm: nothing to compare the rate with
    assert lines_of(write_study(tmp_path / "c.yaml", variants={"lora": LORA})) == []
    # other adapters at 10x do not excuse these ones
    other = {"learner": {"lora": {"rank": 8}, "lr": 1.0e-3}}
    (line,) = lines_of(write_study(tmp_path / "d.yaml", variants={"full": {}, "r1": LORA, "r8_10x": other}))
    assert " used with learner.lora in r1: " in line


def test_study_rules_are_pure(tmp_path):
    specs = expand(load_study(write_study(tmp_path / "s.yaml", variants={"full": {}, "lora": LORA})))
    configs = [s.config for s in specs]
    for name in STUDY_LINT_RULES:
        rule = STUDY_LINT_RULES.get(name)
        assert list(rule(configs)) == list(rule(configs))


def test_a_rank_above_a_layers_smallest_dimension_is_exit_2_one_line(tmp_path):
    """The micro model: hidden 32, MLP 64; every projection has a side of 32 at most."""
    path = write_study(tmp_path / "s.yaml", variants={"lora": {"learner": {"lora": {"rank": 33}}}})
    result = CliRunner().invoke(
        app, ["plan", str(path)], env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    )
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert "\n" not in message and "learner.lora.rank=33 is above the smallest dimension (32)" in message
    ok = write_study(tmp_path / "ok.yaml", variants={"lora": {"learner": {"lora": {"rank": 32}}}})
    assert (
        CliRunner()
        .invoke(app, ["plan", str(ok)], env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
        .exit_code
        == 0
    )


def test_a_bfloat16_lora_learner_is_not_flagged_for_weight_precision():
    """lr_below_weight_precision is about weights stepped in 16 bits; LoRA's trained weights (the adapters) are
    float32 under a bfloat16 base (tests/test_lora.py), so a small lr moves them."""
    from workbench.analysis.lint import LINT_RULES
    from workbench.config import RunConfig

    full = RunConfig.model_validate({"learner": {"dtype": "bfloat16", "lr": 1.0e-6}})
    lora = RunConfig.model_validate({"learner": {"dtype": "bfloat16", "lr": 1.0e-6, "lora": {"rank": 4}}})
    rule = LINT_RULES.get("lr_below_weight_precision")
    assert len(list(rule(full))) == 1 and list(rule(lora)) == []
