"""Study files are read within budgets: size, file type, YAML aliases and their expansion.
Each budget is tested at its edge: the last accepted input and the first refused one."""

from __future__ import annotations

import os
import time

import pytest

from workbench.study import MAX_ALIASES, MAX_EXPANDED_NODES, MAX_STUDY_BYTES, StudyError, load_study

HEAD = "name: s\nbase: {model: {builtin: tiny}}\n"


def aliases(n: int) -> str:
    return HEAD + "compare:\n  x: &x 1\n  ys: [" + ", ".join(["*x"] * n) + "]\n"


def test_alias_count_budget_edge(tmp_path):
    (tmp_path / "ok.yaml").write_text(aliases(MAX_ALIASES))
    assert load_study(tmp_path / "ok.yaml").compare["ys"] == [1] * MAX_ALIASES
    (tmp_path / "bad.yaml").write_text(aliases(MAX_ALIASES + 1))
    with pytest.raises(StudyError, match=f"more than {MAX_ALIASES} YAML aliases"):
        load_study(tmp_path / "bad.yaml")


def expansion(copies: int) -> str:
    """``b`` holds ``copies`` aliases of the 1000-node list ``a`` (a sequence node and 999 scalars)."""
    return HEAD + "compare:\n  a: &a [" + ", ".join(["0"] * 999) + "]\n  b: [" + ", ".join(["*a"] * copies) + "]\n"


def expanded_nodes(copies: int) -> int:
    # root 1; name key+value 2; base key 1 + {model: {builtin: tiny}} 5; compare key 1 + its mapping:
    # 1 + key a 1 + a 1000 + key b 1 + b (1 + 1000 per copy)
    return 1 + 2 + 6 + 1 + (1 + 1 + 1000 + 1 + 1 + 1000 * copies)


def test_expansion_budget_edge(tmp_path):
    fits = max(k for k in range(1000) if expanded_nodes(k) <= MAX_EXPANDED_NODES)  # 198 with the budget 200,000
    (tmp_path / "ok.yaml").write_text(expansion(fits))
    assert len(load_study(tmp_path / "ok.yaml").compare["b"]) == fits
    (tmp_path / "bad.yaml").write_text(expansion(fits + 1))
    with pytest.raises(StudyError, match="YAML aliases expand to more than"):
        load_study(tmp_path / "bad.yaml")


def test_size_budget_edge(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "#" * (MAX_STUDY_BYTES - len(HEAD) - 1) + "\n")  # exactly MAX_STUDY_BYTES
    assert os.path.getsize(path) == MAX_STUDY_BYTES and load_study(path).name == "s"
    path.write_text(HEAD + "#" * (MAX_STUDY_BYTES - len(HEAD)) + "\n")
    with pytest.raises(StudyError, match="too large"):
        load_study(path)


def test_a_symlink_to_a_study_is_read_and_a_fifo_is_refused_without_blocking(tmp_path):
    (tmp_path / "real.yaml").write_text(HEAD)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    assert load_study(tmp_path / "link.yaml").name == "s"
    os.mkfifo(tmp_path / "pipe.yaml")  # opening it for reading would wait for a writer forever
    (tmp_path / "inc.yaml").write_text("include: pipe.yaml\n" + HEAD)
    t0 = time.monotonic()
    with pytest.raises(StudyError, match="not a regular file"):
        load_study(tmp_path / "inc.yaml")
    assert time.monotonic() - t0 < 5
