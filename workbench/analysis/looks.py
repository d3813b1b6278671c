"""The looks taken at a study, recorded on its parent MLflow run, and what ``compare`` says of them.

* ``sequential.json`` (artifact): the design of ``workbench run --until-decided`` and the looks
  taken, each with its seeds, alpha and decisions (:mod:`workbench.analysis.sequential` writes it;
  ``sequential.log``: the same in words; tag ``workbench.sequential``: the one-line phrase);
* tag ``workbench.first_look``: the seeds and time of the first time the study was looked at: the
  first ``compare`` that logged to MLflow, or the first sequential look.

``compare`` flags **seeds added after looking** when a compared run's seed is not among the first
look's seeds, the run started after that look, and no recorded sequential look covers the seed.
A store without a first-look record (compared before this existed, or only with ``--no-log``)
cannot be judged and is not flagged.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.errors import AnalysisError, UserFileError
from workbench.safe_io import parse_json, read_json

if TYPE_CHECKING:
    import pandas as pd

RECORD = "sequential.json"
LOG = "sequential.log"
DESIGN_TAG = "workbench.sequential"
FIRST_LOOK_TAG = "workbench.first_look"
ADDED_AFTER_LOOKING = "seeds added after looking: p-values are not valid at face value"


@dataclass(frozen=True)
class LookDecision:
    """One comparison at one look: its sequential status (``open`` while undecided) and compare's row."""

    metric: str
    arm: str
    status: str  # better | worse | higher | lower | equivalent | futile | not testable | ... | open
    p_value: float | None  # compare's p-value at the look's level (None: not finite)
    delta: float | None
    n_seeds: int
    verdict: str  # compare's verdict at the look's level


@dataclass(frozen=True)
class Look:
    """One look of a sequential design: its seeds, its alpha, and the comparisons decided or still open."""

    look: int  # 1-based
    seeds: int  # seeds per arm at this look
    seed_list: list[int]
    alpha: float  # spent at this look
    alpha_spent: float  # spent up to and including it
    levels: dict[str, float]  # metric -> the level its open comparisons were tested at
    decisions: list[LookDecision]
    time: int  # epoch milliseconds


@dataclass
class SequentialRecord:
    """``sequential.json``: the design a study runs with ``--until-decided`` and the looks taken so far."""

    design: dict[str, Any]  # workbench.compare.sequential.Design.to_dict()
    metrics: list[str]
    primary: list[str]
    baseline: str
    family: str
    futility: str  # the side a futility stop excludes (recorded, not checked: a non-binding stop spends no α)
    declared_seeds: list[int]  # the study file's seeds
    seeds: list[int]  # every seed a look may use, in order
    looks: list[Look] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)  # the compared arms (a change after a look needs an amendment)
    amendments: list[str] = field(default_factory=list)  # compare.sequential.amendments, as declared
    rebuilt: str = ""  # why the record was rebuilt from the store's runs ("" when never damaged)

    def to_dict(self) -> dict[str, Any]:
        """As ``sequential.json`` holds it (the fields in this order, looks and decisions as mappings)."""
        return dataclasses.asdict(self)


def read_record(client, parent) -> dict[str, Any] | None:
    """The ``sequential.json`` of a parent run (None without one)."""
    import tempfile

    from mlflow.exceptions import MlflowException

    if parent is None or RECORD not in {a.path for a in client.list_artifacts(parent.info.run_id)}:
        return None
    root = parent.info.artifact_uri or ""
    if root.startswith("file:"):  # a local artifact store: read in place (no download, no progress bar)
        from pathlib import Path
        from urllib.parse import unquote, urlparse

        return read_json(Path(unquote(urlparse(root).path)) / RECORD, what="sequential record")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(parent.info.run_id, RECORD, tmp)
        except (MlflowException, OSError):
            return None
        return read_json(path, what="sequential record")


def record_first_look(tracking_uri: str, parent_run_id: str, runs: pd.DataFrame) -> None:
    """Tag the parent run with the seeds of this first look (``compare`` logging to MLflow), if it
    has none yet."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    if FIRST_LOOK_TAG in client.get_run(parent_run_id).data.tags:
        return
    seeds = sorted(int(s) for s in runs["seed"].dropna().unique())
    client.set_tag(
        parent_run_id, FIRST_LOOK_TAG, json.dumps({"seeds": seeds, "time": int(time.time() * 1000), "by": "compare"})
    )


@dataclass(frozen=True)
class LooksReport:
    """What a study's recorded looks say about a comparison of its runs (rule in the module docstring)."""

    sequential: str | None = None  # the sequential design's phrase, for a study run with --until-decided
    level: float | None = None  # the significance level of the design's last look taken (its verdicts' level)
    seeds_added: str | None = None  # the warning when seeds were added after looking without a design
    record: dict[str, Any] | None = None  # sequential.json, when the study was run with --until-decided
    earlier_design: str | None = None  # looks of a sequential design the study file no longer declares

    def settings(self) -> dict[str, str]:
        """The lines a comparison table shows above its tables (``ComparisonTable.settings`` keys)."""
        lines = {"sequential": self.sequential, "seeds_added": self.seeds_added, "earlier_design": self.earlier_design}
        return {key: line for key, line in lines.items() if line is not None}


def looks_report(reader: Any, study: str, parent_run_id: str | None, runs: pd.DataFrame) -> LooksReport:
    """The design's phrase and level for a study run with ``--until-decided``, and a warning when
    compared runs were added after the first look without a sequential design covering them (rule in
    the module docstring). Read through ``reader`` (a
    :class:`workbench.results.reader.StudyReader`), not an MlflowClient: importing MLflow and
    opening its store took seconds of every ``compare --no-log``."""
    from workbench.compare.sequential import Design  # deferred: scipy

    if parent_run_id is None:
        return LooksReport()
    info = reader.run_info(parent_run_id) or {}
    text = reader.read_artifact_text(parent_run_id, info.get("artifact_uri"), RECORD)
    try:
        record = parse_json(text, RECORD) if text is not None else None
    except UserFileError as e:  # a truncated or edited record: say how to get a readable one back
        raise AnalysisError(
            f"{e}; `workbench run STUDY --until-decided` rebuilds it from the store's runs "
            "(each look decided again from them)"
        ) from None
    _, tags, _ = reader.backend.runs(reader.experiment_id(study), "study")
    parent_tags = tags.get(parent_run_id, {})
    sequential: str | None = None
    level: float | None = None
    covered: set[int] = set()
    if record and record.get("looks"):
        design = Design.from_dict(record["design"])
        taken = len(record["looks"])
        # the level its last look tested at: the verdicts compare prints must not be more liberal than the design
        level = float(design.look_alpha[min(taken, len(design.looks)) - 1])
        sequential = (
            f"sequential design: {design.phrase(taken)}; each verdict is the design's decision, "
            "with its interval, at the look it was taken (the table's re-test on all seeds, at its last "
            f"look's level α = {level:.3g}, is in the row's note)"
        )
        covered = {int(s) for look in record["looks"] for s in look["seed_list"]}
    design_only = LooksReport(sequential, level, record=record if sequential else None)
    first = parent_tags.get(FIRST_LOOK_TAG)
    if not first:
        return design_only
    try:
        first = json.loads(first)
        looked, at = {int(s) for s in first["seeds"]}, int(first["time"])
    except (ValueError, KeyError, TypeError):
        return design_only
    start = _epoch_ms(runs["start_time"]) if "start_time" in runs.columns else None
    late = runs["seed"].notna() & ~runs["seed"].isin(looked | covered)
    if start is not None:
        late &= start.fillna(0) > at
    added = sorted(int(s) for s in runs.loc[late, "seed"].unique())
    if not added:
        return design_only
    which = f"seed {added[0]} was" if len(added) == 1 else f"seeds {_seed_list(added)} were"
    added_line = (
        f"{ADDED_AFTER_LOOKING} (first looked at with seeds {_seed_list(looked)}; {which} run later "
        "without a sequential design: use `workbench run STUDY --until-decided`)"
    )
    return LooksReport(sequential, level, added_line, record if sequential else None)


def _epoch_ms(times: pd.Series) -> pd.Series:
    """Start times as epoch milliseconds (the reader gives datetimes; MLflow's own rows, integers)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    if pd.api.types.is_numeric_dtype(times):
        return times.astype(float)
    stamps = pd.to_datetime(times, utc=True, errors="coerce")
    return pd.Series((stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1), index=times.index)


def _seed_list(seeds) -> str:
    return ", ".join(str(s) for s in sorted(seeds))
