"""The installed ``workbench`` command enters through ``main()``, not the typer app directly: ``main``
installs the output redaction (a store password never printed) and bounds MLflow's HTTP retries
before any command runs, so an entry point straight to ``app`` would skip both."""

from __future__ import annotations

import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from workbench.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_declares_main_as_the_console_script():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["workbench"] == "workbench.cli.main:main"


def test_the_installed_console_script_loads_main():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "workbench"]
    assert script.load() is cli_main.main
