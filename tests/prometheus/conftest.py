"""Fixtures of the Prometheus tests (the server itself lives in tests/services/prometheus.py)."""

from tests.services.prometheus import start_prometheus

__all__ = ["start_prometheus"]
