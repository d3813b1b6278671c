"""What "no row contradicts its interval" means, checked on a compare page as printed (#52): read from the
markdown `compare --format md` prints (headlines and tables), independently of how the intervals were made.

- better / worse (higher / lower): the printed interval of Δ excludes 0 on the word's side (better with higher
  is better: the lower bound above 0; with lower is better: the upper bound below 0).
- equivalent: the printed interval is the TOST's and lies strictly inside ±SESOI (the verdict's |Δ| < e).
- inconclusive: the printed interval includes 0 and is not a TOST interval.
- futile (a sequential design's futility stop): the verdict states the one-sided bound(s) that decided it, and each
  lies strictly inside ±SESOI on the side the verdict excludes (a loss: the lower bound above -SESOI when higher is
  better, the upper bound below +SESOI when lower is; an improvement: the opposite; a difference: both), on the
  estimate's far side from the SESOI, in the table and in the headline (in its units: points), on the same sides of
  0 and ±SESOI in both. The printed Δ interval is the look's efficacy interval (a higher level): not checked.
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
FUTILE = re.compile(
    r"^futile \((?P<side>an improvement|a loss|a difference) of (?P<e>\S+)(?: points)? or more(?: either way)? "
    r"excluded: one-sided (?P<level>[\d.]+)% bounds? (?P<b1>\S+)(?: and (?P<b2>\S+))?(?: points)?\)"
)


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
    est: float = math.nan


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
                        number(m["est"]),
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


def futile_bounds(said: str, scale: float = 1.0) -> tuple[str, float, list[float]] | None:
    """``(side, SESOI, bounds)`` a futile verdict states (``scale``: 100 for a headline in points), None when it
    states no bound."""
    m = FUTILE.match(said)
    if not m:
        return None
    bounds = [number(b) / scale for b in (m["b1"], m["b2"]) if b is not None]
    return m["side"], number(m["e"]) / scale, bounds


def futile_contradictions(row: Row, said: str, *, scale: float = 1.0, where: str) -> list[str]:
    """Why a futile verdict's words (``said``: the table's verdict, or the headline's words after its interval)
    contradict themselves: no bound stated, or a bound not strictly inside ±SESOI on the excluded side."""
    stated = futile_bounds(said, scale)
    if stated is None:
        return [f"{where}: futile without the bound that decided it: {said}"]
    side, e, bounds = stated
    higher = row.direction == "higher is better"
    # which bound of Δ (arm - baseline) each excluded side states: "lo" must lie above -e, "hi" below +e
    kinds = {"a difference": ["lo", "hi"], "a loss": ["lo" if higher else "hi"]}.get(side, ["hi" if higher else "lo"])
    if row.direction == "no preferred direction" or len(kinds) != len(bounds):
        return [f"{where}: futile ({side}) states {len(bounds)} bound(s): {said}"]
    bad = []
    for kind, b in zip(kinds, bounds, strict=True):
        inside = -e < b if kind == "lo" else b < e
        beyond = b <= row.est if kind == "lo" else row.est <= b  # a bound lies beyond the estimate
        if not inside or not (beyond or math.isnan(row.est)):
            bad.append(f"{where}: futile ({side} of {e} excluded) beside its {kind} bound {b} (Δ {row.est})")
    return bad


def page_contradictions(md: str) -> list[str]:
    """Every contradiction between a word and its printed interval on a compare page, in its tables and its
    headlines, and every headline whose interval is not its table row's (level, kind, side of 0 and ±SESOI)."""
    from workbench.compare.wording import metric_words

    rows = table_rows(md)
    bad = [b for r in rows for b in contradictions(r, r.lo, r.hi, tost=r.tost, where=f"{r.metric}/{r.variant} table")]
    bad += [
        b
        for r in rows
        if r.status == "futile"
        for b in futile_contradictions(r, r.verdict, where=f"{r.metric}/{r.variant} table")
    ]
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
        if r.status == "futile":
            bad += futile_contradictions(r, m["said"], scale=scale, where=where)
            said, table = futile_bounds(m["said"], scale), futile_bounds(r.verdict)
            if said and table:  # the same bounds: on the same sides of 0 and ±SESOI (the digits may differ)
                for a, b in zip(said[2], table[2], strict=False):
                    for t in (0.0, table[1], -table[1]):
                        if (a > t) != (b > t) or (a < t) != (b < t):
                            bad.append(f"{where}: futility bound {a} and the table's {b} on two sides of {t}")
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
