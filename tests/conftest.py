"""Shared fixtures: a very small tiny-model config, and an isolated model cache per session."""

from __future__ import annotations

import os

import pytest

from tests.postgres import postgres_url  # noqa: F401 - a real, throwaway PostgreSQL server (fixture)

# A model small enough to build in seconds: plumbing tests need a real HF model, not a good one.
MICRO_MODEL = {
    "builtin": "tiny",
    "tiny": {
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "intermediate_size": 64,
        "sft_max_steps": 30,
        "sft_target_accuracy": 1.0,
        "sft_check_every": 1000,
        "sft_batch_size": 32,
    },
}


# The files that take minutes, longest first (per-file sums of `--durations=0`, main suite at load ~10 on the
# 2-core machine: 660, 565, 283, 266, 176 ... 93 s; engine suite: its three multi-run files). xdist's loadfile
# hands out files in collection order only with --no-loadscope-reorder (the Makefile's XDIST); by default it
# queues them by test count, and these few-test files came last: the suite ended with one or two workers
# finishing them while the others idled. Run first, they overlap the short files.
HEAVY_FILES_FIRST = (
    "tests/test_outage_server.py",
    "tests/test_ray_executor.py",
    "tests/test_execute.py",
    "tests/test_shipped_studies_run.py",
    "tests/test_export.py",
    "tests/test_secrets_postgres.py",
    "tests/test_staleness_resume.py",
    "tests/search/test_workers.py",
    "tests/test_secrets_cli.py",
    "tests/health/test_false_alarms.py",
    "tests/test_distributed.py",
    "tests/test_lora_run.py",
    "tests/test_browser.py",
    "tests/compare/test_checkpoint_level.py",
    "tests/engines/test_staleness_engines.py",
    "tests/engines/test_gpu_study_engines.py",
    "tests/engines/test_deepspeed_ranks.py",
)


def pytest_collection_modifyitems(config, items):
    """Heavy files first (HEAVY_FILES_FIRST), every file's tests kept together and in order; the same on
    every xdist worker (a pure function of the collected items)."""
    rank = {path: i for i, path in enumerate(HEAVY_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def micro_run_config(**overrides) -> dict:
    """A run config (as a dict) that trains for a few seconds on the micro model."""
    from workbench.config import deep_merge

    base = {
        "model": MICRO_MODEL,
        "task": {"eval_size": 16},
        "sampler": {"max_new_tokens": 8},
        "rollout": {"prompts_per_step": 4, "group_size": 4, "steps": 3, "eval_every": 2, "log_samples": 4},
    }
    return deep_merge(base, overrides)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Micro models gain nothing from intra-op threads, and on a loaded 2-core machine two
    spinning OpenMP threads made in-process runs ~10x slower (measured: 30 s vs 3 s)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def no_tracking_uri_leaks_out_of_a_test():
    """`workbench worker` and `tune --tracking-uri` set $MLFLOW_TRACKING_URI for their whole process (every
    run they start logs there); invoked in-process by a test, that must not outlive the test: a later
    test's runs would log to a store that is not theirs (the env var wins over tracking.uri)."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """Keep built models out of ~/.cache, but share them across the session's tests."""
    cache = tmp_path_factory.mktemp("workbench-cache")
    old = os.environ.get("WORKBENCH_CACHE")
    os.environ["WORKBENCH_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("WORKBENCH_CACHE", None)
    else:
        os.environ["WORKBENCH_CACHE"] = old


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run in an empty directory with no inherited tracking URI, so the default local store is used."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path
