"""``benchmarks/bench_vs_trl.py`` measures what issue #14 names: its workbench sides are valid run configs
at the issue's settings, and each side differs from the defaults in its own overrides only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from workbench.config import RunConfig, flatten

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_vs_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # stdlib imports only at the top: nothing runs
    return module


def test_the_default_side_runs_the_issues_settings(bench, tmp_path):
    cfg = bench.workbench_config(tmp_path, steps=10, side="workbench")
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.sampler.max_new_tokens) == (16, 8, 32)
    assert cfg.sampler.temperature == 1.0 and cfg.sampler.top_p == 1.0
    algo = cfg.algorithm
    assert algo.kl_coef == 0 and algo.agg_mode == "token-mean"  # beta 0; TRL's loss_type="dapo"
    assert (algo.clip_low, algo.clip_high) == (0.2, 0.2) and algo.epochs * algo.minibatches == 1
    assert (cfg.learner.lr, cfg.learner.grad_clip, cfg.learner.dtype) == (1e-4, 1.0, "float32")
    assert cfg.rollout.steps == 11  # one warm-up step, then the timed ones
    assert cfg.sampler.decode == "lean" and not cfg.sampler.compile  # the defaults, nothing opted in


@pytest.mark.parametrize(
    "side", ["workbench-reference", "workbench-overlap", "workbench-compiled", "workbench-2-verifiers"]
)
def test_each_other_side_changes_only_its_own_settings(bench, tmp_path, side):
    base = flatten(bench.workbench_config(tmp_path, 10, "workbench").model_dump(mode="json"))
    other = flatten(bench.workbench_config(tmp_path, 10, side).model_dump(mode="json"))
    changed = {key: other[key] for key in base if base[key] != other[key]}
    assert changed == flatten(bench.WORKBENCH_SIDES[side])


def test_every_side_is_listed(bench):
    assert set(bench.SIDES) == {"trl", *bench.WORKBENCH_SIDES}
    assert isinstance(bench.workbench_config(Path("x"), 1, "workbench"), RunConfig)
