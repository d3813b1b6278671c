"""Analyses of a study's stored results, as library functions the CLI and the notebook call (issue 45)."""
