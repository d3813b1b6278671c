"""#53: no user-supplied string reaches a report's HTML unescaped. Any text — markup, quotes, newlines,
`../`, long strings — given as a page or section title, a note (a dashboard spec's description), a table's
column name or cell (a trial's note, a completion) comes out as text: the page parses into exactly the
elements the same page with plain words in those places has, and each string is in it as escaped text."""

from __future__ import annotations

import html
from html.parser import HTMLParser

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.viz.html import Section, df_table_html, html_page

MARKUP = st.sampled_from(
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        '"><b>x</b>',
        "</td></tr>",
        "&amp;<",
        "../../etc/passwd",
        "{{7*7}}",
        "\n<h1>\n",
        "'; --",
        "<!--",
        "]]>",
    ]
)
USER_TEXT = st.lists(st.one_of(MARKUP, st.text(min_size=0, max_size=40)), min_size=1, max_size=4).map("".join)


class Elements(HTMLParser):
    """The page's elements in order: (tag, attribute names), start and end tags alike."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, ...]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append(("start", tag, *sorted(name for name, _ in attrs)))

    def handle_endtag(self, tag):
        self.seen.append(("end", tag))

    def handle_comment(self, data):
        self.seen.append(("comment",))


def page(title: str, note: str, column: str, cell: str) -> str:
    table = df_table_html(pd.DataFrame({column: [cell]}), left=[column])
    return html_page(title, [Section(title, note=note, body_html=table)]).split("</head>", 1)[1]  # plotly: head


def elements(text: str) -> list[tuple[str, ...]]:
    parser = Elements()
    parser.feed(text)
    return parser.seen


@settings(max_examples=60, deadline=None)
@given(title=USER_TEXT, note=USER_TEXT, column=USER_TEXT, cell=USER_TEXT)
def test_every_user_string_in_a_page_comes_out_escaped(title, note, column, cell):
    column = column or "c"  # a frame needs a column name
    body = page(title, note, column, cell)
    plain = page(*("w" if text else "" for text in (title, note, column, cell)))  # an empty note adds no <p>
    assert elements(body) == elements(plain)  # no element the strings opened
    for text in (title, note, column, cell):
        assert html.escape(text) in body
