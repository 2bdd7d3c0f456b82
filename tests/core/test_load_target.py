"""``optimization_target: load`` (reference spec §4.1, §4.3, §9.4): user thresholds on the easy
targets' signals — raw queued prefill tokens, and the decode/agg KV utilisation in percent.

Up when ANY engine is at or above the up threshold, down when ALL are at or below the down
threshold (and there are at least two replicas). Capabilities as in the easy-target tests:
context_length 4096 (unused by this target) and max_kv_tokens 100 000.
"""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from schemas import EngineCapabilities, PlannerConfig, WorkerCapabilities, WorkerCounts
from schemas.config_file import ConfigError, load_config
from tests.core.planner_inputs import run_tick
from tests.core.test_easy_scaling import (
    decode_engines,
    decode_outcome,
    machine,
    prefill_engines,
    prefill_outcome,
)

PREFILL = {"prefill_scale_up_queue_tokens": 1000, "prefill_scale_down_queue_tokens": 100}
DECODE = {"decode_scale_up_kv_rate": 80, "decode_scale_down_kv_rate": 30}


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        ((1000,), (2, "scale_up")),  # at the up threshold
        ((999,), (None, "no_change")),
        ((1000, 0, 0), (4, "scale_up")),  # one hot engine is enough
        ((100, 100), (1, "scale_down")),  # all at the down threshold
        ((100, 0, 50), (2, "scale_down")),
        ((100, 101), (None, "no_change")),  # one engine above the down threshold
        ((500, 50), (None, "no_change")),  # between the thresholds
        ((0,), (None, "no_change")),  # one replica never scales down
    ],
)
def test_prefill_scales_on_raw_queued_tokens(queued, expected):
    assert prefill_outcome("load", *queued, **PREFILL) == expected


def test_prefill_needs_no_context_length():
    caps = WorkerCapabilities(prefill=EngineCapabilities())
    assert prefill_outcome("load", 5000, caps=caps, **PREFILL) == (2, "scale_up")
    # the throughput target divides by context_length, so it cannot decide without it
    assert prefill_outcome("throughput", 5000, caps=caps) == (None, "insufficient_data")


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ([80_000], (2, "scale_up")),  # u = 0.8 at 80 %: inclusive (the easy targets use >)
        ([79_999], (None, "no_change")),
        ([10_000, (50_000, 30_000)], (3, "scale_up")),  # scheduled + queued decode KV
        ([30_000, 30_000], (1, "scale_down")),  # all at 30 %
        ([30_000, 30_001], (None, "no_change")),
        ([50_000, 50_000], (None, "no_change")),
    ],
)
def test_decode_scales_on_kv_rate(loads, expected):
    assert decode_outcome("decode", "load", *loads, **DECODE) == expected


def test_fractional_kv_rates():
    rates = {"decode_scale_up_kv_rate": 72.5, "decode_scale_down_kv_rate": 0.5}
    assert decode_outcome("decode", "load", 72_500, **rates) == (2, "scale_up")
    assert decode_outcome("decode", "load", 72_499, **rates) == (None, "no_change")
    assert decode_outcome("decode", "load", 500, 500, **rates) == (1, "scale_down")


@pytest.mark.parametrize(
    ("loads", "queued_prefill", "expected"),
    [
        ([20_000], 60_000, (2, "scale_up")),  # queued prompt tokens count as future KV: 80 %
        ([20_000], 0, (None, "no_change")),
        ([10_000, 10_000], 20_000, (1, "scale_down")),  # 30 % each
        ([10_000, 10_000], 20_001, (None, "no_change")),
    ],
)
def test_agg_uses_the_agg_signal_with_the_kv_rates(loads, queued_prefill, expected):
    outcome = decode_outcome("agg", "load", *loads, queued_prefill=queued_prefill, **DECODE)
    assert outcome == expected


def test_disagg_applies_each_roles_thresholds():
    core = machine("disagg", "load", **PREFILL, **DECODE)
    counts = WorkerCounts(ready_num_prefill=2, ready_num_decode=2)
    effects = run_tick(
        core,
        prefill=prefill_engines(1000, 0),
        decode=decode_engines(30_000, 20_000),
        counts=counts,
    )
    target = effects.scale_to
    assert (target.num_prefill, target.num_decode) == (3, 1)
    assert (target.prefill_reason, target.decode_reason) == ("scale_up", "scale_down")


def test_missing_max_kv_tokens_is_insufficient_data():
    no_caps = WorkerCapabilities(decode=EngineCapabilities())
    assert decode_outcome("decode", "load", 90_000, caps=no_caps, **DECODE) == (
        None,
        "insufficient_data",
    )


def test_min_endpoint_and_scaling_in_progress_as_for_the_easy_targets():
    assert prefill_outcome("load", 0, 0, min_endpoint=2, **PREFILL) == (None, "no_change")
    assert prefill_outcome("load", 0, 0, 0, prefill_min_endpoint=2, **PREFILL) == (
        2,
        "scale_down",
    )
    effects = run_tick(
        machine("prefill", "load", **PREFILL),
        prefill=prefill_engines(8192),
        counts=WorkerCounts(ready_num_prefill=1, expected_num_prefill=2),
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "scaling_in_progress"


@pytest.mark.parametrize("mode", ["disagg", "prefill", "decode", "agg"])
def test_load_target_creates_no_perf_models_and_no_predictors(mode):
    fields = {
        **(PREFILL if mode in ("disagg", "prefill") else {}),
        **(DECODE if mode != "prefill" else {}),
    }
    core = machine(mode, "load", **fields)
    assert (core.prefill_model, core.decode_model, core.agg_model) == (None, None, None)
    assert core.forecaster is None
    assert not core.initial_tick(0.0).need_traffic_metrics


class TestConfig:
    def test_forces_load_on_and_throughput_off(self):
        config = PlannerConfig(
            mode="prefill",
            optimization_target="load",
            enable_load_scaling=False,
            enable_throughput_scaling=True,
            **PREFILL,
        )
        assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)

    @pytest.mark.parametrize(
        ("mode", "fields", "missing"),
        [
            ("prefill", {}, "prefill_scale_up_queue_tokens and prefill_scale_down_queue_tokens"),
            ("decode", {"decode_scale_up_kv_rate": 80}, "decode_scale_down_kv_rate"),
            ("agg", {"decode_scale_down_kv_rate": 30}, "decode_scale_up_kv_rate"),
            ("disagg", PREFILL, "decode_scale_up_kv_rate and decode_scale_down_kv_rate"),
            ("disagg", DECODE, "prefill_scale_up_queue_tokens and prefill_scale_down_queue_tokens"),
        ],
    )
    def test_thresholds_of_each_role_are_required(self, mode, fields, missing):
        with pytest.raises(ValidationError, match=f"mode '{mode}' needs {missing} "):
            PlannerConfig(mode=mode, optimization_target="load", **fields)

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            (
                {"prefill_scale_up_queue_tokens": 100, "prefill_scale_down_queue_tokens": 100},
                r"prefill_scale_up_queue_tokens \(100\) must be greater than "
                r"prefill_scale_down_queue_tokens \(100\)",
            ),
            (
                {"prefill_scale_up_queue_tokens": 10, "prefill_scale_down_queue_tokens": 500},
                r"prefill_scale_up_queue_tokens \(10\) must be greater",
            ),
            (
                {**PREFILL, "decode_scale_up_kv_rate": 30, "decode_scale_down_kv_rate": 30.0},
                r"decode_scale_up_kv_rate \(30\) must be greater than decode_scale_down_kv_rate",
            ),
            (
                {**PREFILL, "decode_scale_up_kv_rate": 20, "decode_scale_down_kv_rate": 60},
                r"decode_scale_up_kv_rate \(20\) must be greater",
            ),
        ],
    )
    def test_up_must_be_above_down(self, fields, message):
        base = {"prefill_scale_up_queue_tokens": 1000, "prefill_scale_down_queue_tokens": 10}
        base.update(DECODE)
        with pytest.raises(ValidationError, match=message):
            PlannerConfig(mode="disagg", optimization_target="load", **{**base, **fields})

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("decode_scale_up_kv_rate", 100.5),
            ("decode_scale_down_kv_rate", -1),
            ("decode_scale_up_kv_rate", math.nan),
            ("decode_scale_up_kv_rate", math.inf),
            ("prefill_scale_down_queue_tokens", -1),
            ("prefill_scale_up_queue_tokens", 1000.0),  # a token count is an integer
            ("decode_scale_up_kv_rate", "80"),  # numbers are numbers (strict config)
        ],
    )
    def test_out_of_range_or_wrong_type_is_rejected(self, field, value):
        fields = {**PREFILL, **DECODE, field: value}
        with pytest.raises(ValidationError, match=field):
            PlannerConfig(mode="disagg", optimization_target="load", **fields)

    def test_full_range_is_accepted(self):
        config = PlannerConfig(
            mode="decode",
            optimization_target="load",
            decode_scale_up_kv_rate=100,
            decode_scale_down_kv_rate=0,
        )
        assert (config.decode_scale_up_kv_rate, config.decode_scale_down_kv_rate) == (100, 0)
        config = PlannerConfig(
            mode="prefill",
            optimization_target="load",
            prefill_scale_up_queue_tokens=1,
            prefill_scale_down_queue_tokens=0,
        )
        assert config.prefill_scale_up_queue_tokens == 1

    @pytest.mark.parametrize(
        ("mode", "field", "role"),
        [
            ("prefill", "decode_scale_up_kv_rate", "decode"),
            ("decode", "prefill_scale_down_queue_tokens", "prefill"),
            ("agg", "prefill_scale_up_queue_tokens", "prefill"),
        ],
    )
    def test_a_threshold_of_a_role_the_mode_lacks_is_refused(self, mode, field, role):
        fields = {**(PREFILL if mode == "prefill" else DECODE), field: 50}
        with pytest.raises(
            ValidationError, match=f"{field} is set but mode '{mode}' has no {role}"
        ):
            PlannerConfig(mode=mode, optimization_target="load", **fields)

    @pytest.mark.parametrize("target", ["throughput", "latency", "sla"])
    def test_thresholds_under_another_target_are_refused(self, target):
        with pytest.raises(
            ValidationError,
            match=f"decode_scale_up_kv_rate is set but optimization_target is '{target}'",
        ):
            PlannerConfig(mode="decode", optimization_target=target, **DECODE)

    def test_a_config_file_names_the_field(self, tmp_path):
        path = tmp_path / "planner.yaml"
        path.write_text(
            "deployments:\n"
            "  d:\n"
            "    mode: decode\n"
            "    optimization_target: load\n"
            "    decode_scale_up_kv_rate: 80\n"
        )
        with pytest.raises(ConfigError) as error:
            load_config(path)
        message = str(error.value)
        assert "deployments.d:" in message and "needs decode_scale_down_kv_rate" in message
        assert "reference planner" not in message  # no longer a reference-only field
        path.write_text(path.read_text() + "    decode_scale_down_kv_rate: 40\n")
        config = load_config(path)["d"]
        assert (config.optimization_target, config.decode_scale_down_kv_rate) == ("load", 40)
