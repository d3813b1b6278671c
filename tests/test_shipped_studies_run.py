"""Every study shipped in studies/ still runs: 2 RL steps of each of its arms, on a micro model.

The overrides shrink what a run costs (a 1-layer model without cold-start SFT, 2 prompts x 2
completions, 4 eval problems) and one seed per arm; everything that decides *which* code path
runs -- task, preset, aggregation, filters, shaping, sampler dtype, IS correction, minibatches --
stays as shipped. `workbench plan` printing no warning for them is tests/test_lint.py's
test_shipped_study_plans_without_warnings. The vLLM arm of engines_mismatch needs the
`.venv-engines` environment and is left to tests/engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from workbench.cli.main import app
from workbench.study import expand, load_study

pytestmark = pytest.mark.slow

STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))

SMALL_RUN = [  # cost only; the micro model's shape is tests/conftest.py's MICRO_MODEL
    "model.tiny.hidden_size=32",
    "model.tiny.num_layers=1",
    "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=64",
    "model.tiny.sft_max_steps=0",
    "rollout.steps=2",
    "rollout.eval_every=2",
    "rollout.eval_size=4",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.log_samples=2",
]
# vLLM and TRL are not installed in the main environment: their arms run in tests/engines and tests/trl_engine
ONLY = {"engines_mismatch": "seed=0,variant=hf", "engines_trl": "seed=0,variant=workbench"}
# engine: trl needs the batch to split into DAPO's 16 minibatches (2 prompts x 8 = 16), or plan refuses the trl arm
EXTRA = {"engines_trl": ["rollout.group_size=8"]}
# a model directory and GSM8K files instead of the tiny model: tests/chat/test_gpu_study.py runs its shape
# (chat_cpu: tests/chat/test_chat_cpu_study.py builds that model and runs it as shipped)
ELSEWHERE = {"qwen_gsm8k", "chat_cpu"}


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_runs_two_steps_per_arm(path, workdir):
    if path.stem in ELSEWHERE:
        pytest.skip("runs on a locally built chat model in tests/chat/test_gpu_study.py")
    only = ONLY.get(path.stem, "seed=0")
    args = ["run", str(path), "--quiet", "--only", only]
    for setting in SMALL_RUN + EXTRA.get(path.stem, []):
        args += ["--set", setting]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    variant = ONLY.get(path.stem, "").partition("variant=")[2]
    arms = [s for s in expand(load_study(path)) if s.seed == 0 and (not variant or s.variant == variant)]
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")  # workdir is this test's own: only this study
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, "tags.`workbench.role` = 'run'")
    assert len(runs) == len(arms), [r.info.run_name for r in runs]
    for run in runs:
        assert run.info.status == "FINISHED", (run.info.run_name, run.info.status)
        assert "length/mean" in run.data.metrics and "eval/accuracy" in run.data.metrics


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_shipped_search_tunes(workdir):
    """studies/lr_search.yaml through `workbench tune` (2 trials of the shrunk runs above): the
    docs' command ends with best trials, the importances (or why not) and the report."""
    path = Path(__file__).parents[1] / "studies" / "lr_search.yaml"
    args = ["tune", str(path), "--quiet", "--set", "search.n_trials=2"]
    for setting in SMALL_RUN + EXTRA.get(path.stem, []):
        args += ["--set", setting]
    result = CliRunner().invoke(app, args, catch_exceptions=False, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # shrunk runs (no cold start, 2 steps) may gain nothing over their start: the search then says so (#53)
    said = " ".join(result.output.split())
    assert ("lr-search:search: best trials" in said and "gains" in said) or (
        "lr-search:search: trials (none beat the start)" in said and "the search found nothing" in said
    ), said
    assert "parameter importances" in result.output
    assert (workdir / "search-lr-search.html").exists()
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    (run,) = client.search_runs(
        [client.get_experiment_by_name("lr-search").experiment_id], "tags.`workbench.role` = 'search'"
    )
    assert {m.step for m in client.get_metric_history(run.info.run_id, "best_value")} == {0, 1}
