"""The command line at 80 columns (issue #32 finding 4) and `ui`'s checks before it starts (#31 class 7).

* every command's ``--help`` (groups and subcommands included), rendered with COLUMNS=80: no line
  wider than 80, nothing cut ("…"), every option name and every shown default whole (a default
  may wrap at a hyphen, as any word of a paragraph), metavars in
  words (no ``<list[str]>``, ``<int range>``, ``x>=1``), sentences not broken where the source had
  a newline;
* ``--version``; hints name the command as it was started (``./.venv/bin/workbench ui``);
* ``plan`` notes a missing ``model.path`` (``run`` refuses it);
* ``ui --port 70000`` and ``ui`` on a taken port: exit 2 with one line, no banner, no ./mlflow.db.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.invocation import workbench_command
from workbench.cli.main import app

WIDTH = 80


def command_paths() -> list[tuple[str, ...]]:
    """Every command and subcommand of the app, as argv prefixes (``()`` is ``workbench`` itself)."""
    root = typer.main.get_command(app)
    paths, todo = [], [((), root)]
    while todo:
        path, command = todo.pop()
        paths.append(path)
        ctx = type(root.make_context("workbench", ["--help"], resilient_parsing=True))(command)
        for name in getattr(command, "list_commands", lambda ctx: [])(ctx):
            todo.append(((*path, name), command.get_command(ctx, name)))
    return sorted(paths)


def help_text(path: tuple[str, ...], monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    result = CliRunner().invoke(app, [*path, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, (path, result.output)
    return result.output


def declared_options(path: tuple[str, ...]) -> list[tuple[list[str], str | None]]:
    """``(option names, default as help shows it)`` of the command at ``path``."""
    command = typer.main.get_command(app)
    ctx = None
    for name in path:
        ctx = type(command.make_context("workbench", ["--help"], resilient_parsing=True))(command)
        command = command.get_command(ctx, name)
    out = []
    for p in command.params:
        if p.param_type_name != "option" or p.hidden:
            continue
        shown = p.default if (p.show_default and p.default not in (None, False, "", [])) and not p.is_flag else None
        out.append(([*p.opts, *p.secondary_opts], None if shown is None else str(shown)))
    return out


PATHS = command_paths()


def test_every_command_is_listed():
    assert ("run",) in PATHS and ("ui",) in PATHS and ("algorithms", "show") in PATHS and () in PATHS
    print(f"\n{len(PATHS)} commands' --help checked at {WIDTH} columns")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "workbench")
def test_help_at_80_columns_cuts_nothing_and_speaks_words(path, monkeypatch):
    text = help_text(path, monkeypatch)
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert wide == [], wide
    assert "…" not in text, text  # rich's cut
    assert not re.search(r"<(int|float|str|path|bool|list\[\w+\])( range)?>", text), text  # python types as metavars
    assert not re.search(r"\bx[<>]=", text), text  # typer's "x>=1"
    # a wrapped help: words joined by single spaces, a word wrapped at its hyphen joined again
    flat = " ".join(re.sub(r"-\n\s*", "-", text).split())
    for names, default in declared_options(path):
        for name in names:
            assert re.search(rf"(^|[\s,/]){re.escape(name)}([\s,=]|$)", text, re.MULTILINE), (name, text)
        if default is not None:
            assert f"default: {default}" in flat, (names, default, text)


def test_help_wraps_sentences_as_paragraphs(monkeypatch):
    """The `ui` docstring spans several source lines: the help rewraps it, never breaking where the
    source did (a line ending mid-sentence in the source must not end a line here)."""
    text = help_text(("ui",), monkeypatch)
    assert "Serve the study's MLflow UI and print its links, the first line being the URL of" in " ".join(text.split())
    lines = [line.strip() for line in text.splitlines()]
    assert "training-health view (curves grouped by variant)." not in lines  # the source's own line


def test_ranges_and_metavars_are_words(monkeypatch):
    text = " ".join(help_text(("run",), monkeypatch).split())
    assert "-j, --parallel N" in text and "[at least 1]" in text and "--set TEXT" in text
    assert (
        "Usage: workbench run [OPTIONS] STUDY" in text.replace("python -m workbench.cli.main", "workbench")
        or "run [OPTIONS] STUDY" in text
    )


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert re.fullmatch(r"rl-workbench \S+\n", result.output), result.output


def test_hints_name_the_command_as_it_was_started(tmp_path, monkeypatch):
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    program = venv_bin / "workbench"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv is not activated
    assert workbench_command(str(program), cwd=tmp_path) == "./.venv/bin/workbench"
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")  # activated: the bare name works
    assert workbench_command(str(program), cwd=tmp_path) == "workbench"
    # python -m workbench.cli.main: this interpreter, by name when PATH finds the same one
    assert workbench_command("/x/workbench/cli/main.py", cwd=tmp_path).endswith(" -m workbench.cli.main")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert workbench_command("main.py", cwd=tmp_path) == f"{Path(sys.executable).name} -m workbench.cli.main"


# ---- plan checks model paths --------------------------------------------------------------------


def test_plan_notes_a_missing_model_path_that_run_refuses(tmp_path, monkeypatch):
    # plan runs anywhere (a GPU study is planned on a laptop whose disk lacks the model), so a missing
    # model.path is a note there; `run` refuses it (preflight, exit 2): tests/chat, tests/test_preflight.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    base = micro_run_config()
    base["model"] = {"path": str(tmp_path / "no-such-model")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "m", "base": base}))
    result = CliRunner().invoke(app, ["plan", "s.yaml"])
    assert result.exit_code == 0, result.output
    assert "note: model.path" in " ".join(result.output.split()) and "no-such-model" in result.output
    assert "does not exist on this machine" in " ".join(result.output.split())
    assert not (tmp_path / "mlflow.db").exists()


# ---- ui: checks before anything starts (#31 class 7) ---------------------------------------------


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_ui_refuses_a_port_out_of_range_before_creating_anything(port, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(app, ["ui", "--port", port])
    assert result.exit_code == 2, result.output
    assert f"--port: expected a port from 1 to 65535, got {port}" in result.output
    assert "MLflow UI" not in result.output and "http://" not in result.output
    assert list(tmp_path.iterdir()) == []  # no ./mlflow.db, nothing


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_ui_on_a_taken_port_exits_2_without_a_banner(host, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with socket.socket() as taken:
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["ui", "--port", str(port), "--host", host])
    assert result.exit_code == 2, result.output
    assert f"port {port} on {host} is already in use" in result.output
    assert "MLflow UI" not in result.output and "http://" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_ui_refuses_a_host_that_is_not_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["ui", "--host", "203.0.113.7"])  # TEST-NET-3: never this machine's
    assert result.exit_code == 2, result.output
    assert "--host 203.0.113.7" in result.output and "http://" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_printed_links_start_with_the_ui_address():
    from workbench.cli.invocation import DEFAULT_UI_BASE, ui_base_url

    assert ui_base_url("sqlite:///mlflow.db") == DEFAULT_UI_BASE == "http://127.0.0.1:5000"
    assert ui_base_url(None) == DEFAULT_UI_BASE
    # a tracking server: its own address, never its credentials
    assert (
        ui_base_url("https://user:s3cret@mlflow.example.org:8443/mlflow/") == "https://mlflow.example.org:8443/mlflow"
    )
    assert ui_base_url("http://[::1]:5000") == "http://[::1]:5000"
