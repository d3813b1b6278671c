"""The read-only commands import only what they use (issue 45; timed by benchmarks/bench_cli_startup.py).

Each command runs in a fresh interpreter, as ``python -m workbench.cli.main`` runs it, and reports the
heavy modules it loaded: ``--help`` and ``metrics`` none, ``algorithms`` torch alone (a preset is
resolved by the run config's validation, against units registered in torch modules), ``plan`` of a study
with no store neither transformers (the executor) nor MLflow (nothing to read back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "mlflow", "ray", "optuna", "plotly", "scipy", "statsmodels", "pandas", "numpy")

PROBE = """
import atexit, json, sys
atexit.register(lambda: sys.__stderr__.write("\\nLOADED " + json.dumps([m for m in {heavy!r} if m in sys.modules])
                                             + " " + json.dumps("workbench.cli.main" in sys.modules) + "\\n"))
sys.argv = ["workbench", *sys.argv[1:]]
from workbench.cli.main import main
main()
"""


def loaded_by(*argv: str, cwd: Path) -> tuple[set[str], str]:
    """The heavy modules a fresh ``workbench ARGV`` loaded, and what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {
        "COLUMNS": "120",
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], cwd=cwd, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("LOADED "), done.stderr[-2000:]
    modules, cli_loaded = line.removeprefix("LOADED ").rsplit(" ", 1)
    assert json.loads(cli_loaded), "the probe did not run the CLI"
    return set(json.loads(modules)), done.stdout


@pytest.mark.parametrize(
    ("argv", "shown", "allowed"),
    [
        (("--help",), "algorithms", set()),
        (("metrics", "--format", "plain"), "eval/accuracy", set()),
        (("algorithms", "--format", "plain"), "dr_grpo", {"torch", "numpy"}),  # numpy: torch imports it
    ],
    ids=["help", "metrics", "algorithms"],
)
def test_read_only_commands_load_nothing_heavy_they_do_not_use(argv, shown, allowed, tmp_path):
    loaded, out = loaded_by(*argv, cwd=tmp_path)
    assert shown in out
    assert loaded <= allowed, f"workbench {' '.join(argv)} loaded {sorted(loaded - allowed)}"


@pytest.mark.slow  # validating the study imports torch: ~2.5 s quiet, ~5 s on the shared cores
def test_plan_without_a_store_loads_neither_the_executor_nor_mlflow(tmp_path):
    loaded, out = loaded_by("plan", str(REPO / "studies" / "sanity.yaml"), "--format", "json", cwd=tmp_path)
    assert json.loads(out)["study"] == "sanity"
    assert not loaded & {"transformers", "mlflow", "ray", "optuna"}, sorted(loaded)
    assert not (tmp_path / "mlflow.db").exists()
