"""``flowplanner run`` addresses: what cannot work is refused at startup with an
``EndpointError`` naming the address, never accepted to fail (or crash) once running."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path

import pytest

from connectors.dgd_dataflow import DgdInventorySource
from connectors.kafka import KafkaEventSource, KafkaTraceSource
from connectors.merged import MergedSource
from connectors.prometheus import PrometheusTrafficInput
from connectors.recorded import RecordedSource
from connectors.zmq_source import EndpointSpec, ZmqFpmSource
from flows import endpoints
from flows.endpoints import EndpointError, wire
from schemas import PlannerConfig

CONFIGS = {"llama": PlannerConfig(mode="agg"), "split": PlannerConfig(mode="disagg")}
DGD = "dgd://ns/graph?deployment=llama&host=http://127.0.0.1:1"


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("zmq+tcp://127.0.0.1:29999?deployment=typo&role=decode", "configured deployment"),
        ("zmq+tcp://127.0.0.1:29999?role=decode", "configured deployment"),
        ("zmq+tcp://127.0.0.1:29999?deployment=llama&role=prefill", "role 'prefill' is not part"),
        ("zmq+ipc:///tmp/fpm?deployment=split&role=router", "role 'router' is not part"),
    ],
)
def test_an_fpm_publisher_must_belong_to_a_configured_deployment_and_role(address, message):
    with pytest.raises(EndpointError, match=message) as caught:
        wire([address], ["-"], CONFIGS)
    assert address in str(caught.value)


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("zmq+tcp://127.0.0.1?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        ("zmq+tcp://127.0.0.1:x?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        # one HOST:PORT check with kafka:// brokers (connectors.address.has_host_port): these
        # were accepted and connected to nothing (port 0) or crashed the source (no host, '*')
        ("zmq+tcp://:9090?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        ("zmq+tcp://*:9090?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        ("zmq+tcp://h:0?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        (
            "zmq+tcp://u@127.0.0.1:5555?deployment=split&role=decode",
            "give the publisher's HOST:PORT",
        ),
        ("zmq+tcp://h:70000?deployment=split&role=decode", "give the publisher's HOST:PORT"),
        (
            "zmq+tcp://127.0.0.1:29999?deployment=split",
            "say which role its engines play (?role=R, one of prefill",
        ),
    ],
)
def test_an_fpm_publisher_needs_a_port_and_in_a_split_deployment_a_role(address, message):
    with pytest.raises(EndpointError, match=re.escape(message)):
        wire([address], ["-"], CONFIGS)


def test_a_single_role_deployment_needs_no_role():
    [source] = wire(["zmq+tcp://[::1]:29999?deployment=llama"], ["-"], CONFIGS).inputs
    assert isinstance(source, ZmqFpmSource)
    assert source.endpoints == [EndpointSpec("tcp://[::1]:29999", "llama", "decode")]


def test_a_valid_fpm_publisher_is_wired():
    wiring = wire(["zmq+tcp://127.0.0.1:29999?deployment=split&role=prefill"], ["-"], CONFIGS)
    [source] = wiring.inputs
    assert isinstance(source, ZmqFpmSource) and wiring.live
    assert source.endpoints == [EndpointSpec("tcp://127.0.0.1:29999", "split", "prefill")]


@pytest.mark.parametrize("interval", ["inf", "-inf", "nan", "0", "-5", "soon", "1e300"])
def test_a_dgd_poll_interval_must_be_a_finite_positive_number(interval):
    with pytest.raises(EndpointError, match="interval must be a finite number of seconds > 0"):
        wire([], [f"{DGD}&interval={interval}"], CONFIGS)


def test_a_dgd_poll_interval_is_read_in_seconds():
    [source] = wire([], [f"{DGD}&interval=2.5"], CONFIGS).inputs
    assert isinstance(source, DgdInventorySource)
    assert source.interval == timedelta(seconds=2.5)


def test_recorded_files_become_one_source(tmp_path: Path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    a.write_text(""), b.write_bytes(b"")
    [source] = wire([str(a), f"file://{b}"], ["-"], CONFIGS).inputs
    assert isinstance(source, RecordedSource) and source.paths == [a, b]
    with pytest.raises(EndpointError, match="given twice"):
        wire([str(a), str(a)], ["-"], CONFIGS)


def test_history_inputs_are_merged_and_the_others_are_not(tmp_path: Path):
    # recordings and topics, followed or bounded, are read as one stream merged by event time
    # while any reads its history (tests/flow/test_followed_topics.py); ZMQ passes and the
    # DGD's inventory polls are not: they are stamped on receipt
    recording = tmp_path / "a.jsonl"
    recording.write_text("")
    replayed = "kafka://127.0.0.1:1/events?until=end"
    [merged] = wire([replayed, str(recording)], ["-"], CONFIGS).inputs
    assert isinstance(merged, MergedSource)
    assert [type(s).__name__ for s in merged.sources] == ["KafkaEventSource", "RecordedSource"]
    engines = "zmq+tcp://127.0.0.1:5557?deployment=llama"
    followed = "kafka://127.0.0.1:1/fpm"
    live = wire([engines, followed, str(recording), replayed], ["-"], CONFIGS)
    assert live.live and [type(s) for s in live.inputs] == [MergedSource, ZmqFpmSource]
    assert isinstance(live.inputs[0], MergedSource)
    assert [type(s).__name__ for s in live.inputs[0].sources] == [
        "KafkaEventSource",
        "RecordedSource",
        "KafkaEventSource",
    ]
    alone = wire([followed, engines], ["-"], CONFIGS).inputs
    assert [type(s) for s in alone] == [KafkaEventSource, ZmqFpmSource]
    with_dgd = wire([replayed, str(recording)], [DGD], CONFIGS)
    assert with_dgd.live and [type(s) for s in with_dgd.inputs] == [
        MergedSource,
        DgdInventorySource,
    ]


def test_the_sources_gathered_from_several_addresses_come_in_a_fixed_order(tmp_path: Path):
    # the recorded files at the first's place, then the Prometheus endpoints, then the engines
    recording = tmp_path / "a.jsonl"
    recording.write_text("")
    engines = "zmq+tcp://127.0.0.1:5557?deployment=llama"
    prometheus = "prometheus://127.0.0.1:9?deployment=llama"
    inputs = wire([engines, prometheus, str(recording)], ["-"], CONFIGS).inputs
    assert [type(s) for s in inputs] == [RecordedSource, PrometheusTrafficInput, ZmqFpmSource]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [
                "zmq+tcp://127.0.0.1:5557?deployment=llama",
                "zmq+tcp://127.0.0.1:5557?deployment=split&role=decode",
            ],
            "endpoint 'tcp://127.0.0.1:5557' is listed twice",
        ),
        (
            [
                "prometheus://127.0.0.1:9?deployment=llama",
                "prometheus://127.0.0.1:8?deployment=llama",
            ],
            "each deployment may have one traffic source",
        ),
    ],
)
def test_two_addresses_one_gathered_source_cannot_take_are_refused(inputs, message):
    with pytest.raises(EndpointError) as caught:
        wire(inputs, ["-"], CONFIGS)
    assert str(caught.value) == message


def test_the_recorded_files_are_checked_before_the_prometheus_endpoints(tmp_path: Path):
    recording = tmp_path / "a.jsonl"
    recording.write_text("")
    prometheus = "prometheus://127.0.0.1:9?deployment=llama"
    with pytest.raises(EndpointError, match="a recorded stream is given twice"):
        wire([prometheus, prometheus, str(recording), str(recording)], ["-"], CONFIGS)


def test_a_prometheus_input_reads_the_accept_length_of_the_named_backend():
    [plain] = wire(["prometheus://127.0.0.1:9?deployment=llama"], ["-"], CONFIGS).inputs
    assert isinstance(plain, PrometheusTrafficInput)
    assert plain.sources["llama"].spec_decode_backend is None  # no speculative decoding
    address = "prometheus://127.0.0.1:9?deployment=llama&spec_decode=sglang"
    [source] = wire([address], ["-"], CONFIGS).inputs
    assert isinstance(source, PrometheusTrafficInput)
    assert source.sources["llama"].spec_decode_backend == "sglang"
    assert "sglang:spec_accept_length" in source.sources["llama"].accept_length_query(60)
    with pytest.raises(EndpointError, match="spec_decode must be one of vllm, sglang, trtllm"):
        wire(["prometheus://127.0.0.1:9?deployment=llama&spec_decode=medusa"], ["-"], CONFIGS)


def test_a_prometheus_input_over_tls_is_prometheus_https():
    # a given HOST:PORT was always read over plain http: a TLS Prometheus was reachable only
    # through PROMETHEUS_ENDPOINT
    for address, endpoint in (
        ("prometheus://prom:9090?deployment=llama", "http://prom:9090"),
        ("prometheus+https://prom:9090?deployment=llama", "https://prom:9090"),
    ):
        [source] = wire([address], ["-"], CONFIGS).inputs
        assert isinstance(source, PrometheusTrafficInput)
        assert source.sources["llama"].client.settings.endpoint == endpoint


@pytest.mark.parametrize(
    ("inputs", "outputs", "option", "problem"),
    [
        (["zmq+tcp://127.0.0.1:29999?deployment=llama&deployment=split"], [], "deployment", "2"),
        (["zmq+ipc:///tmp/fpm?deployment=split&role=decode&role=prefill"], [], "role", "2"),
        (["zmq+tcp://127.0.0.1:29999?deployment=llama&role="], [], "role", ""),
        (["prometheus://127.0.0.1:9?deployment=llama&deployment=split"], [], "deployment", "2"),
        (["prometheus://127.0.0.1:9?deployment=llama&model=a&model=b"], [], "model", "2"),
        (["prometheus://127.0.0.1:9?deployment=llama&namespace="], [], "namespace", ""),
        ([], [f"{DGD}&deployment=split"], "deployment", "2"),
        ([], [f"{DGD}&interval="], "interval", ""),
        ([], [f"{DGD}&backend=vllm&backend=sglang"], "backend", "2"),
    ],
)
def test_an_option_given_twice_or_empty_is_refused(inputs, outputs, option, problem):
    """As KafkaUrl does: keeping the last of two values, or treating an empty one as absent (so
    a default applies), would run with something the address did not say."""
    [address] = inputs + outputs
    message = f"option {option!r} " + (f"given {problem} times" if problem else "is empty")
    with pytest.raises(EndpointError, match=re.escape(message)) as caught:
        wire(inputs, outputs, CONFIGS)
    assert address in str(caught.value)


def test_an_empty_deployment_is_not_read_as_the_only_one():
    """``?deployment=`` used to fall back to the only configured deployment."""
    only = {"llama": PlannerConfig(mode="agg")}
    for address in ["prometheus://127.0.0.1:9?deployment=", "dgd://ns/graph?deployment="]:
        inputs, outputs = ([address], []) if address.startswith("prom") else ([], [address])
        with pytest.raises(EndpointError, match=re.escape(f"{address!r}: option 'deployment'")):
            wire(inputs, outputs, only)
    [source] = wire(["prometheus://127.0.0.1:9"], ["-"], only).inputs  # left out: the only one
    assert isinstance(source, PrometheusTrafficInput) and list(source.sources) == ["llama"]


def test_an_option_without_a_value_is_refused():
    with pytest.raises(EndpointError, match="bad options"):
        wire(["prometheus://127.0.0.1:9?deployment=llama&&model=m"], ["-"], CONFIGS)


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        (["kafka://127.0.0.1:1/events?partitions=3"], ["-"], "partitions do not apply here"),
        ([], ["kafka://127.0.0.1:1/decisions?until=end"], "until do not apply here"),
        ([], ["virtual+kafka://127.0.0.1:1/d?acks=a&start=end"], "start do not apply here"),
        (["kafka://127.0.0.1:1/events?deployment=llama"], ["-"], "only with format=dynamo-trace"),
        (["kafka://127.0.0.1:1/r?format=dynamo-trace"], ["-"], "say which configured deployment"),
        # a name given but not configured: the message names the configured ones
        (["prometheus://127.0.0.1:9?deployment=nope"], ["-"], r"one of llama, split\)$"),
    ],
)
def test_a_kafka_option_that_does_not_apply_is_refused(inputs, outputs, message):
    with pytest.raises(EndpointError, match=message):
        wire(inputs, outputs, CONFIGS)


def test_a_trace_topic_of_the_only_deployment_needs_no_name():
    address = "kafka://127.0.0.1:1/r?format=dynamo-trace"
    [source] = wire([address], ["-"], {"q": PlannerConfig()}).inputs
    assert isinstance(source, KafkaTraceSource) and source.deployment == "q"
    assert not source.until_end


def test_a_directory_is_not_a_recorded_stream(tmp_path: Path):
    with pytest.raises(EndpointError, match="is a file, not a directory"):
        wire([str(tmp_path)], ["-"], CONFIGS)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("dgd://ns", "give the namespace too (dgd://NAMESPACE/NAME)"),
        ("dgd://", "name the DGD (dgd://NAMESPACE/NAME) or set DYN_PARENT_DGD_K8S_NAME"),
        ("dgd://a/b/c", "expected dgd://NAMESPACE/NAME"),
    ],
)
def test_a_dgd_address_names_namespace_and_name(monkeypatch, target, message):
    # outside a pod nothing can fill a part left out: `dgd://ns` used to fail in the
    # Kubernetes client ("Invalid kube-config file") instead of naming the address
    monkeypatch.delenv("DYN_PARENT_DGD_K8S_NAME", raising=False)
    address = f"{target}?deployment=llama&host=http://127.0.0.1:1"
    with pytest.raises(EndpointError, match=re.escape(message)) as caught:
        wire([], [address], CONFIGS)
    assert address in str(caught.value)


def test_a_dgd_name_from_the_environment_still_needs_a_namespace_outside_a_pod(monkeypatch):
    monkeypatch.setenv("DYN_PARENT_DGD_K8S_NAME", "graph")
    with pytest.raises(EndpointError, match=re.escape("give the namespace too")):
        wire([], ["dgd://?deployment=llama&host=http://127.0.0.1:1"], CONFIGS)


def test_two_followed_topics_without_the_lateness_their_skew_needs_are_warned_of(caplog):
    # measured (README): at lateness 0 the topic read ahead left 9 % of the other's events
    # late once both were live; at 1 s none were, and the decisions were the replay's
    topics = ["kafka://127.0.0.1:1/fpm", "kafka://127.0.0.1:1/events"]
    covered = {
        name: config.model_copy(update={"allowed_lateness_seconds": 1.0})
        for name, config in CONFIGS.items()
    }
    with caplog.at_level(logging.WARNING, logger="flows.endpoints"):
        wire(topics, ["-"], covered)
        wire([topics[0], "kafka://127.0.0.1:1/events?until=end"], ["-"], CONFIGS)
        assert not caplog.records
        wire(topics, ["-"], CONFIGS)
    (record,) = caplog.records
    assert "2 followed Kafka topics" in record.message
    assert "at least 1 s (deployment(s) llama, split have less)" in record.message


def test_two_outputs_scaling_one_dgd_are_refused(tmp_path: Path, monkeypatch):
    # protects: each keeps its restart mark in the DGD's one annotation, so a restarted worker
    # took one deployment's decisions for none and re-applied its history over a hand edit
    for spelling in ("dgd://ns/graph", "dgd://ns/graph/", "dgd://ns//graph"):
        for host in ("http://127.0.0.1:1", "http://127.0.0.1:1/"):
            other = f"{spelling}?deployment=split&host={host}"
            with pytest.raises(EndpointError, match="scales the same DGD; a DGD's prefill"):
                wire([], [DGD, other], CONFIGS)
    in_pod = tmp_path / "namespace"
    in_pod.write_text("ns")
    monkeypatch.setattr(endpoints, "SERVICE_ACCOUNT_NAMESPACE", in_pod)
    with pytest.raises(EndpointError, match="scales the same DGD"):  # the pod's namespace
        wire([], [DGD, "dgd://graph?deployment=split&host=http://127.0.0.1:1"], CONFIGS)
    elsewhere = "dgd://ns/other?deployment=split&host=http://127.0.0.1:1"
    assert len(wire([], [DGD, elsewhere], CONFIGS).actuators) == 2
