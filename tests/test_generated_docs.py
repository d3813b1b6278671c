"""Generated docs match their sources (`make docs` rewrites them: workbench/cli/generated_docs.py).

Every table a reader meets that lists registered things (presets, units' parameters, health rules,
metrics) is rendered from the registry, so adding a unit never means pasting a table by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.cli.generated_docs import PARTS, REGENERATE, GeneratedPart, stale_parts, write_generated_docs

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("part", PARTS, ids=lambda p: f"{p.path}:{p.block or 'whole file'}")
def test_generated_part_matches_its_source(part):
    text = (ROOT / part.path).read_text()
    assert part.current(text).strip("\n") == part.render().strip("\n"), (
        f"{part.path}: the {part.block or 'file'} is out of date: run `{REGENERATE}`"
    )


def copy_docs(tmp_path: Path) -> Path:
    for path in {part.path for part in PARTS}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


def test_regenerating_rewrites_only_the_generated_parts(tmp_path):
    root = copy_docs(tmp_path)
    assert stale_parts(root) == [] and write_generated_docs(root) == []  # up to date: nothing to do
    health = (root / "docs" / "health.md").read_text()
    rule_table = PARTS[2].render()
    (root / "docs" / "health.md").write_text(health.replace(rule_table, "| stale |\n"))
    (root / "docs" / "algorithms.md").write_text("stale\n")
    assert [p.path for p in stale_parts(root)] == ["docs/algorithms.md", "docs/health.md"]
    assert write_generated_docs(root) == [root / "docs" / "algorithms.md", root / "docs" / "health.md"]
    assert (root / "docs" / "health.md").read_text() == health  # the prose around the block untouched
    assert (root / "docs" / "algorithms.md").read_text() == (ROOT / "docs" / "algorithms.md").read_text()
    assert write_generated_docs(root) == []


def test_a_block_without_its_markers_is_named():
    part = GeneratedPart("README.md", "toy table", lambda: "| a |\n")
    with pytest.raises(ValueError, match="README.md: the markers of the toy table are missing"):
        part.rewritten("no markers here\n")
    text = f"before\n{part.start()}\n\n| old |\n\n{part.end()}\nafter\n"
    assert part.current(text) == "| old |\n"
    assert part.rewritten(text) == f"before\n{part.start()}\n\n| a |\n\n{part.end()}\nafter\n"
