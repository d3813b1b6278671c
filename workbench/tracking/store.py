"""Which MLflow store: explicit URI > $MLFLOW_TRACKING_URI > local sqlite in the working directory."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from workbench.tracking.redact import register_uri

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"
CHECKPOINT_ROOT_ENV = "WORKBENCH_CHECKPOINT_DIR"


def resolve_tracking_uri(uri: str | None = None) -> str:
    # Set explicitly: MLflow silently falls back to ./mlruns (a file store that raises) otherwise.
    register_uri(uri)  # its password is masked in any message from here on (tracking/redact.py)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        register_uri(os.environ["MLFLOW_TRACKING_URI"])
        return os.environ["MLFLOW_TRACKING_URI"]
    if uri:
        return uri
    return f"sqlite:///{Path(DEFAULT_DB).resolve()}"


def sqlite_file(tracking_uri: str) -> Path:
    """The database file of a ``sqlite:///PATH[?query]`` URI (a query may carry a secret: never in a file name)."""
    return Path(tracking_uri.removeprefix("sqlite:///").partition("?")[0])


def checkpoint_root(tracking_uri: str) -> Path:
    """Where runs of this store keep their local state (checkpoints, unsent metrics): ``$WORKBENCH_CHECKPOINT_DIR``
    (e.g. a shared disk), else ``checkpoints/`` next to a local sqlite store, else ``.workbench/checkpoints/``."""
    if os.environ.get(CHECKPOINT_ROOT_ENV):
        return Path(os.environ[CHECKPOINT_ROOT_ENV]).expanduser().resolve()
    if tracking_uri.startswith("sqlite:///"):
        return sqlite_file(tracking_uri).resolve().parent / "checkpoints"
    return Path(".workbench/checkpoints").resolve()


def default_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts next to a local sqlite store; a server decides its own."""
    if tracking_uri.startswith("sqlite:///"):
        db = sqlite_file(tracking_uri)
        return (db.parent / DEFAULT_ARTIFACTS).resolve().as_uri()
    return None


def get_or_create_experiment(client, name: str, tracking_uri: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        # A training experiment: the MLflow UI then opens on the runs table, not its GenAI view.
        return client.create_experiment(
            name,
            artifact_location=default_artifact_location(tracking_uri),
            tags={"mlflow.experimentKind": "custom_model_development"},
        )
    except Exception:  # created concurrently by a parallel worker
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


_READY_STORES: set[str] = set()


def ensure_store(tracking_uri: str) -> None:
    """Create a local sqlite store's tables under a file lock, once per process.

    MLflow creates (migrates) a fresh sqlite database on first use; two processes doing it at
    once crash in its table creation. The lock makes the second wait for the first, then find the
    tables. Other stores are created by whoever runs them (a server, a DBA).
    """
    if tracking_uri in _READY_STORES or not tracking_uri.startswith("sqlite:///"):
        return
    from mlflow import MlflowClient

    db = sqlite_file(tracking_uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.parent / f".{db.name}.create-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close, or by the kernel if this process dies
        MlflowClient(tracking_uri).search_experiments(max_results=1)  # creates the tables if missing
    _READY_STORES.add(tracking_uri)
