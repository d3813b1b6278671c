"""The analysis layer beneath both faces (issue 45): ``workbench.analysis`` decides and computes, imports
no command line, typer or rich, and the notebook API reaches it without loading a terminal code path,
its errors included."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.test_import_graph import PACKAGE_ROOT

TERMINAL = ("typer", "rich", "click")  # click: typer's own parser, vendored or not


def terminal_imports(folder: Path) -> list[str]:
    """``path:line: module`` (path relative to ``folder``) for every import of ``workbench.cli`` or a
    terminal library under ``folder``, anywhere in a file: inside functions and under TYPE_CHECKING too."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.split(".")[0] in TERMINAL or name == "workbench.cli" or name.startswith("workbench.cli."):
                    bad.append(f"{path.relative_to(folder)}:{node.lineno}: {name}")
    return bad


def test_terminal_imports_are_found(tmp_path):
    (tmp_path / "m.py").write_text(
        "import json\nimport rich.console\n\ndef f():\n"
        "    from workbench.cli.output import fail\n    from typer import Exit\n"
    )
    assert terminal_imports(tmp_path) == ["m.py:2: rich.console", "m.py:5: workbench.cli.output", "m.py:6: typer"]


def test_analysis_and_notebook_import_no_cli_typer_or_rich():
    bad = [
        f"{folder}/{line}" for folder in ("analysis", "notebook") for line in terminal_imports(PACKAGE_ROOT / folder)
    ]
    assert not bad, "the analysis layer and the notebook print nothing: they return values and raise\n" + "\n".join(bad)


NOTEBOOK_ERROR = """
import sys
from workbench import load_study
from workbench.errors import AnalysisError
try:
    load_study("no-such-study", tracking_uri=sys.argv[1])
except AnalysisError as e:
    print("raised:", e)
print("loaded:", ",".join(sorted(m for m in sys.modules if m.split(".")[0] in {terminal!r}
                                 or m == "workbench.cli" or m.startswith("workbench.cli."))))
"""


def test_the_notebook_raises_without_loading_a_terminal_code_path(tmp_path):
    """An unknown study is the CLI's one line, raised as AnalysisError (a ValueError), with no typer,
    rich or workbench.cli module loaded on the way."""
    from workbench.tracking.store import ensure_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_store(uri)  # a store without the study
    code = NOTEBOOK_ERROR.format(terminal=set(TERMINAL))
    done = subprocess.run(
        [sys.executable, "-c", code, uri], capture_output=True, text=True, cwd=PACKAGE_ROOT.parent, timeout=300
    )
    assert done.returncode == 0, done.stderr
    raised, loaded = done.stdout.splitlines()[-2:]
    assert raised.startswith("raised: ") and "no-such-study" in raised
    assert loaded == "loaded: ", loaded
