"""Which MLflow store: explicit URI > $MLFLOW_TRACKING_URI > local sqlite in the working directory."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"


def resolve_tracking_uri(uri: str | None = None) -> str:
    # Set explicitly: MLflow silently falls back to ./mlruns (a file store that raises) otherwise.
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if uri:
        return uri
    return f"sqlite:///{Path(DEFAULT_DB).resolve()}"


def default_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts next to a local sqlite store; a server decides its own."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///"))
        return (db.parent / DEFAULT_ARTIFACTS).resolve().as_uri()
    return None


def get_or_create_experiment(client, name: str, tracking_uri: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        # A training experiment: the MLflow UI then opens on the runs table, not its GenAI view.
        return client.create_experiment(name, artifact_location=default_artifact_location(tracking_uri),
                                        tags={"mlflow.experimentKind": "custom_model_development"})
    except Exception:  # created concurrently by a parallel worker
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id
