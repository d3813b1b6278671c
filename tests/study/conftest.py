from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def write(tmp_path, monkeypatch):
    """write("x.yaml", text) -> relative path "x.yaml" (cwd is tmp_path), text dedented."""
    monkeypatch.chdir(tmp_path)

    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return name

    return _write
