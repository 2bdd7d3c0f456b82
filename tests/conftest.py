"""Shared pytest fixtures: a thin registry. Each fixture lives beside its service in tests/services/."""

from tests.services.kafka import kafka_bootstrap, kafka_topic

__all__ = ["kafka_bootstrap", "kafka_topic"]
