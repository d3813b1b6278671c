"""Canonical metric names are spelled once: each is a constant in ``workbench/metrics/names.py``, and no other
module under ``workbench/`` writes one as a string literal (the catalogue included: it uses the constants).

The check parses every module with ``ast``. It flags
* a string literal equal to a catalogued name, anywhere (a dict key, a default, an expression inside an
  f-string's braces); text that merely mentions a name (a message, a docstring) is not a name and passes;
* an f-string that builds a catalogued name from parts (``f"eval/{x}"``): its literal parts, with ``.+`` for
  each placeholder, match a catalogued name, and one literal part holds a ``/`` and a letter (so ``f"{a}/{b}"``
  and ``f"{x:.3g}"`` are not taken for names); each such f-string that is genuinely dynamic is listed in
  ``DYNAMIC_NAMES`` with why;
* ``"fam/" + x``: a ``+`` whose string operand is a proper prefix of a catalogued name and holds a ``/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from workbench.metrics import names
from workbench.metrics.catalogue import CATALOGUE
from workbench.metrics.passk import PASS_AT_K_METRICS

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"
NAMES_MODULE = "workbench/metrics/names.py"
CATALOGUED = frozenset(spec.name for spec in CATALOGUE)

# (module, f-string template with {} for each placeholder) -> why the name is built, not a constant
DYNAMIC_NAMES: dict[tuple[str, str], str] = {
    (
        "workbench/metrics/passk.py",
        "eval/pass_at_{}",
    ): "k = 1, 2, 4, ... up to rollout.eval_samples: a name per power of two (the catalogue lists them from "
    "PASS_AT_K_METRICS, built by this one function)",
    (
        "workbench/metrics/compute.py",
        "reward/{}",
    ): "a reward term's own name from the run's config (reward/<term>); reward/mean and reward/std are constants",
    ("workbench/search/history.py", "reward/{}"): "the same reward/<term> family, read back for a search's history",
}


def constant_of(name: str) -> str:
    return name.upper().replace("/", "_")


def template(node: ast.JoinedStr) -> str:
    return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)


def builds_a_name(node: ast.JoinedStr, catalogued: frozenset[str]) -> bool:
    literals = [part.value for part in node.values if isinstance(part, ast.Constant)]
    if not any("/" in text and re.search("[A-Za-z]", text) for text in literals):
        return False
    pattern = "".join(re.escape(p.value) if isinstance(p, ast.Constant) else ".+" for p in node.values)
    return any(re.fullmatch(pattern, name, re.DOTALL) for name in catalogued)


def spellings(source: str, catalogued: frozenset[str] = CATALOGUED) -> list[tuple[int, str, str]]:
    """(line, kind, text) for each place ``source`` spells a catalogued name instead of using its constant."""
    tree = ast.parse(source)
    literal_text = set()  # the literal parts of f-strings (text; their placeholders' expressions are code)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            literal_text.update(id(part) for part in node.values if isinstance(part, ast.Constant))
            if builds_a_name(node, catalogued):
                found.append((node.lineno, "f-string", template(node)))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if (
                    isinstance(side, ast.Constant)
                    and isinstance(side.value, str)
                    and "/" in side.value
                    and any(n.startswith(side.value) and n != side.value for n in catalogued)
                ):
                    found.append((node.lineno, "concatenation", side.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in catalogued and id(node) not in literal_text:
            found.append((node.lineno, "literal", node.value))
    return sorted(found)


def package_modules() -> list[tuple[str, str]]:
    root = PACKAGE.parent
    return [
        (path.relative_to(root).as_posix(), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(root).as_posix() != NAMES_MODULE
    ]


def test_each_catalogued_name_is_one_constant_and_each_constant_is_catalogued():
    constants = {key: value for key, value in vars(names).items() if key.isupper()}
    assert all(isinstance(value, str) for value in constants.values())
    assert {constant_of(value) for value in constants.values()} == set(constants), (
        "a constant is the name upper-cased with '/' as '_'"
    )
    assert set(constants.values()) <= CATALOGUED, "names.py holds catalogued names only"
    assert CATALOGUED - set(constants.values()) == set(PASS_AT_K_METRICS)  # pass@k alone is built from k


def test_no_module_spells_a_catalogued_name():
    found = [
        f"{module}:{line}: {kind} {text!r}"
        for module, source in package_modules()
        for line, kind, text in spellings(source)
        if not (kind == "f-string" and (module, text) in DYNAMIC_NAMES)
    ]
    assert not found, "use the constant from workbench.metrics.names:\n" + "\n".join(found)


def test_every_listed_dynamic_name_still_exists():
    built = {
        (module, text)
        for module, source in package_modules()
        for _, kind, text in spellings(source)
        if kind == "f-string"
    }
    assert set(DYNAMIC_NAMES) <= built, f"stale entries: {set(DYNAMIC_NAMES) - built}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('x = {"eval/accuracy": 1.0}', [(1, "literal", "eval/accuracy")]),
        ("def f(m):\n    return f\"acc {m['reward/mean']:.2f}\"", [(2, "literal", "reward/mean")]),
        ('k = 3\nname = f"eval/pass_at_{k}"', [(2, "f-string", "eval/pass_at_{}")]),
        ('name = "mismatch/" + "kl"', [(1, "concatenation", "mismatch/")]),
        # not names: text that mentions one, a path join, a format spec, an uncatalogued metric
        ('raise ValueError("eval/accuracy is missing")', []),
        ('x = 1\nmsg = f"entropy/mean = {x:.3g}"', []),
        ('a, b = "x", "y"\npath = f"{a}/{b}"', []),
        ('x = "eval/accuracy_ci"', []),
    ],
)
def test_the_check_finds_spelled_names_and_passes_text(source, expected):
    assert spellings(source) == expected
