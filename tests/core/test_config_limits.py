"""Config files that used to load and then crash or silently misbehave are refused at start,
with an error naming the field (or key) and where.

Each case here was found by an input-robustness audit: a tick interval of 1e-300 s (a
ZeroDivisionError inside bytewax's window), 1e300 s (an OverflowError allocating history),
a deployment defined twice (the first definition lost, its events dead-lettered), a deployment
name no event can carry, and ``"yes"`` / ``"50"`` taken for a boolean and a number.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schemas import ConfigError, PlannerConfig, load_config
from schemas.events import MAX_DEPLOYMENT_NAME
from tests.flow.runner import flowplanner

REPO = Path(__file__).resolve().parents[2]
RECORDING = str(REPO / "examples/decode_burst.jsonl")
DECODE = {
    "mode": "decode",
    "optimization_target": "sla",
    "itl_ms": 60,
    "enable_load_scaling": True,
    "enable_throughput_scaling": True,
}


def write(tmp_path: Path, text: str, name: str = "planner.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(path: Path | str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def one_field(tmp_path: Path, field: str, value: object) -> str:
    """The error of a config with ``field: value`` (written as YAML, as a user would)."""
    text = yaml.safe_dump({"deployments": {"llama": {**DECODE, field: value}}})
    return config_error(write(tmp_path, text))


# --- 1. intervals and periods ---------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["load_adjustment_interval_seconds", "throughput_adjustment_interval_seconds"]
)
@pytest.mark.parametrize("value", [1e-300, 0.0009, 0.05, 1e300, 86400.5])
def test_a_tick_interval_outside_a_tenth_of_a_second_to_a_day_is_refused(tmp_path, field, value):
    message = one_field(tmp_path, field, value)
    assert f"deployments.llama.{field}: " in message
    assert "between 0.1 s and 86400 s" in message and repr(value) in message


@pytest.mark.parametrize("value", [0.1234, 5.005, 0.333])
def test_a_tick_interval_off_the_10_ms_grid_is_refused(tmp_path, value):
    # the tick window is the gcd of the intervals at ms resolution: 0.1234 s would run at
    # 123 ms, and odd intervals would make the window (and the tick count) arbitrary small
    message = one_field(tmp_path, "load_adjustment_interval_seconds", value)
    assert "load_adjustment_interval_seconds" in message and "10 ms" in message


@pytest.mark.parametrize("value", [0.1, 0.25, 5, 60.4, 86400])
def test_tick_intervals_on_the_grid_load(value):
    config = PlannerConfig(
        optimization_target="sla",
        load_adjustment_interval_seconds=value,
        enable_throughput_scaling=False,
        enable_load_scaling=True,
    )
    assert config.load_adjustment_interval_seconds == value


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("allowed_lateness_seconds", 1e300, "less than or equal to 86400"),
        ("load_rate_window_seconds", 1e300, "less than or equal to 86400"),
        ("seasonal_period_seconds", 1e300, "less than or equal to 2678400"),
        ("engine_silence_seconds", 1e-300, "greater than or equal to 1"),
        ("report_interval_hours", 1e-300, "greater than or equal to 0.01"),
    ],
)
def test_other_periods_are_bounded(tmp_path, field, value, needle):
    message = one_field(tmp_path, field, value)
    assert f"deployments.llama.{field}: " in message and needle in message


def test_yaml_exponents_without_a_dot_are_numbers(tmp_path):
    # PyYAML (YAML 1.1) reads ``1e-300`` and ``1.5e3`` as strings; with strict numbers that
    # would be refused as "not a number" instead of by the bound the value breaks
    text = "deployments:\n  d:\n    ttft_ms: 1.5e3\n    load_adjustment_interval_seconds: 1e1\n"
    config = load_config(write(tmp_path, text))["d"]
    assert (config.ttft_ms, config.load_adjustment_interval_seconds) == (1500.0, 10.0)


@pytest.mark.parametrize("text", ["010", "0b11", "0x1F", "0o17", "1:30", "1_000", "00.5"])
def test_yaml_1_1_number_spellings_are_refused_as_written(tmp_path, text):
    # YAML 1.1 would read these as 8, 3, 31, 15, 90, 1000 and 0.5: values nobody meant
    path = write(
        tmp_path, f"deployments:\n  d:\n    optimization_target: sla\n    itl_ms: {text}\n"
    )
    message = config_error(path)
    assert "deployments.d.itl_ms: " in message and repr(text) in message


@pytest.mark.parametrize("text", ["yes", "no", "on", "off", "Yes"])
def test_yaml_1_1_booleans_are_refused_as_written(tmp_path, text):
    # YAML 1.1 reads ``enable_load_scaling: no`` as false, where ``"no"`` is refused
    text_ = f"deployments:\n  d:\n    optimization_target: sla\n    advisory: {text}\n"
    message = config_error(write(tmp_path, text_))
    assert "deployments.d.advisory: " in message and repr(text) in message


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("max_num_fpm_samples", 2**63, "less than or equal to 100000"),
        ("kalman_min_points", 10**9, "less than or equal to 100000"),
        ("prefill_scale_up_queue_tokens", 2**63, "less than or equal to"),
        ("max_gpu_budget", -2, "greater than or equal to -1"),
        ("min_gpu_budget", -2, "greater than or equal to -1"),
    ],
)
def test_counts_and_budgets_are_bounded(tmp_path, field, value, needle):
    message = one_field(tmp_path, field, value)
    assert f"deployments.llama.{field}: " in message and needle in message


def test_the_cli_refuses_a_sub_microsecond_interval_before_running(tmp_path):
    # before: a ZeroDivisionError traceback from inside bytewax's tumbling window
    config = write(
        tmp_path,
        "deployments:\n  llama:\n    mode: decode\n    optimization_target: sla\n"
        "    enable_load_scaling: true\n    enable_throughput_scaling: false\n"
        "    load_adjustment_interval_seconds: 1e-300\n",
    )
    done = flowplanner("run", "--config", str(config), "--input", RECORDING)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "events in" not in done.stderr
    assert "deployments.llama.load_adjustment_interval_seconds: " in done.stderr


def test_shipped_configs_still_load():
    for path in ("examples/planner.yaml", "examples/decode.yaml", "deploy/planner.yaml"):
        assert load_config(REPO / path)


# --- 2. duplicate keys -----------------------------------------------------------------------


def test_a_deployment_defined_twice_is_refused_naming_the_key_and_lines(tmp_path):
    path = write(
        tmp_path,
        "deployments:\n  llama:\n    mode: decode\n    optimization_target: sla\n"
        "  llama:\n    mode: agg\n",
    )
    message = config_error(path)
    assert message.startswith(f"{path}:5:3: duplicate key 'llama' (first at line 2)")


def test_a_field_set_twice_is_refused(tmp_path):
    path = write(tmp_path, "deployments:\n  d:\n    itl_ms: 50\n    ttft_ms: 9\n    itl_ms: 5\n")
    assert f"{path}:5:5: duplicate key 'itl_ms' (first at line 3)" in config_error(path)


def test_a_field_set_twice_on_one_line_is_refused(tmp_path):
    path = write(tmp_path, "deployments:\n  d: {itl_ms: 50, itl_ms: 5}\n")
    assert f"{path}:2:19: duplicate key 'itl_ms' (first at line 2)" in config_error(path)


def test_a_duplicate_key_in_json_is_refused(tmp_path):
    text = '{"deployments": {"d": {"mode": "agg"}, "d": {"mode": "decode"}}}'
    assert "duplicate key 'd'" in config_error(text)  # inline
    assert "duplicate key 'd'" in config_error(write(tmp_path, text, "planner.json"))


def test_the_cli_refuses_a_duplicate_deployment(tmp_path):
    # before: the run went ahead with the second 'llama' only (agg), and dead-lettered events
    config = write(
        tmp_path,
        "deployments:\n  llama:\n    mode: decode\n    optimization_target: sla\n"
        "    enable_load_scaling: true\n  llama:\n    mode: prefill\n",
    )
    done = flowplanner("run", "--config", str(config), "--input", RECORDING)
    assert done.returncode == 2, done.stderr
    assert "duplicate key 'llama'" in done.stderr and "events in" not in done.stderr


SHARED = (
    "deployments:\n"
    "  a: &defaults\n    mode: decode\n    optimization_target: sla\n    itl_ms: 50\n"
    "    enable_load_scaling: true\n"
    "  b:\n    <<: *defaults\n    itl_ms: 40\n"
)


def test_two_deployments_may_share_settings_by_a_yaml_merge_key(tmp_path):
    # before: "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'"
    configs = load_config(write(tmp_path, SHARED))
    assert list(configs) == ["a", "b"]
    assert configs["b"].mode == "decode" and configs["b"].enable_load_scaling
    assert (configs["a"].itl_ms, configs["b"].itl_ms) == (50.0, 40.0)  # the key beside wins


def test_merges_of_several_mappings_load(tmp_path):
    text = (
        "deployments:\n  a: &sla {optimization_target: sla, itl_ms: 50}\n"
        "  b: &decode {mode: decode, enable_load_scaling: true}\n"
        "  c:\n    <<: [*sla, *decode]\n    ttft_ms: 300\n"
    )
    c = load_config(write(tmp_path, text))["c"]
    assert (c.optimization_target, c.mode, c.ttft_ms) == ("sla", "decode", 300.0)


def test_a_key_named_twice_beside_a_merge_is_still_refused(tmp_path):
    path = write(tmp_path, SHARED + "    itl_ms: 30\n")
    assert f"{path}:10:5: duplicate key 'itl_ms' (first at line 9)" in config_error(path)
    anchored = SHARED.replace("    itl_ms: 50\n", "    itl_ms: 50\n    mode: agg\n")
    assert "duplicate key 'mode' (first at line 3)" in config_error(write(tmp_path, anchored))


# --- 3. deployment names ---------------------------------------------------------------------


def test_a_deployment_name_events_cannot_carry_is_refused(tmp_path):
    longest = "d" * MAX_DEPLOYMENT_NAME
    assert list(load_config(f'{{"deployments": {{"{longest}": {{}}}}}}')) == [longest]
    message = config_error(f'{{"deployments": {{"{longest}x": {{}}}}}}')
    assert "deployments" in message and f"at most {MAX_DEPLOYMENT_NAME} characters" in message


# --- 4. strict types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("enable_load_scaling", "yes"),
        ("enable_throughput_scaling", "no"),
        ("advisory", "true"),
        ("queue_aware_estimates", 1),
        ("itl_ms", "50"),
        ("max_gpu_budget", "8"),
        ("max_gpu_budget", 8.5),
        ("min_endpoint", True),
    ],
)
def test_strings_and_other_types_are_not_coerced(tmp_path, field, value):
    message = one_field(tmp_path, field, value)
    assert f"deployments.llama.{field}: " in message and f"got {value!r}" in message


def test_real_yaml_values_load(tmp_path):
    text = (
        "deployments:\n  d:\n    optimization_target: sla\n    enable_load_scaling: true\n"
        "    itl_ms: 40\n    ttft_ms: 250.5\n    max_gpu_budget: 12\n"
    )
    config = load_config(write(tmp_path, text))["d"]
    assert (config.enable_load_scaling, config.itl_ms, config.max_gpu_budget) == (True, 40, 12)
