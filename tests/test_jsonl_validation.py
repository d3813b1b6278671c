"""JSONL task files are validated line by line: whatever the bytes, the result is a list of
problems or one ValueError line naming the file and, for a bad line, its number."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.tasks.jsonl import read_numbered_problems, read_problems

GOOD = {"prompt": "1+1=", "answer": "2"}

lines = st.one_of(
    st.just(json.dumps(GOOD).encode()),
    st.just(b""),
    st.just(b'{"prompt": "x"}'),
    st.just(b'{"prompt": "\xff", "answer": "1"}'),
    st.just(b"[1, 2]"),
    st.binary(max_size=30),
    st.builds(
        lambda p, a: json.dumps({"prompt": p, "answer": a}).encode(),
        st.one_of(st.text(max_size=5), st.integers(), st.none()),
        st.one_of(st.text(max_size=5), st.integers(), st.floats(allow_nan=False), st.booleans()),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(lines, max_size=6))
def test_any_bytes_give_problems_or_one_line_naming_file_and_line(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\n".join(row.replace(b"\n", b" ") for row in rows) + b"\n")
    try:
        numbered = read_numbered_problems(path)
    except ValueError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(str(path))
        found = re.match(re.escape(str(path)) + r":(\d+): ", message)
        if found:  # a bad line: everything before it was a valid or blank line
            bad = int(found.group(1))
            assert 1 <= bad <= len(rows)
            prefix = tmp_path / "prefix.jsonl"
            prefix.write_bytes(b"\n".join(r.replace(b"\n", b" ") for r in rows[: bad - 1]) + b"\n")
            try:
                read_problems(prefix)
            except ValueError as earlier:
                assert "no problems found" in str(earlier)  # only blank lines before it
        else:
            assert "no problems found" in message
    else:
        assert numbered and all(p.prompt.strip() and p.answer.strip() for _, p in numbered)
        assert [n for n, _ in numbered] == sorted({n for n, _ in numbered})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": true}\n',
            ":2: 'answer' must be a non-empty string",
        ),
        (b'{"prompt": "a", "answer": "1", "solution": 3}\n', ":1: 'solution' must be a string"),
        (b'\n\n{"prompt": "a"\n', ":3: invalid JSON"),
        (b'{"prompt": "a", "answer": "1"}\n\xef\xbb\xbf{"prompt": "b", "answer": "1"}\n', ":2: invalid JSON"),
        (b"\n  \n", "no problems found"),
    ],
)
def test_hand_written_bad_files(tmp_path, content, message):
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_problems(path)


def test_a_byte_order_mark_at_the_start_of_the_file_is_allowed(tmp_path):
    path = tmp_path / "d.jsonl"  # as some Windows editors save UTF-8
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    assert read_problems(path)[0].prompt == "1+1="


def test_line_numbers_count_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n" + json.dumps(GOOD) + "\n\n" + json.dumps({**GOOD, "answer": 3}) + "\n")
    assert [(n, p.answer) for n, p in read_numbered_problems(path)] == [(2, "2"), (4, "3")]
