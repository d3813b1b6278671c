"""MLflow tracking: where runs are written (writer) and read back (reader)."""
