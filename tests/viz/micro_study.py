"""One real micro study (2 variants x 2 seeds x 3 steps, via `workbench run`), built once per test
session and shared by tests/test_reader.py, tests/test_report_cli.py and tests/viz.

Its health config makes two rules fire early (truncation and zero-std groups are certain with a
3-step micro model), so health tables, markers and --recheck have something to show.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import micro_run_config

STUDY = "report-micro"
VARIANTS = ("grpo", "dr_grpo")
SEEDS = (0, 1)
_BUILT: dict[str, Path] = {}


def study_yaml() -> dict:
    base = micro_run_config(
        health={
            "preset": "default",
            "on_fail": "continue",
            "rules": {
                "length_blowup": {"max_truncated_frac": 0.05, "patience": 2},
                "no_learning_signal": {"max_zero_std_frac": 0.5, "patience": 2},
            },
        }
    )
    return {
        "name": STUDY,
        "base": base,
        "variants": {"grpo": {}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}},
        "seeds": list(SEEDS),
        "compare": {"baseline": "grpo", "metrics": ["final_eval_accuracy", "final_reward"]},
    }


def build_micro_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding ``study.yaml``, ``mlflow.db`` and ``mlartifacts/`` (built once)."""
    if "dir" in _BUILT:
        return _BUILT["dir"]
    from workbench.cli.main import app

    root = tmp_path_factory.mktemp("report-study")
    (root / "study.yaml").write_text(yaml.safe_dump(study_yaml(), sort_keys=False))
    t0 = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        result = CliRunner().invoke(app, ["run", "study.yaml", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (root / "build_seconds.txt").write_text(f"{time.perf_counter() - t0:.1f}")
    _BUILT["dir"] = root
    return root


def uri_of(root: Path) -> str:
    return f"sqlite:///{root / 'mlflow.db'}"


def copy_store(root: Path, dest: Path) -> str:
    """A private copy of the study's store (for tests that modify runs); artifacts are shared."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "mlflow.db", dest / "mlflow.db")
    return f"sqlite:///{dest / 'mlflow.db'}"
