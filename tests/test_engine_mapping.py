"""engine: trl's mapping (workbench/engine/trl_mapping.py), in the main venv: no TRL needed to plan or to refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import RunConfig, flatten
from workbench.engine.trl_mapping import ROWS, grpo_config_kwargs, inexpressible, mapped_fields


def trl(**sections) -> RunConfig:
    return RunConfig.model_validate({"engine": "trl", **sections})


def test_every_setting_has_a_row():
    """A new setting fails here until it says what it becomes in TRL (or that it cannot)."""
    rows = {row.setting for row in ROWS}
    full = RunConfig.model_validate(
        {"data": {"curate": {}, "order": "curriculum", "prime": {"mix": {"worked": 1.0}}}, "learner": {"lora": {}}}
    )
    for key in flatten(full.model_dump(mode="json")):
        parts = key.split(".")
        assert any(".".join(parts[:n]) in rows for n in range(1, len(parts) + 1)), f"{key}: no row in ROWS"
    assert len(rows) == len(ROWS)


def test_every_kwarg_is_a_mapped_field():
    for cfg in (trl(), trl(algorithm={"preset": "dr_grpo"}), trl(learner={"checkpoint_every": 2})):
        assert set(grpo_config_kwargs(cfg)) <= mapped_fields()


def test_the_presets_map_to_trls_loss_types_by_hand():
    grpo = grpo_config_kwargs(trl())
    assert (grpo["loss_type"], grpo["scale_rewards"], grpo["epsilon"], grpo["epsilon_high"]) == (
        "grpo",
        "group",
        0.2,
        0.2,
    )
    dr = grpo_config_kwargs(trl(algorithm={"preset": "dr_grpo"}))
    assert (dr["loss_type"], dr["scale_rewards"]) == ("dr_grpo", "none")
    # dapo on TRL: token-mean -> dapo, overlong -> mask_truncated_completions, clip-higher, 16 minibatches of 8
    dapo = grpo_config_kwargs(trl(algorithm={"preset": "dapo", "batch_filter": None}))
    assert (dapo["loss_type"], dapo["mask_truncated_completions"], dapo["epsilon_high"]) == ("dapo", True, 0.28)
    assert (dapo["per_device_train_batch_size"], dapo["steps_per_generation"]) == (8, 16)  # 16 x 8 = 128 = 16 x 8
    assert dapo["max_steps"] == 100 * 16  # TRL counts optimizer steps
    gspo = grpo_config_kwargs(trl(algorithm={"preset": "gspo"}))
    assert (gspo["loss_type"], gspo["importance_sampling_level"]) == ("grpo", "sequence")
    cispo = grpo_config_kwargs(trl(algorithm={"preset": "cispo"}))
    assert (cispo["loss_type"], cispo["epsilon_high"]) == ("cispo", pytest.approx(1.28))
    micro = grpo_config_kwargs(trl(learner={"micro_batch_size": 32}))  # 128 completions, 1 minibatch
    assert (
        micro["per_device_train_batch_size"],
        micro["gradient_accumulation_steps"],
        micro["steps_per_generation"],
    ) == (32, 4, 4)


@pytest.mark.parametrize(
    ("sections", "setting"),
    [
        ({"algorithm": {"preset": "dapo"}}, "algorithm.batch_filter"),
        ({"algorithm": {"preset": "rloo"}}, "algorithm.estimator"),
        ({"algorithm": {"preset": "gmpo"}}, "algorithm.loss"),
        ({"algorithm": {"agg_mode": "token-sum"}}, "algorithm.agg_mode"),
        ({"algorithm": {"kl_coef": 0.1, "kl_estimator": "k1"}}, "algorithm.kl_estimator"),
        ({"algorithm": {"correction": "tis"}}, "algorithm.correction"),
        ({"learner": {"lora": {"rank": 4}}}, "learner.lora"),
        ({"learner": {"dtype": "bfloat16"}}, "learner.dtype"),
        ({"reward": {"shaping": [{"name": "format", "weight": 0.1}]}}, "reward.shaping"),
        (
            {"rollout": {"prompts_per_step": 3, "group_size": 3}, "algorithm": {"minibatches": 2}},
            "algorithm.minibatches",
        ),
    ],
)
def test_inexpressible_settings_are_named(sections, setting):
    cfg = trl(**sections)
    assert setting in [s for s, _ in inexpressible(cfg)]
    with pytest.raises(ValueError, match=setting.replace(".", r"\.")):
        grpo_config_kwargs(cfg)
    workbench = RunConfig.model_validate(sections)  # the same settings on the workbench engine: fine
    assert inexpressible(workbench) == []


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_plan_refuses_an_inexpressible_variant_in_one_line_and_writes_nothing(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(
        "name: t\nbase:\n  engine: trl\n  rollout: {steps: 2}\nvariants:\n  grpo: {}\n"
        "  dapo: {algorithm: {preset: dapo}}\nseeds: [0, 1]\n"
    )
    env = {
        "PYTHONPATH": str(Path(__file__).parents[1]),
        "PATH": "/usr/bin:/bin",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
    }
    # `-c`: run the CLI with trl made unimportable, so the check is shown not to need TRL
    code = (
        "import sys; sys.modules['trl'] = None; from workbench.cli.main import main; "
        "sys.argv = ['workbench', 'plan', 's.yaml']; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "error: s.yaml:7 variants.dapo.algorithm.batch_filter: engine: trl cannot express "
        "algorithm.batch_filter (variant 'dapo'): no dynamic sampling (group filter with refill) in TRL"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
