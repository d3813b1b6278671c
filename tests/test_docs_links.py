"""The docs stay linked: every relative link and ``#anchor`` in README.md and docs/*.md resolves (a file that
exists; a heading, GitHub's slug of it, or an explicit ``<a id>`` in the file linked), and the files a run
leaves in the working directory are ignored by git."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str, *, code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked (kept with ``code``)."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line if code else re.sub(r"`[^`]*`", "``", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(path.read_text(encoding="utf-8"), code=True):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


def links(path: Path) -> list[tuple[str, str]]:
    """(where, target) of every relative link in ``path``."""
    return [
        (f"{path.relative_to(ROOT)}:{number}", target)
        for number, line in prose(path.read_text(encoding="utf-8"))
        for target in LINK.findall(line)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)
    ]


def broken(path: Path) -> list[str]:
    out = []
    for where, target in links(path):
        file, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file)).resolve() if file else path
        if not linked.exists():
            out.append(f"{where}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked):
            out.append(f"{where}: {target}: no heading '#{anchor}' in {linked.relative_to(ROOT)}")
    return out


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "a.md").write_text(
        "# Top: the *first* part\n## Run a study (CPU)\n[ok](#top-the-first-part) "
        "[ok](a.md#run-a-study-cpu) [x](#nope) [y](b.md) [web](https://e.org/x)\n"
        "```\n[not a link](c.md)\n```\n"
    )
    assert broken(tmp_path / "a.md") == ["a.md:3: #nope: no heading '#nope' in a.md", "a.md:3: b.md: no such file"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken(path) == []


RUN_FILES = [
    "mlflow.db",
    "mlflow.db-journal",
    "optuna.db",
    "optuna.db-wal",
    ".optuna.db.create-lock",
    "locks/my-study-0a1b2c3d.lock",
    "mlruns/0/meta.yaml",
    "mlartifacts/1/x",
    "checkpoints/k/latest.json",
    ".workbench/cache/x",
]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_files_a_run_leaves_in_the_working_directory_are_ignored_by_git():
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"],
        cwd=ROOT,
        text=True,
        input="\n".join(RUN_FILES) + "\n",
        capture_output=True,
    )
    unmatched = [line.split("\t")[-1] for line in done.stdout.splitlines() if line.startswith("::")]
    assert unmatched == []
