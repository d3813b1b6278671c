"""Health rules on real runs: a non-finite step stops the run; a diverging run is flagged.

Uses a small model trained just enough (1-digit addition) to earn reward, so updates are real.
"""

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app

pytestmark = pytest.mark.slow

SMALL_MODEL = {
    "builtin": "tiny",
    "tiny": {
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "intermediate_size": 128,
        "sft_max_steps": 150,
        "sft_target_accuracy": 1.0,
        "sft_check_every": 1000,
    },
}


def base(**overrides):
    return micro_run_config(
        model=SMALL_MODEL, task={"digits": 1, "ops": "+", "eval_size": 10}, sampler={"max_new_tokens": 10}, **overrides
    )


def run_study(workdir, study):
    (workdir / "s.yaml").write_text(yaml.safe_dump(study))
    result = CliRunner().invoke(app, ["run", str(workdir / "s.yaml"), "--quiet"], catch_exceptions=False)
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(study["name"])
    runs = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    return result, client, {r.data.tags["workbench.variant"]: r for r in runs}


def test_non_finite_gradient_stops_the_run_within_one_step_and_the_next_run_goes_on(workdir):
    study = {
        "name": "nan",
        "base": base(rollout={"steps": 6, "eval_every": 100, "prompts_per_step": 8}),
        "variants": {"poisoned": {"learner": {"inject_nonfinite_at_step": 2}}, "healthy": {}},
    }
    result, client, runs = run_study(workdir, study)
    assert result.exit_code == 0, result.output
    poisoned, healthy = runs["poisoned"], runs["healthy"]
    assert poisoned.info.status == "FINISHED" and poisoned.data.tags["workbench.health"] == "fail"
    assert poisoned.data.tags["workbench.health_reasons"].startswith("non_finite@2")
    assert poisoned.data.tags["workbench.stopped_early"] == "true"
    steps = {m.step for m in client.get_metric_history(poisoned.info.run_id, "loss/policy")}
    assert max(steps) == 2  # the poisoned step is the last one
    assert healthy.info.status == "FINISHED" and healthy.data.tags["workbench.stopped_early"] == "false"
    assert {m.step for m in client.get_metric_history(healthy.info.run_id, "loss/policy")} == set(range(6))


def test_huge_learning_rate_is_flagged_before_the_last_step(workdir):
    """lr=0.05 (finite, 500x the default) destroys the policy within a few steps.

    This run collapses inside the default 5-step reward window, so the window is 1 here (a
    documented knob). It also collapses before the default rule has the 60 healthy steps it fits
    its noise margin to (a noise history that holds the collapse only widens the margin), so the
    noise margin is off (``noise_z: 0``, the plain 0.2 margin below the best) and the rule
    evaluates from step 6; an even larger lr (1e30) gives NaN gradients, caught by ``non_finite``.
    """
    steps = 12
    rule = {"window": 1, "patience": 2, "noise_z": 0.0, "noise_window": 6}
    health = {"preset": "default", "rules": {"reward_collapse": rule}}
    study = {
        "name": "diverge",
        "base": base(
            learner={"lr": 0.05}, health=health, rollout={"steps": steps, "eval_every": 100, "prompts_per_step": 8}
        ),
    }
    result, client, runs = run_study(workdir, study)
    assert result.exit_code == 0, result.output
    reasons = dict(r.split("@") for r in runs["base"].data.tags["workbench.health_reasons"].split(","))
    assert "reward_collapse" in reasons or "entropy_collapse" in reasons, reasons
    first = min(int(reasons[k]) for k in ("reward_collapse", "entropy_collapse") if k in reasons)
    assert first < steps - 1
