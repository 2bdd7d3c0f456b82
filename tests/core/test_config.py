"""PlannerConfig validation: the reference's config rules that apply to ours (spec §9.9, §16.9)."""

from __future__ import annotations

import json
import math
import socket

import pytest
from pydantic import ValidationError

from schemas import ConfigError, PlannerConfig, load_config

SLA = {"optimization_target": "sla", "enable_load_scaling": True}


def sla(**fields) -> PlannerConfig:
    return PlannerConfig(**{**SLA, **fields})


@pytest.mark.parametrize("buckets", [1, 4, 9, 16, 25])
def test_perfect_square_bucket_sizes_are_accepted(buckets):
    assert sla(fpm_sample_bucket_size=buckets).fpm_sample_bucket_size == buckets


@pytest.mark.parametrize("buckets", [2, 3, 5, 7, 10])
def test_other_bucket_sizes_are_rejected(buckets):
    with pytest.raises(ValidationError, match="perfect square"):
        sla(fpm_sample_bucket_size=buckets)


def test_min_observations_must_fit_in_the_sample_window():
    # protects: a perf model keeps at most max_num_fpm_samples passes, so a config asking for
    # more before the model is used would never have one (model_not_ready for good)
    with pytest.raises(ValidationError) as refused:
        sla(max_num_fpm_samples=16, load_min_observations=17)
    assert "load_min_observations 17" in str(refused.value)
    assert "max_num_fpm_samples 16" in str(refused.value)
    assert sla(max_num_fpm_samples=16, load_min_observations=16).load_min_observations == 16
    reference = PlannerConfig().reference_variant()
    assert reference.load_min_observations <= reference.max_num_fpm_samples


class TestMinEndpoints:
    def test_min_endpoint_applies_to_both_roles(self):
        config = sla(min_endpoint=2)
        assert (config.min_endpoint_for("prefill"), config.min_endpoint_for("decode")) == (2, 2)

    def test_role_overrides(self):
        config = sla(prefill_min_endpoint=3, decode_min_endpoint=4)
        assert (config.min_endpoint_for("prefill"), config.min_endpoint_for("decode")) == (3, 4)

    def test_agg_has_only_the_engine_role(self):
        config = sla(mode="agg", min_endpoint=5)
        # spec §16.9 reads (None, 5): here the inactive prefill side is "not in roles", and
        # min_endpoint_for keeps answering a number for it, which callers read for both roles
        # whatever the mode (EngineFleet.power_budget, bench.closed_loop.hindsight_replicas)
        assert config.roles == ("decode",)
        assert (config.min_endpoint_for("prefill"), config.min_endpoint_for("decode")) == (5, 5)

    @pytest.mark.parametrize(
        ("mode", "field"),
        [
            ("decode", "prefill_min_endpoint"),
            ("prefill", "decode_min_endpoint"),
            ("agg", "prefill_min_endpoint"),
            ("agg", "decode_min_endpoint"),
        ],
    )
    def test_role_fields_are_rejected_for_inactive_roles(self, mode, field):
        with pytest.raises(ValidationError, match=field):
            sla(mode=mode, **{field: 2})

    def test_scale_to_zero_is_allowed(self):
        assert sla(min_endpoint=0).min_endpoint_for("decode") == 0

    @pytest.mark.parametrize(
        "fields",
        [{"min_endpoint": -1}, {"prefill_min_endpoint": 0}, {"decode_min_endpoint": 0}],
    )
    def test_negative_or_zero_role_minimums_are_rejected(self, fields):
        with pytest.raises(ValidationError):
            sla(**fields)


class TestScalingLoops:
    @pytest.mark.parametrize("target", ["throughput", "latency"])
    def test_easy_targets_force_load_on_and_throughput_off(self, target):
        config = PlannerConfig(
            optimization_target=target, enable_load_scaling=False, enable_throughput_scaling=True
        )
        assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)
        assert not config.sla_mode

    def test_at_least_one_loop(self):
        with pytest.raises(ValidationError, match="at least one"):
            PlannerConfig(
                optimization_target="sla",
                enable_load_scaling=False,
                enable_throughput_scaling=False,
            )

    @pytest.mark.parametrize("load_interval", [60.0, 90.0])
    def test_load_interval_must_be_shorter_when_both_loops_run(self, load_interval):
        with pytest.raises(ValidationError, match="load_adjustment_interval_seconds"):
            sla(
                load_adjustment_interval_seconds=load_interval,
                throughput_adjustment_interval_seconds=60.0,
            )
        alone = sla(
            load_adjustment_interval_seconds=load_interval,
            throughput_adjustment_interval_seconds=60.0,
            enable_throughput_scaling=False,
        )
        assert alone.load_adjustment_interval_seconds == load_interval

    def test_g2_interval_aliases(self):
        config = sla(load_adjustment_interval=7, throughput_adjustment_interval=70, ttft=300)
        assert (
            config.load_adjustment_interval_seconds,
            config.throughput_adjustment_interval_seconds,
            config.ttft_ms,
        ) == (7.0, 70.0, 300.0)

    def test_agg_with_throughput_scaling_is_allowed(self):
        config = sla(mode="agg", enable_throughput_scaling=True)
        assert config.enable_throughput_scaling


class TestFieldRanges:
    def test_max_throughput_scaling_replicas(self):
        assert sla().max_throughput_scaling_replicas == 8
        with pytest.raises(ValidationError):
            sla(max_throughput_scaling_replicas=0)

    def test_speculative_nextn(self):
        assert sla().speculative_nextn == 0
        with pytest.raises(ValidationError):
            sla(speculative_nextn=-1)

    @pytest.mark.parametrize("source", ["frontend", "router"])
    def test_throughput_metrics_source(self, source):
        assert sla(throughput_metrics_source=source).throughput_metrics_source == source

    def test_unknown_metrics_source_rejected(self):
        with pytest.raises(ValidationError):
            sla(throughput_metrics_source="prometheus")

    @pytest.mark.parametrize("port", [-1, 65536])
    def test_exporter_port_range(self, port):
        with pytest.raises(ValidationError):
            sla(metric_reporting_prometheus_port=port)

    def test_scale_down_rule(self):
        assert sla().scale_down_rule == "consolidation"
        assert sla(scale_down_rule="flat").scale_down_rule == "flat"
        with pytest.raises(ValidationError):
            sla(scale_down_rule="eager")

    @pytest.mark.parametrize("field", ["capacity_isl_quantile", "capacity_osl_quantile"])
    @pytest.mark.parametrize("quantile", [0.0, 0.95, 0.75, 0.999, 1.0, 1.5, math.nan])
    def test_capacity_quantiles_are_the_ones_traffic_carries(self, field, quantile):
        # only p50/p90/p99 are computed: p95 would silently size for the mean
        with pytest.raises(ValidationError, match=r"must be one of 0\.5, 0\.9, 0\.99") as error:
            sla(**{field: quantile})
        assert field in str(error.value)

    @pytest.mark.parametrize("quantile", [0.5, 0.9, 0.99, None])
    def test_capacity_quantiles_accepted(self, quantile):
        assert sla(capacity_osl_quantile=quantile).capacity_osl_quantile == quantile

    @pytest.mark.parametrize("sensitivity", [-1, 101])
    def test_sensitivity_is_a_percentage(self, sensitivity):
        with pytest.raises(ValidationError):
            sla(load_scaling_down_sensitivity=sensitivity)

    def test_typos_are_rejected_not_defaulted(self):
        with pytest.raises(ValidationError, match="min_endpont"):
            sla(min_endpont=2)


def test_loader_names_every_bad_field(tmp_path):
    path = tmp_path / "planner.json"
    path.write_text(
        json.dumps({"deployments": {"d": {**SLA, "fpm_sample_bucket_size": 10, "itl_ms": -5}}})
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "itl_ms" in str(error.value)
    good = tmp_path / "planner.yaml"
    good.write_text("deployments:\n  d:\n    optimization_target: sla\n    mode: agg\n")
    assert load_config(good)["d"].mode == "agg"


# fields marked *ours* that need no reference value: off by default, a parameter of another
# *ours* feature, or pipeline plumbing the reference does not have
OURS_WITHOUT_REFERENCE_VALUE = {
    "seasonal_period_seconds": "Holt-Winters only (the reference uses Prophet)",
    "load_rate_utilization": "a parameter of load_rate_window_seconds",
    "allowed_lateness_seconds": "event-time plumbing",
    "engine_silence_seconds": "event-time plumbing",
    "self_benchmark_file": "an input (off by default), the file form of the reference's endpoint",
    "capabilities": "an input (off by default), what the reference reads from model cards",
}


def test_reference_variant_turns_off_every_behaviour_of_ours() -> None:
    import ast
    import inspect
    import itertools

    from schemas.config import REFERENCE_BEHAVIOUR

    body = ast.parse(inspect.getsource(PlannerConfig)).body[0].body
    ours = {
        field.target.id
        for field, doc in itertools.pairwise(body)
        if isinstance(field, ast.AnnAssign)
        and isinstance(doc, ast.Expr)
        and isinstance(doc.value, ast.Constant)
        and str(doc.value.value).startswith("*ours*")
    }
    assert "fpm_samples_per_engine_per_tick" in ours  # the parse finds them
    assert ours - set(OURS_WITHOUT_REFERENCE_VALUE) == set(REFERENCE_BEHAVIOUR)
    reference = PlannerConfig().reference_variant()
    assert all(getattr(reference, k) == v for k, v in REFERENCE_BEHAVIOUR.items())


def test_reference_variant_of_a_tuned_config_is_a_valid_reference_config() -> None:
    tuned = PlannerConfig(
        load_predictor="periodic",
        capacity_isl_quantile=0.9,
        capacity_osl_quantile=0.99,
        max_gpu_budget=16,
        min_gpu_budget=4,
    )
    reference = tuned.reference_variant()
    assert (reference.load_predictor, reference.min_gpu_budget) == ("arima", -1)
    assert reference.capacity_isl_quantile is None and reference.capacity_osl_quantile is None
    assert PlannerConfig.model_validate(reference.model_dump()) == reference
    kept = PlannerConfig(load_predictor="holt_winters").reference_variant()
    assert kept.load_predictor == "holt_winters"  # it stands in for Prophet


class TestConfigFiles:
    """A config file that cannot be read gives a one-line ConfigError naming the file."""

    def _error(self, source) -> str:
        with pytest.raises(ConfigError) as error:
            load_config(source)
        return str(error.value)

    def test_missing_file(self, tmp_path):
        path = tmp_path / "planner.yaml"
        assert self._error(path) == f"config file not found: {path}"

    def test_a_file_that_cannot_be_opened(self, tmp_path, monkeypatch):
        # a socket is there but cannot be opened (ENXIO): an OSError, not a decoding error
        monkeypatch.chdir(tmp_path)  # a socket's path is short (at most 107 bytes)
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind("planner.yaml")
            message = self._error("planner.yaml")
        assert message == "cannot read config planner.yaml: No such device or address"

    def test_inline_json_syntax_error_is_named_inline(self):
        message = self._error('{"deployments": ')
        assert message == "inline config:1:17: config is not valid JSON: Expecting value"

    def test_empty_file(self, tmp_path):
        path = tmp_path / "planner.yaml"
        path.write_text("# nothing yet\n")
        message = self._error(path)
        assert str(path) in message and "empty" in message

    def test_directory(self, tmp_path):
        message = self._error(tmp_path)
        assert str(tmp_path) in message and "directory" in message

    def test_not_utf8(self, tmp_path):
        path = tmp_path / "planner.yaml"
        path.write_bytes(b"\xff\xfe deployments")
        message = self._error(path)
        assert str(path) in message and "UTF-8" in message

    def test_yaml_syntax_error_names_the_file_and_line(self, tmp_path):
        path = tmp_path / "planner.yaml"
        path.write_text("deployments:\n  d: {mode: disagg\n")
        message = self._error(path)
        assert f"{path}:3:" in message
        assert "<unicode string>" not in message and "\n" not in message

    def test_json_syntax_error_names_the_file_and_line(self, tmp_path):
        path = tmp_path / "planner.json"
        path.write_text('{"deployments":\n  {"d": }}')
        message = self._error(path)
        assert f"{path}:2:" in message and "\n" not in message

    def test_top_level_must_be_a_mapping_of_deployments(self, tmp_path):
        path = tmp_path / "planner.yaml"
        path.write_text("- d\n")
        assert "deployments" in self._error(path)


class TestLoopFlagsUnderEasyTargets:
    """An easy target forces the loop flags (spec §4.1), but a wrong-typed flag is still a
    mistake the user should hear about, not a value silently replaced."""

    @pytest.mark.parametrize("field", ["enable_load_scaling", "enable_throughput_scaling"])
    def test_wrong_type_is_rejected(self, field):
        with pytest.raises(ValidationError, match=field):
            PlannerConfig(**{field: "maybe"})

    def test_right_type_is_still_forced(self):
        config = PlannerConfig(enable_load_scaling=False, enable_throughput_scaling=True)
        assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)

    @pytest.mark.parametrize("value", ["false", "no", 0])
    def test_a_boolean_spelled_otherwise_is_rejected_even_when_forced(self, value):
        with pytest.raises(ValidationError, match=f"enable_load_scaling .*got {value!r}"):
            PlannerConfig(enable_load_scaling=value)

    def test_a_flag_the_target_ignores_is_warned_about(self, caplog):
        PlannerConfig(optimization_target="latency", enable_throughput_scaling=True)
        [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
        assert warning.getMessage().startswith(
            "optimization_target latency ignores enable_throughput_scaling: true"
        )
        caplog.clear()
        PlannerConfig(optimization_target="latency", enable_load_scaling=True)  # as forced
        PlannerConfig(optimization_target="sla", enable_throughput_scaling=True)
        assert caplog.records == []


class TestBudgetFeasibility:
    """A budget below the minimum endpoints can never be met: the reference's clamp then
    scales the deployment to zero (spec §8.1/§8.2), so the config is rejected up front."""

    @pytest.mark.parametrize(
        ("fields", "minimum"),
        [
            ({"mode": "disagg", "min_endpoint": 5, "max_gpu_budget": 2}, 10),
            ({"mode": "agg", "min_endpoint": 3, "max_gpu_budget": 2}, 3),
            ({"mode": "decode", "decode_engine_num_gpu": 4, "max_gpu_budget": 3}, 4),
            ({"mode": "disagg", "prefill_min_endpoint": 2, "max_gpu_budget": 2}, 3),
        ],
    )
    def test_infeasible_budget_is_rejected(self, fields, minimum):
        with pytest.raises(ValidationError, match=f"max_gpu_budget.*{minimum}"):
            sla(**fields)

    @pytest.mark.parametrize(
        "fields",
        [
            {"mode": "disagg", "max_gpu_budget": 2},
            {"mode": "disagg", "min_endpoint": 5, "max_gpu_budget": -1},
            {"mode": "agg", "min_endpoint": 0, "max_gpu_budget": 0},
            {"mode": "decode", "decode_engine_num_gpu": 4, "max_gpu_budget": 4},
        ],
    )
    def test_feasible_or_disabled_budget_is_accepted(self, fields):
        assert sla(**fields).max_gpu_budget == fields["max_gpu_budget"]


def test_reference_only_fields_are_rejected_with_the_reason(tmp_path):
    path = tmp_path / "planner.yaml"
    path.write_text("deployments:\n  d:\n    backend: vllm\n    ttft_msx: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    lines = str(error.value).splitlines()
    assert "  deployments.d.backend: a field of the reference planner" in lines[1]
    assert lines[2] == "  deployments.d.ttft_msx: Extra inputs are not permitted"


def test_a_ported_reference_config_is_told_where_each_setting_went(tmp_path):
    path = tmp_path / "planner.yaml"
    path.write_text(
        "deployments:\n  d:\n    load_predictor: prophet\n    adjustment_interval: 60\n"
        "    load_learning_window: 32\n    metric_pulling_prometheus_endpoint: http://p:9090\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    hints = dict(line.strip().split(": ", 1) for line in str(error.value).splitlines()[1:])
    assert "holt_winters" in hints["deployments.d.load_predictor"]
    assert "throughput_adjustment_interval_seconds" in hints["deployments.d.adjustment_interval"]
    assert "max_num_fpm_samples" in hints["deployments.d.load_learning_window"]
    assert "--input prometheus://" in hints["deployments.d.metric_pulling_prometheus_endpoint"]


def test_one_deployments_settings_without_the_deployments_key_are_named(tmp_path):
    path = tmp_path / "planner.yaml"
    path.write_text("mode: agg\noptimization_target: sla\nttft_ms: 300\n")
    with pytest.raises(ConfigError, match=r"under 'deployments: \{NAME: \.\.\.\}'"):
        load_config(path)


def test_zero_kalman_variances_are_the_reference_floors() -> None:
    from operators.predictors import build_predictor

    config = PlannerConfig(load_predictor="kalman", kalman_q_trend=0, kalman_r=0)
    predictor = build_predictor(config)
    for y in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        predictor.learn_one(y)
    assert predictor.forecast() == pytest.approx(70.0, rel=1e-3)  # no trend noise: a line
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        PlannerConfig(kalman_q_level=-1)


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "deep.yaml",
            "deployments:\n  d: {x: " + "[" * 500 + "]" * 500 + "}\n",
            "nested too deeply",
        ),
        (
            "deep.json",
            '{"deployments": {"d": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}}",
            "nested",
        ),
        ("big.json", '{"deployments": {"d": {"itl_ms": ' + "9" * 5000 + "}}}", "JSON: .*4300"),
        ("big.yaml", "deployments:\n  d: {itl_ms: " + "9" * 5000 + "}\n", "YAML: .*4300"),
    ],
)
def test_a_config_too_deep_or_too_long_to_read_is_a_config_error(tmp_path, name, text, problem):
    # protects: these escaped the loader as a RecursionError or ValueError traceback (exit 1)
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_config(path)
