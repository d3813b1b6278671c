"""What "no row contradicts its interval" means, checked on a compare page as printed (#52): read from the
markdown `compare --format md` prints (headlines and tables), independently of how the intervals were made.

- better / worse (higher / lower): the printed interval of Δ excludes 0 on the word's side (better with higher
  is better: the lower bound above 0; with lower is better: the upper bound below 0).
- equivalent: the printed interval is the TOST's and lies strictly inside ±SESOI (the verdict's |Δ| < e).
- inconclusive: the printed interval includes 0 and is not a TOST interval.
- the headline and the table show the same interval for the same word: the same level and kind, and each
  printed bound on the same side of 0 and ±SESOI as the table's (they differ only in the digits shown).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

CELL = re.compile(r"^(?P<est>\S+) \[(?P<lo>[^,\]]+), (?P<hi>[^\]]+)\] \((?P<level>[\d.]+)%(?P<tost> TOST)?\)$")
HEAD = re.compile(
    r"^(?:\(secondary, exploratory\) )?(?P<variant>\S+) vs (?P<base>\S+): \S+(?P<points> points)? "
    r"(?P<metric>.+?) \((?P<level>[\d.]+)% (?P<tost>TOST )?CI (?P<lo>\S+) to (?P<hi>\S+)\), (?P<said>.*)$"
)
TITLE = re.compile(
    r"^### (?P<metric>\S+) \((?:secondary, exploratory; )?(?P<direction>higher is better|lower is "
    r"better|no preferred direction);"
)
SESOI = re.compile(r"\|Δ\| < (?P<e>[^)]+)\)")


def number(text: str) -> float:
    """A printed number (``+1.2``, ``12,346``, ``-6.57e-05``, ``∞``) as a float."""
    text = text.replace(",", "").lstrip("+")
    return {"∞": math.inf, "-∞": -math.inf}[text] if "∞" in text else float(text)


@dataclass
class Row:
    metric: str
    direction: str
    variant: str
    status: str
    verdict: str
    lo: float
    hi: float
    level: str
    tost: bool


def table_rows(md: str) -> list[Row]:
    """Every compared row of every table in a compare page, with its printed Δ interval (rows without an
    interval, e.g. decided by the rank test, are left out: they print none)."""
    rows, title, head = [], None, None
    for line in md.splitlines():
        if m := TITLE.match(line):
            title, head = m, None
        elif line.startswith("| rank |") and title:
            head = [c.strip() for c in line.strip("|").split(" | ")]
        elif line.startswith("| ") and head and title:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            r = dict(zip(head, cells, strict=True))
            delta = next(v for k, v in r.items() if k.startswith("Δ vs baseline"))
            if m := CELL.match(delta):
                variant = r.get("variant", r.get("arm", "")).strip("*")
                rows.append(
                    Row(
                        title["metric"],
                        title["direction"],
                        variant,
                        r["status"],
                        r["verdict"],
                        number(m["lo"]),
                        number(m["hi"]),
                        m["level"],
                        bool(m["tost"]),
                    )
                )
        elif not line.startswith("|"):
            head = None if line.strip() else head
    return rows


def interval_cells(md: str) -> int:
    """How many Δ cells of a page print an interval with its level (what :func:`table_rows` must read)."""
    return len(re.findall(r"\] \([\d.]+%(?: TOST)?\) \|", md))


def contradictions(row: Row, lo: float, hi: float, *, tost: bool, where: str) -> list[str]:
    """Why the printed interval [lo, hi] contradicts the row's word (none: [])."""
    bad = []
    if row.status in ("better", "worse", "higher", "lower"):
        # the side of 0 the word claims for Δ = arm - baseline
        above = row.status == "higher" or (
            row.status in ("better", "worse") and (row.status == "better") == (row.direction == "higher is better")
        )
        if tost or not ((lo > 0) if above else (hi < 0)):
            bad.append(f"{where}: {row.status} beside [{lo}, {hi}]{' (TOST)' if tost else ''}")
    elif row.status == "equivalent":
        m = SESOI.search(row.verdict)
        e = number(m["e"]) if m else math.nan
        if not (tost and -e < lo and hi < e):
            bad.append(f"{where}: equivalent within ±{e} beside [{lo}, {hi}]{'' if tost else ' (not TOST)'}")
    elif row.status == "inconclusive" and (tost or not lo <= 0 <= hi):
        bad.append(f"{where}: inconclusive beside [{lo}, {hi}]")
    return bad


def page_contradictions(md: str) -> list[str]:
    """Every contradiction between a word and its printed interval on a compare page, in its tables and its
    headlines, and every headline whose interval is not its table row's (level, kind, side of 0 and ±SESOI)."""
    from workbench.compare.wording import metric_words

    rows = table_rows(md)
    bad = [b for r in rows for b in contradictions(r, r.lo, r.hi, tost=r.tost, where=f"{r.metric}/{r.variant} table")]
    by_words = {(metric_words(r.metric), r.variant): r for r in rows}
    for line in md.split("\n\n"):
        m = HEAD.match(line.split("\n")[0])
        if not m or (m["metric"], m["variant"]) not in by_words:
            continue
        r = by_words[m["metric"], m["variant"]]
        scale = 100.0 if m["points"] else 1.0
        lo, hi = number(m["lo"]) / scale, number(m["hi"]) / scale
        where = f"{r.metric}/{r.variant} headline"
        bad += contradictions(r, lo, hi, tost=bool(m["tost"]), where=where)
        if m["level"] != r.level or bool(m["tost"]) != r.tost:
            bad.append(
                f"{where}: {m['level']}%{' TOST' if m['tost'] else ''} vs the table's {r.level}%"
                f"{' TOST' if r.tost else ''}"
            )
        sesoi = SESOI.search(r.verdict)
        marks = [0.0] + ([number(sesoi["e"]), -number(sesoi["e"])] if sesoi else [])
        for t in marks:
            for a, b in ((lo, r.lo), (hi, r.hi)):
                if (a > t) != (b > t) or (a < t) != (b < t):
                    bad.append(f"{where}: bound {a} and the table's {b} on two sides of {t}")
    return bad
