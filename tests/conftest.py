"""Shared pytest fixtures, a thin registry: each fixture lives beside its service."""

from tests.services.kafka import kafka_bootstrap, kafka_topic

__all__ = ["kafka_bootstrap", "kafka_topic"]
