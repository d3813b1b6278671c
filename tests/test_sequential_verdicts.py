"""One verdict per sequential question (issue 52): on every committed export of a study run with
``--until-decided`` (docs/findings/data/*/ with a sequential.json), the status each question has in
compare.md is the one its design decided (the last status sequential.json records for it), taken at a look
on the look's common seeds; the table's test on all seeds appears only as a labelled re-test. A study
re-decided since its record at a new SESOI (issue 52's SESOIs with a pedigree) says so in the row, naming
the status the record holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "findings" / "data"
#: Exports re-decided from their committed runs since their record: the two length-bias studies at SESOIs set
#: below the phenomenon (studies/*.yaml say why); precision-mismatch because TIS's activity now measures its
#: reweighting (issue 52), so its comparisons are no longer "not testable".
RE_DECIDED = {"dr-grpo-length-bias", "loss-aggregation", "precision-mismatch"}


def record_of(export: Path) -> dict | None:
    artifacts = pd.read_parquet(export / "artifacts.parquet")
    found = artifacts[artifacts["path"] == "sequential.json"]
    return json.loads(bytes(found.iloc[0]["data"]).decode()) if len(found) else None


SEQUENTIAL = [p for p in sorted(DATA.iterdir()) if (p / "artifacts.parquet").exists() and record_of(p)]


def recorded_statuses(record: dict) -> dict[tuple[str, str], str]:
    """(metric, arm) -> the last status the record holds for it (a question is recorded at each look it is open)."""
    out = {}
    for look in record["looks"]:
        for d in look["decisions"]:
            out[d["metric"], d["arm"]] = d["status"]
    return out


def page_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """(metric, variant) -> {column: cell} of every row of compare.md's per-metric tables, with the row's
    note (the "- variant: note" line under its table) as ``note``."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    metric, header = None, None
    for line in text.splitlines():
        if line.startswith("### "):
            metric, header = line[4:].split(" (", 1)[0], None
        elif metric and line.startswith("- ") and ": " in line:
            unit, note = line[2:].split(": ", 1)
            if (metric, unit) in out:
                out[metric, unit]["note"] = note
        elif metric and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if header is None:
                header = cells
            else:
                row = dict(zip(header, cells, strict=True))
                unit = row.get("variant", row.get("arm", "")).strip("*")
                out[metric, unit] = row
        elif not line.startswith("|"):
            header = None if not line.strip() else header
    return out


def test_the_committed_sequential_exports_are_found():
    assert len(SEQUENTIAL) >= 8, [p.name for p in SEQUENTIAL]


@pytest.mark.parametrize("export", SEQUENTIAL, ids=lambda p: p.name)
def test_one_status_per_sequential_question_equal_in_the_record_and_the_page(export):
    record = record_of(export)
    recorded, primary = recorded_statuses(record), set(record.get("primary", record["metrics"]))
    rows = page_rows((export / "compare.md").read_text())
    assert recorded
    for (metric, arm), status in recorded.items():
        row = rows.get((metric, arm))
        assert row is not None, f"{export.name}: {metric} {arm} has no row in compare.md"
        assert "at look " in row["verdict"], row["verdict"]
        # paired on the look's seeds, or said not to be: a secondary question tested at a look its arm had left
        assert "seeds paired" in row["verdict"] or ("seeds unpaired (an arm had stopped" in row["verdict"]
                                                    and metric not in primary), row["verdict"]
        if row["status"] != status:  # only a question re-decided at a new SESOI, and it says so
            assert export.name in RE_DECIDED, f"{export.name}: {metric} {arm}: {status} in the record, " \
                                              f"{row['status']} in compare.md"
            assert f"sequential.json holds {status}, decided with those of its run" in row["verdict"], row["verdict"]
        assert "re-test on all seeds (not the design's decision)" in row.get("note", "")  # labelled
    compared = {k for k, r in rows.items() if r["status"] != "baseline" and k[0] in {m for m, _ in recorded}}
    assert compared <= set(recorded), f"{export.name}: rows without a design decision: {compared - set(recorded)}"
