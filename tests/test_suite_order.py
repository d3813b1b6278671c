"""The suite's scheduling list names files that exist: a renamed heavy file would silently go back to the tail."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HEAVY_FILES_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_heavy_file_listed_exists_once():
    assert len(set(HEAVY_FILES_FIRST)) == len(HEAVY_FILES_FIRST)
    assert [p for p in HEAVY_FILES_FIRST if not (ROOT / p).is_file()] == []


def test_collection_puts_the_heavy_files_first_and_keeps_each_files_order():
    from tests import conftest

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    items = [
        Item(n)
        for n in (
            "tests/a.py::t1",
            "tests/test_execute.py::x",
            "tests/a.py::t2",
            "tests/test_outage_server.py::y",
            "tests/test_execute.py::z",
        )
    ]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [
        "tests/test_outage_server.py::y",
        "tests/test_execute.py::x",
        "tests/test_execute.py::z",
        "tests/a.py::t1",
        "tests/a.py::t2",
    ]
