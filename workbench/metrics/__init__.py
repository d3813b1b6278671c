"""Canonical metrics: the catalogue (names are a contract) and their computation."""

from workbench.metrics.catalogue import BY_NAME, CATALOGUE, MetricSpec

__all__ = ["BY_NAME", "CATALOGUE", "MetricSpec"]
