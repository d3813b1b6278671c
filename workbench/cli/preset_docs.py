"""Presets as readable tables, from the preset data and the registered units alone.

``workbench algorithms`` prints them; ``docs/algorithms.md`` (the paper index) and the README's preset
table are generated from here (``make docs`` rewrites both, see ``workbench.cli.generated_docs``) and kept
in sync by ``tests/algorithms/test_presets_docs.py``.
"""

from __future__ import annotations

import inspect
from typing import Any

from workbench.algorithms.advantage import ADVANTAGE_ESTIMATORS, DERIVED_PARAMS
from workbench.algorithms.losses import POLICY_LOSSES
from workbench.algorithms.params import LOSS_PARAM_FIELDS
from workbench.algorithms.presets import PAPERS, PRESET_INFO, PRESET_LIST, Paper, Preset

# The settings a preset table shows in its own columns; the others go to "other settings".
MAIN_KEYS = ("estimator", "loss", "agg_mode", "clip_low", "clip_high")


def format_value(value: Any) -> str:
    """A setting as a study's YAML flow style writes it: ``[overlong]``, ``{temperature_neg: 2}``, ``0.28``."""
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def resolved_settings(name: str) -> dict[str, Any]:
    """Every algorithm field as a run with only ``preset: NAME`` resolves it (preset values + defaults)."""
    from workbench.config import AlgorithmConfig  # deferred: pydantic

    fields = AlgorithmConfig(preset=name).model_dump()
    fields.pop("preset")
    return fields


def other_settings(preset: Preset) -> str:
    """The preset's settings outside MAIN_KEYS, as ``key=value`` pairs (``-`` when there are none)."""
    pairs = [f"{k}={format_value(s.value)}" for k, s in preset.settings.items() if k not in MAIN_KEYS]
    return ", ".join(pairs) or "-"


def sources(preset: Preset) -> str:
    """The preset's citations, grouped by paper in order of first use: ``DAPO §3.1, §3.3; TIS``."""
    by_paper: dict[str, list[str]] = {}
    for setting in preset.settings.values():
        sections = by_paper.setdefault(setting.paper.short, [])
        if setting.section and setting.section not in sections:
            sections.append(setting.section)

    def section_order(section: str) -> tuple:
        return tuple((0, int(n), "") if n.isdigit() else (1, 0, n) for n in section.lstrip("§").split("."))

    return "; ".join(
        f"{paper} {', '.join(sorted(sections, key=section_order))}".strip() for paper, sections in by_paper.items()
    )


def preset_rows() -> list[list[str]]:
    """One row per preset: name, the resolved main settings, other preset settings, sources."""
    rows = []
    for preset in PRESET_LIST:
        resolved = resolved_settings(preset.name)
        no_range = resolved["clip_low"] is None and resolved["clip_high"] is None  # a loss without a clip
        clip = "-" if no_range else f"{format_value(resolved['clip_low'])}, {format_value(resolved['clip_high'])}"
        rows.append(
            [
                preset.name,
                resolved["estimator"],
                resolved["loss"],
                resolved["agg_mode"],
                clip,
                other_settings(preset),
                sources(preset),
                preset.inert_by_default or "-",
            ]
        )
    return rows


PRESET_HEADERS = [
    "preset",
    "estimator",
    "loss",
    "aggregation",
    "clip (low, high)",
    "other settings",
    "source",
    "inert on the default study shape",
]


def show_rows(name: str) -> list[list[str]]:
    """Every resolved setting of preset ``name``: value, and the citation when the preset sets it."""
    preset = PRESET_INFO[name]
    rows = []
    for key, value in resolved_settings(name).items():
        setting = preset.settings.get(key)
        source = setting.citation if setting else "default (not set by the preset)"
        rows.append([key, format_value(value), source])
    return rows


def _code(text: str) -> str:
    return f"`{text}`" if text != "-" else text


def markdown_preset_table() -> str:
    """The preset table in the README and docs/algorithms.md."""
    lines = ["| " + " | ".join(PRESET_HEADERS) + " |", "|" + "---|" * len(PRESET_HEADERS)]
    for name, estimator, loss, agg, clip, other, source, inert in preset_rows():
        lines.append(
            f"| `{name}` | `{estimator}` | `{loss}` | `{agg}` | {clip} | {_code(other)} | {source} | {inert} |"
        )
    return "\n".join(lines) + "\n"


def _paper_line(paper: Paper) -> str:
    return f"{paper.authors}, [*{paper.title}*]({paper.url})"


def markdown_paper_index() -> str:
    """For each paper: which preset settings cite it, by section."""
    out = []
    for paper in PAPERS:
        uses = [
            (preset.name, key, s) for preset in PRESET_LIST for key, s in preset.settings.items() if s.paper == paper
        ]
        if not uses:
            continue
        out += [
            f"### {paper.short}",
            "",
            _paper_line(paper),
            "",
            "| preset | setting | value | section |",
            "|---|---|---|---|",
        ]
        out += [f"| `{name}` | `{key}` | `{format_value(s.value)}` | {s.section or '-'} |" for name, key, s in uses]
        out.append("")
    return "\n".join(out)


def unit_param_rows() -> list[list[str]]:
    """One row per keyword parameter of a registered loss or estimator: kind, unit, name, default, how set."""
    rows = []
    for kind, registry, field, own_fields in (
        ("estimator", ADVANTAGE_ESTIMATORS, "estimator_params", ()),
        ("loss", POLICY_LOSSES, "loss_params", LOSS_PARAM_FIELDS),
    ):
        for name in registry.names():
            for param in inspect.signature(registry.get(name)).parameters.values():
                if param.kind is not inspect.Parameter.KEYWORD_ONLY or param.name in DERIVED_PARAMS:
                    continue
                default = "(preset or field)" if param.default is param.empty else format_value(param.default)
                where = f"algorithm.{param.name}" if param.name in own_fields else f"algorithm.{field}.{param.name}"
                rows.append([kind, name, param.name, default, where])
    return rows


def markdown_unit_params() -> str:
    """The table of unit parameters in docs/algorithms.md."""
    lines = ["| unit | name | parameter | default | set with |", "|---|---|---|---|---|"]
    lines += [
        f"| {kind} | `{name}` | `{param}` | `{default}` | `{where}` |"
        for kind, name, param, default, where in unit_param_rows()
    ]
    return "\n".join(lines) + "\n"


def markdown_document() -> str:
    """docs/algorithms.md, whole."""
    return "\n".join(
        [
            "# Algorithm presets and their papers",
            "",
            "*For: someone choosing a preset or a unit's parameters, or citing the paper and section behind a setting.*",
            "",
            "A preset is a named bundle of registered units and numbers (`algorithm: {preset: NAME}`); any field",
            "set explicitly under `algorithm:` wins. Every value carries its citation.",
            "Generated by `make docs` (or `workbench algorithms --format markdown > docs/algorithms.md`);",
            "`tests/test_generated_docs.py` fails when this file and `workbench/algorithms/presets.py` disagree.",
            "",
            "```bash",
            "workbench algorithms            # the presets as a table of resolved settings",
            "workbench algorithms show dapo  # each setting of one preset, with its paper and section",
            "```",
            "",
            "## Presets",
            "",
            markdown_preset_table(),
            *[f"- `{p.name}`: {p.summary} ({p.paper.short}, {p.paper.authors})." for p in PRESET_LIST],
            "",
            "## Unit parameters",
            "",
            "A unit's own knobs are its keyword-only parameters, with its defaults. They go in",
            "`algorithm.loss_params` or `algorithm.estimator_params`, checked against the unit's signature when",
            "the study loads (an unknown key or a wrong type is a one-line error naming the unit and its valid",
            "keys). `clip_low`, `clip_high` and `dual_clip` also have fields of their own, the spelling presets",
            "use and a resolved config stores: `loss_params: {clip_high: 0.28}` is `clip_high: 0.28`. A preset's",
            "`loss_params` merge with yours key by key. An empty mapping is the default, so run keys of studies",
            "that never set one do not change.",
            "",
            "```yaml",
            "algorithm:",
            "  preset: grpo",
            "  estimator_params: {epsilon: 1.0e-4}   # grpo's (r - mean) / (std + epsilon)",
            "```",
            "",
            markdown_unit_params(),
            "With `agg_mode: seq-mean-token-sum-norm` and no `norm_constant`, a run divides by its generation",
            "budget `sampler.max_new_tokens` (Dr. GRPO §3.1; `aggregate.run_norm_constant`).",
            "",
            "## Paper index",
            "",
            markdown_paper_index(),
        ]
    )
