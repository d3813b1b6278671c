"""Study YAML -> validated ``Study`` -> one ``RunSpec`` per run. Pure: no MLflow, no execution.

A study is a base run config, named variants (deep overrides of the base), a grid (cartesian
product over dotted run-config paths), a zip (paired lists, one more grid axis), seeds and
exclusions::

    name: grpo-vs-dr-grpo
    include: common.yaml          # optional: inherit that file's fields, then deep-override them
    base: {model: {builtin: tiny}, learner: {lr: 1.0e-4}, algorithm: {preset: grpo}}
    variants: {grpo: {}, dr_grpo: {algorithm: {preset: dr_grpo}}}
    grid: {learner.lr: [3.0e-5, 1.0e-4]}
    zip: {sampler.dtype: [float32, bfloat16], algorithm.correction: [null, tis]}
    seeds: [0, 1, 2]
    replicate: {cold_start: 3}    # optional: 3 independent cold starts per arm, the seeds nested in each
    exclude: [{variant: dr_grpo, learner.lr: 3.0e-5}]

Precedence, lowest first: ``base`` < the study's ``health:``/``tracking:`` < the variant < the
grid/zip values < the seed. ``include:`` (relative to the including file, chains allowed, cycles
an error) deep-merges: mappings merge key by key (so inherited variants and grid axes stay and new
ones are appended), lists (``seeds``, ``exclude``, axis values) are replaced. Expansion order: variants in file order, then grid points (grid axes in
file order, the zip as one last axis; the last axis varies fastest), then seeds.

Every problem is reported as a ``StudyError`` (a ``ValueError``) whose lines read
``FILE:LINE YAML.PATH: what is wrong``; all problems are reported, one per line, not only the first.
Lines come from the YAML itself: an error in a variant's resolved config points at the line where
the offending key was written (the variant's line if the variant set it, the grid line if a grid
value did, otherwise the base line), also across ``include:`` files.

The YAML dialect is YAML 1.2-like where YAML 1.1 surprises: only ``true``/``false`` are booleans
(``preset: off`` is the string ``"off"``) and ``1e-4`` is a float, as ``1.0e-4`` is. Duplicate
keys in a mapping are an error.

The package, one module per job: `report` (the issue type and where each path was written),
`yaml_positions` (bounded read, parse, line index), `paths` (dotted run-config paths),
`schema` (the `Study` model and its checks), `expand` (runs), `load` (files, `include:`),
`overrides` (`--set`).

Public API::

    study = load_study("studies/x.yaml")          # Study; StudyError if anything is wrong
    specs = expand(study)                          # list[RunSpec] (variant, seed, grid, config, run_key, label)
    study = apply_overrides(study, ["learner.lr=3e-4", "seeds=[0]"])   # `workbench run --set`
    cfg = apply_overrides(cfg_dict, ["sampler.backend=hf"])             # plain run-config dicts too
"""

from __future__ import annotations

from workbench.study.expand import RunSpec, arm_of_label, expand
from workbench.study.load import load_study, validate_study
from workbench.study.overrides import apply_overrides, parse_override
from workbench.study.paths import config_path_error
from workbench.study.report import StudyError, StudyIssue
from workbench.study.schema import STUDY_VERSION, Study
from workbench.study.yaml_positions import MAX_ALIASES, MAX_EXPANDED_NODES, MAX_STUDY_BYTES, read_bounded_text

__all__ = [
    "MAX_ALIASES",
    "MAX_EXPANDED_NODES",
    "MAX_STUDY_BYTES",
    "STUDY_VERSION",
    "RunSpec",
    "Study",
    "StudyError",
    "StudyIssue",
    "apply_overrides",
    "arm_of_label",
    "config_path_error",
    "expand",
    "load_study",
    "parse_override",
    "read_bounded_text",
    "validate_study",
]
