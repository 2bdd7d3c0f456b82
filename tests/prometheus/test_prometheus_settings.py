"""Prometheus connection settings from the environment (spec §9.6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.prometheus import window_literal
from connectors.prometheus_api import DEFAULT_ENDPOINT, PrometheusSettings


def test_defaults_without_environment() -> None:
    settings = PrometheusSettings.from_env({})
    assert settings == PrometheusSettings(endpoint=DEFAULT_ENDPOINT, timeout_s=10.0)
    assert settings.ssl_verify is False


@pytest.mark.parametrize(("timeout", "seconds"), [("3", 3.0), ("2.5", 2.5)])
def test_every_variable_is_read(tmp_path: Path, timeout: str, seconds: float) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not checked here")
    settings = PrometheusSettings.from_env(
        {
            "PROMETHEUS_ENDPOINT": "https://prom.example:9090",
            "PROMETHEUS_TOKEN": "secret",
            "PROMETHEUS_TOKEN_FILE": "/var/run/token",
            "PROMETHEUS_SSL_VERIFY": "True",
            "PROMETHEUS_CA_BUNDLE": str(bundle),
            "PROMETHEUS_EXTRA_QUERY_PARAMS": "dedup=false&partial_response=true",
            "DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS": timeout,
        }
    )
    assert settings == PrometheusSettings(
        endpoint="https://prom.example:9090",
        token="secret",
        token_file="/var/run/token",
        ssl_verify=True,
        ca_bundle=str(bundle),
        extra_query_params=(("dedup", "false"), ("partial_response", "true")),
        timeout_s=seconds,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS": "0"}, "timeout must be > 0"),
        ({"DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS": "-1"}, "timeout must be > 0"),
        ({"DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS": "soon"}, "is not a number"),
        ({"PROMETHEUS_CA_BUNDLE": "/nonexistent/ca.pem"}, "does not exist"),
        ({"PROMETHEUS_ENDPOINT": "prom:9090"}, "must be http"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrometheusSettings.from_env(env)


def test_windows_are_integer_seconds_or_milliseconds() -> None:
    assert [window_literal(w) for w in (180, 180.0, 7.25)] == ["180s", "180s", "7250ms"]
    for bad in (0, -5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="window must be a positive number"):
            window_literal(bad)
