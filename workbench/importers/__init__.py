"""Import other frameworks' runs (TRL, verl; from MLflow, their log files, TensorBoard or W&B) into the canonical vocabulary, as workbench studies.

    from workbench.importers import ADAPTERS, runs_from_mlflow, write_study

    adapter = ADAPTERS.get("trl")
    runs = runs_from_mlflow(adapter, "sqlite:///trl.db", "grpo", "param:loss_type", "param:seed")
    write_study(adapter, runs, "sqlite:///mlflow.db", "trl-loss-types", source_note={})

Adapters are data (:mod:`.adapters`; one module per framework registers its own); reading
(:mod:`.load`) and writing (:mod:`.write`) never name a framework. docs/import.md has the tables.
"""

from . import trl, verl  # noqa: F401 - register the adapters
from .adapters import ADAPTERS, SOURCE_PREFIX, Adapter, MetricMapping
from .errors import ImportSourceError
from .load import SourceRun, runs_from_files, runs_from_mlflow
from .tensorboard import read_tensorboard_run
from .trackers import TrackedRun, runs_from_tracker
from .wandb import read_wandb_run
from .write import DEFAULT_COMPARE_METRICS, ImportOutcome, write_study

#: ``workbench import TRACKER DIR...``: how each tracker's run directory is read (the framework's adapter maps it)
TRACKER_READERS = {"tensorboard": read_tensorboard_run, "wandb": read_wandb_run}

__all__ = [
    "ADAPTERS",
    "DEFAULT_COMPARE_METRICS",
    "SOURCE_PREFIX",
    "Adapter",
    "ImportOutcome",
    "ImportSourceError",
    "MetricMapping",
    "SourceRun",
    "TRACKER_READERS",
    "TrackedRun",
    "runs_from_files",
    "runs_from_mlflow",
    "runs_from_tracker",
    "write_study",
]
