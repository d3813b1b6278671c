"""Every preset and loop-level knob of the algorithm zoo runs end to end on the micro model.

These check plumbing and metrics, not learning: a few steps each, real MLflow store.
"""

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.algorithms.presets import PRESETS
from workbench.cli.main import app

pytestmark = pytest.mark.slow

PRESET_VARIANTS = {f"preset_{name}": {"algorithm": {"preset": name}} for name in PRESETS}
KNOB_VARIANTS = {
    "dapo": {"algorithm": {"preset": "dapo", "max_sampling_rounds": 2}},
    "kl_loss": {"algorithm": {"kl_coef": 0.1, "kl_estimator": "low_var_kl"}},
    "kl_reward": {"algorithm": {"kl_coef": 0.1, "kl_in": "reward"}},
    "multi_update_tis": {
        "algorithm": {"epochs": 2, "minibatches": 2, "correction": "tis"},
        "sampler": {"dtype": "bfloat16"},
    },
    "cispo": {"algorithm": {"preset": "cispo", "correction": "seq_tis"}},
    "estimator_params": {"algorithm": {"estimator_params": {"epsilon": 0.01}}},
}
VARIANTS = PRESET_VARIANTS | KNOB_VARIANTS


def test_algorithm_knobs_run_and_log_their_metrics(workdir):
    study = {"name": "knobs", "base": micro_run_config(rollout={"steps": 2, "eval_every": 2}), "variants": VARIANTS}
    (workdir / "knobs.yaml").write_text(yaml.safe_dump(study))
    result = CliRunner().invoke(app, ["run", str(workdir / "knobs.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("knobs")
    runs = {
        r.data.tags["workbench.variant"]: r
        for r in client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    }
    assert set(runs) == set(VARIANTS) and all(r.info.status == "FINISHED" for r in runs.values())
    m = {v: r.data.metrics for v, r in runs.items()}
    assert {"batch/filtered_frac", "batch/sampling_rounds"} <= set(m["dapo"])
    assert 1 <= m["dapo"]["batch/sampling_rounds"] <= 2
    assert "kl/ref" in m["kl_loss"] and "kl/ref" in m["kl_reward"] and "kl/ref" not in m["preset_gspo"]
    assert m["multi_update_tis"]["train/optimizer_steps"] == 4
    assert {"mismatch/is_weight_mean", "mismatch/is_clipped_frac", "mismatch/is_reweighted_frac"} <= set(
        m["multi_update_tis"]
    )
    assert m["multi_update_tis"]["mismatch/prob_abs_diff_max"] > 0  # bf16 sampler vs fp32 learner
    assert runs["dapo"].data.params["algorithm.clip_high"] == "0.28"
    assert runs["estimator_params"].data.params["algorithm.estimator_params.epsilon"] == "0.01"
    for name, preset in PRESETS.items():  # each preset ran with its own units and logged their metrics
        run = runs[f"preset_{name}"]
        for key in ("estimator", "loss", "agg_mode"):
            assert run.data.params[f"algorithm.{key}"] == preset[key]
        assert {"clip/frac_low", "clip/frac_high", "policy/ratio_max", "loss/policy"} <= set(run.data.metrics)
