"""PlannerConfig defaults against the reference spec's §9.1–§9.7 tables, field by field.

The spec's default tables are this test's data (:data:`SPEC`, keyed by the G3 names). A field
where flowplanner differs on purpose is in :data:`OURS` with both defaults and the reason its
docstring gives; a field of those tables that flowplanner refuses (``REFERENCE_FIELD_HINTS``)
is in :data:`REFUSED` with the spec's default, which a copied reference config would carry.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from schemas import ConfigError, PlannerConfig, load_config
from schemas.config_file import REFERENCE_FIELD_HINTS

SPEC: dict[str, Any] = {
    # §9.1 Core
    "mode": "disagg",
    "optimization_target": "throughput",
    "enable_throughput_scaling": True,
    "enable_load_scaling": False,
    "ttft_ms": 500.0,
    "itl_ms": 50.0,
    "advisory": False,
    # §9.2 Perf model / profiling (PickedParallelConfig is a type of the AIC specs, not a field)
    "decode_engine_num_gpu": None,
    "prefill_engine_num_gpu": None,
    # §9.3 Throughput scaling
    "throughput_adjustment_interval_seconds": 180.0,
    "max_throughput_scaling_replicas": 8,
    "throughput_metrics_source": "frontend",
    "load_predictor": "arima",
    "load_predictor_log1p": False,
    "load_predictor_warmup_trace": None,
    "kalman_q_level": 1.0,
    "kalman_q_trend": 0.1,
    "kalman_r": 10.0,
    "kalman_min_points": 5,
    # §9.4 Load scaling
    "load_adjustment_interval_seconds": 5.0,
    "max_num_fpm_samples": 64,
    "fpm_sample_bucket_size": 16,
    "load_scaling_down_sensitivity": 80,
    "load_min_observations": 5,
    "prefill_scale_up_queue_tokens": None,
    "prefill_scale_down_queue_tokens": None,
    "decode_scale_up_kv_rate": None,
    "decode_scale_down_kv_rate": None,
    "speculative_nextn": 0,
    # §9.5 Budget / endpoints
    "max_gpu_budget": 8,
    "min_gpu_budget": -1,
    "min_endpoint": 1,
    "prefill_min_endpoint": None,
    "decode_min_endpoint": None,
    "enable_power_awareness": False,
    "total_gpu_power_limit": None,
    # §9.6 Prometheus: the spec's fallback without PLANNER_PROMETHEUS_PORT (here `flowplanner
    # run` reads that variable, not the config)
    "metric_reporting_prometheus_port": 0,
    # §9.7 Diagnostics
    "report_interval_hours": 24.0,
    "report_output_dir": "./planner_reports",
}
"""Spec default of every §9.1–§9.7 field PlannerConfig has and keeps the spec's default of."""

OURS: dict[str, tuple[Any, Any, str]] = {
    # §9.5
    "control_api_port": (
        9086,
        0,
        "no port opens unless asked: a config shared by replays and by several workers on "
        "one host must not make each of them bind 9086",
    ),
    # §9.2
    "profile_results_dir": (
        "profiling_results",
        None,
        "no profile unless one is named: a run never depends on its working directory",
    ),
}
"""Field → (spec default, our default, why): where flowplanner's default differs on purpose."""

REFUSED: dict[str, Any] = {
    # §9.1 Core
    "backend": "vllm",
    "environment": "kubernetes",
    "namespace": "dynamo",
    "model_name": None,
    "global_planner_namespace": None,
    "log_dir": None,
    # §9.2 Perf model / profiling
    "pre_deployment_sweeping_mode": "rapid",
    "aic_interpolation": None,
    "aic_perf_model": None,
    # §9.3 Throughput scaling
    "prophet_window_size": 50,
    "isl": 3000,
    "osl": 150,
    # §9.4 Load scaling
    "load_metric_samples": 10,
    # §9.6 Prometheus (an input here: --input prometheus://... or the PROMETHEUS_* variables)
    "metric_pulling_prometheus_endpoint": (
        "http://prometheus-kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"
    ),
    "metric_pulling_prometheus_token": None,
    "metric_pulling_prometheus_token_file": None,
    "metric_pulling_prometheus_ssl_verify": False,
    "metric_pulling_prometheus_extra_query_params": None,
    "metric_pulling_prometheus_ca_bundle": None,
    "metric_pulling_prometheus_request_timeout_seconds": 10.0,
    # §9.7 Diagnostics
    "report_filename": None,
    "report_write_gzip_log": True,
    "live_dashboard_port": 8080,
}
"""Spec field → its spec default, for the §9.1–§9.7 fields flowplanner refuses."""

FORCED_BY_TARGET = frozenset({"enable_throughput_scaling", "enable_load_scaling"})
"""Flags every target but ``sla`` overrides (spec §9.1)."""


def test_defaults_follow_the_spec_tables_or_say_why_not() -> None:
    assert not (
        SPEC.keys() & OURS.keys() | SPEC.keys() & REFUSED.keys() | OURS.keys() & REFUSED.keys()
    )
    config = PlannerConfig()
    # §9.1: the default target (throughput) forces load scaling on and throughput scaling off,
    # so the two flags' own defaults show under the one target that honours them (sla)
    assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)
    sla = PlannerConfig(optimization_target="sla")
    problems = []
    for field, spec in SPEC.items():
        ours = getattr(sla if field in FORCED_BY_TARGET else config, field)
        if ours != spec:
            problems.append(f"{field}: spec {spec!r}, ours {ours!r}")
    for field, (spec, ours, reason) in OURS.items():
        assert spec != ours and reason, field  # a listed difference is one, with its reason
        if getattr(config, field) != ours:
            problems.append(f"{field}: we say {ours!r}, ours is {getattr(config, field)!r}")
    for field, spec in REFUSED.items():
        assert field not in PlannerConfig.model_fields, field
        with pytest.raises(ValidationError) as refused:
            PlannerConfig.model_validate({field: spec})
        assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [
            ("extra_forbidden", (field,))
        ]
        inline = json.dumps({"deployments": {"d": {field: spec}}})
        with pytest.raises(ConfigError) as explained:
            load_config(inline)
        assert f"deployments.d.{field}: {REFERENCE_FIELD_HINTS[field]}" in str(explained.value)
    assert not problems, "\n".join(problems)


def test_no_refusal_hint_names_a_field_or_alias_the_config_accepts() -> None:
    """A hint is shown only for a refused name: one on an accepted name could never show."""
    from pydantic import AliasChoices

    accepted = set(PlannerConfig.model_fields)
    for field in PlannerConfig.model_fields.values():
        if isinstance(field.validation_alias, AliasChoices):
            accepted |= {c for c in field.validation_alias.choices if isinstance(c, str)}
        elif isinstance(field.validation_alias, str):
            accepted.add(field.validation_alias)
    assert not accepted & set(REFERENCE_FIELD_HINTS)
