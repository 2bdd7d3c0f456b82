"""Bad command lines get a short error naming the problem and a non-zero exit, never a Python
traceback (the real CLI as a subprocess, as a user would run it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.flow.runner import METRICS_LINE, flowplanner
from tests.services.process import free_port

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "examples/decode.yaml")
RECORDING = str(REPO / "examples/decode_burst.jsonl")
TINY = ("--synthetic", "poisson", "--duration", "30", "--quiet")


def assert_clean_error(done, *needles: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("-w", "0", "--workers"),
        ("-w", "-1", "--workers"),
        ("--metrics-port", "-1", "--metrics-port"),
        ("--metrics-port", "70000", "--metrics-port"),
    ],
)
def test_run_rejects_out_of_range_options(option, value, needle):
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, option, value)
    assert_clean_error(done, needle, value)
    assert "events in" not in done.stderr  # rejected before anything ran


def test_run_output_that_cannot_be_opened_is_one_line(tmp_path):
    # the sink opens inside the bytewax runtime, whose error wraps the real one
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--output", str(tmp_path))
    assert_clean_error(done, "Is a directory", str(tmp_path))


@pytest.mark.parametrize("option", ["--ticks", "--dead-letters", "--output"])
@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_run_file_outputs_that_cannot_be_written_stop_it_before_it_starts(tmp_path, option, where):
    path = tmp_path if where == "a directory" else Path(RECORDING) / "out.jsonl"
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, option, str(path))
    assert_clean_error(done, str(path.parent if where == "under a file" else path))
    assert done.returncode == 1
    assert "events in" not in done.stderr and "panicked" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_run_reports_directory_that_cannot_be_written_stops_it_before_it_starts(tmp_path, where):
    # it was only found when the first page was due, report_interval_hours into the run: the
    # planner stopped there, and bytewax aborted the process (exit 134, a Rust panic)
    directory = RECORDING if where == "a file" else f"{RECORDING}/reports"
    config = yaml.safe_load(Path(CONFIG).read_text())
    config["deployments"]["llama"]["report_output_dir"] = directory
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    args = ("run", "--config", str(tmp_path / "c.yaml"), "--input", RECORDING)
    done = flowplanner(*args, "--reports")
    assert_clean_error(done, f"cannot write the diagnostics reports of llama to {directory}")
    assert done.returncode == 1
    assert "events in" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert flowplanner(*args).returncode == 0  # without --reports the directory is not used


def test_run_metrics_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--metrics-port", port)
    assert_clean_error(done, f"cannot serve metrics on port {port}")


def test_run_reads_the_metrics_port_from_planner_prometheus_port(monkeypatch):
    # spec §9.6: the exporter's port defaults to PLANNER_PROMETHEUS_PORT (a taken one proves it)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        monkeypatch.setenv("PLANNER_PROMETHEUS_PORT", port)
        done = flowplanner("run", "--config", CONFIG, "--input", RECORDING)
    assert_clean_error(done, f"cannot serve metrics on port {port}")
    monkeypatch.setenv("PLANNER_PROMETHEUS_PORT", "http")
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING)
    assert_clean_error(done, "PLANNER_PROMETHEUS_PORT: expected int, got 'http'")
    assert done.returncode == 2


def test_run_control_port_in_use_is_one_line_after_the_metrics_line():
    # a live run (a ZMQ input, not connected before the dataflow runs) serves the control API
    # after the exporter, which is stopped on the way out
    live = f"zmq+tcp://127.0.0.1:{free_port()}?deployment=llama&role=decode"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        ports = ("--metrics-port", "0", "--control-port", port)
        done = flowplanner("run", "--config", CONFIG, "--input", live, *ports)
    assert_clean_error(done, f"cannot serve the control API on port {port}")
    assert done.returncode == 1
    metrics, control = done.stderr.splitlines()
    assert METRICS_LINE.match(metrics), done.stderr
    assert control.startswith(f"flowplanner run: cannot serve the control API on port {port}: ")


def test_run_says_a_replay_serves_no_control_api():
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--control-port", "0")
    assert done.returncode == 0, done.stderr
    no_api = "flowplanner run: no control API for a replay (its limits are the `limits` events"
    assert done.stderr.startswith(no_api), done.stderr
    assert "control API on" not in done.stderr and "events in" in done.stderr


def test_run_bad_config_names_file_and_field(tmp_path):
    config = tmp_path / "planner.yaml"
    config.write_text("deployments:\n  llama:\n    mode: decode\n    itl_msx: 60\n")
    done = flowplanner("run", "--config", str(config), "--input", RECORDING)
    assert_clean_error(done, "itl_msx")
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--load-scale", "0"), "--load-scale"),
        (("--rate", "-5"), "--rate"),
        (("--duration", "0"), "--duration"),
        (("--prefill", "-1"), "--prefill"),
        (("--startup-delay", "-5"), "--startup-delay"),
        (("--trace", RECORDING), "--trace"),  # with --synthetic: one workload, not two
        # bounded: these never finished, hung building 1e9 requests, or raised numpy's
        # "lam value too large"
        (("--speedup", "1e-300"), "argument --speedup: must be >= 0.001, got 1e-300"),
        (("--rate", "1e9"), "argument --rate: must be <= 100000"),
        (("--duration", "1e300"), "argument --duration: must be <= 2.592e+06"),
        (("--load-scale", "100000"), "argument --load-scale: must be <= 1000"),
        (("--rate", "1e5", "--duration", "86400"), "about 8,640,000,000 requests, more than"),
    ],
)
def test_replay_rejects_bad_scenarios(args, needle):
    done = flowplanner("replay", *TINY, *args)
    assert_clean_error(done, needle)
    assert done.returncode == 2
    assert needle in done.stderr.splitlines()[-1], done.stderr  # one line (after any usage)
    assert "replaying" not in done.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # these were silently ignored: a trace has its own rate and length, an aggregated
        # deployment has no prefill replicas
        (("--rate", "3"), "--rate applies only to --synthetic workloads"),
        (("--trace", RECORDING, "--duration", "60"), "--duration applies only to --synthetic"),
        (("--synthetic", "poisson", "--prefill", "2"), "--prefill applies only to disagg"),
    ],
)
def test_replay_refuses_options_it_would_ignore(tmp_path, args, needle):
    config = yaml.safe_load((REPO / "examples/planner.yaml").read_text())
    [settings] = config["deployments"].values()
    settings["mode"] = "agg"
    (tmp_path / "agg.yaml").write_text(yaml.safe_dump(config))
    done = flowplanner("replay", "--quiet", "--config", str(tmp_path / "agg.yaml"), *args)
    assert_clean_error(done, needle)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr


def test_replay_refuses_a_trace_in_mixed_time_units(tmp_path):
    # one absolute millisecond timestamp among relative ones: 26 000 days to simulate
    trace = tmp_path / "mixed.jsonl"
    row = '{{"timestamp": {}, "input_length": 100, "output_length": 10}}\n'
    trace.write_text("".join(row.format(t) for t in (0, 1000, 1_700_000_000_000)))
    done = flowplanner("replay", "--quiet", "--trace", str(trace))
    assert_clean_error(done, "mixed.jsonl: its requests span")
    assert done.returncode == 2 and "mixed time units?" in done.stderr, done.stderr


def test_replay_refuses_a_profile_point_no_engine_could_run(tmp_path):
    # a one-token context at the whole KV: 2^36 requests in one decode batch
    decode = {
        "x_kv_usage": [0.5, 1.0],
        "y_context_length": [4096, 1],
        "z_itl": [10.0, 20.0],
        "z_thpt_per_gpu": [1.0, 1.0],
        "max_kv_tokens": 2**36,
    }
    (tmp_path / "decode_raw_data.json").write_text(json.dumps(decode))
    done = flowplanner("replay", *TINY, "--profile", str(tmp_path))
    assert_clean_error(done, f"{tmp_path}: profile decode point 1", "MAX_FPM_REQUESTS")
    assert done.returncode == 2 and "replaying" not in done.stderr, done.stderr


def test_replay_checks_its_output_paths_before_replaying(tmp_path):
    done = flowplanner("replay", *TINY, "--json", str(tmp_path))
    assert_clean_error(done, str(tmp_path))
    assert "replaying" not in done.stderr


def test_bench_checks_its_output_path_before_running(tmp_path):
    done = flowplanner("bench", *TINY[:-1], "--json", str(tmp_path))
    assert_clean_error(done, str(tmp_path))
    assert "bench on" not in done.stderr


def test_fleet_bad_config_is_one_line(tmp_path):
    done = flowplanner("fleet", "--kafka", "127.0.0.1:1", "--config", CONFIG)
    assert_clean_error(done, "mode 'decode'")
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--seasonal-period", "0"),
        ("--under-weight", "-1"),
        ("--interval", "0"),
        ("--under-weight", "1e16"),  # w / (1 + w) rounded to 1: a StatisticsError traceback
    ],
)
def test_forecast_bench_rejects_non_positive_parameters(option, value):
    trace = str(REPO / "tests/data/traces/azure_2023_conv.csv")
    done = flowplanner("forecast-bench", "--trace", trace, option, value)
    assert_clean_error(done, option)
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("address", "needle"),
    [
        ("kafka://h:notaport/t", "broker 'h:notaport' needs HOST:PORT"),
        ("dgd://ns?deployment=llama", "give the namespace too (dgd://NAMESPACE/NAME)"),
        # exit 1 after the Kubernetes client's set-up (behind its error when it had none)
        ("dgd://ns/llama?backend=foo", "unknown backend 'foo': expected one of mocker, sglang"),
    ],
)
def test_run_checks_addresses_before_connecting(address, needle):
    option = "--output" if address.startswith("dgd") else "--input"
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, option, address)
    assert_clean_error(done, needle)
    assert done.returncode == 2
    assert "kube-config" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_every_option_of_every_command_is_documented():
    from flows.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    undocumented = [
        f"{name} {action.option_strings[-1]}"
        for name, sub in commands.items()
        for action in sub._actions
        if action.option_strings and not action.help
    ]
    assert undocumented == []
    run_help = commands["run"].format_help()
    for address in ("prometheus://", "zmq+ipc://", "virtual+kafka://", "dgd://"):
        assert address in run_help
    # a default the demo changes is the one its help shows
    assert "(default: 10)" in commands["demo"].format_help()


def test_a_dgd_output_without_any_api_server_says_how_to_name_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}
    address = "dgd://dynamo/llama?deployment=llama"
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--config", CONFIG, "--input", RECORDING,
         "--output", address],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "no Kubernetes API server to talk to" in done.stderr
    assert "set KUBECONFIG or give the address (dgd://NAMESPACE/NAME?host=URL)" in done.stderr


def test_a_dgd_api_server_that_does_not_answer_is_one_line():
    # the Kubernetes client retries each request; its urllib3 retry warnings are not ours to say
    address = "dgd://dynamo/llama?deployment=llama&host=http://127.0.0.1:1"
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--output", address)
    assert_clean_error(done, "cannot read DGD dynamo/llama")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr


def test_an_acknowledgement_broker_that_does_not_answer_is_an_outage_not_a_bad_address():
    """Exit 1 (cannot start), as the same broker as a kafka:// output; it was 2 (refused)."""
    address = "virtual+kafka://127.0.0.1:1/decisions?acks=acks"
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--output", address)
    assert_clean_error(done, "cannot reach Kafka at 127.0.0.1:1")
    assert done.returncode == 1


def test_a_second_virtual_output_is_refused_before_connecting():
    """Only the last one's acknowledgement topic was read: the first's decisions waited for
    acknowledgements never seen."""
    first, second = (f"virtual+kafka://127.0.0.1:1/d{i}?acks=a{i}" for i in (1, 2))
    done = flowplanner(
        "run", "--config", CONFIG, "--input", RECORDING, "--output", first, "--output", second
    )
    assert_clean_error(done, "only one virtual+kafka:// output per run")
    assert done.returncode == 2 and "cannot reach Kafka" not in done.stderr


@pytest.mark.parametrize(
    ("source", "to", "needle"),
    [
        (
            "zmq+tcp://127.0.0.1:1?deployment=a&deployment=b&role=decode",
            "kafka://127.0.0.1:1/fpm",
            "option 'deployment' given 2 times",
        ),
        (
            "zmq+tcp://127.0.0.1:1?deployment=a&role=decode",
            "kafka://127.0.0.1:1/fpm?until=end",
            "only ?partitions=N applies",
        ),
    ],
)
def test_relay_refuses_options_it_would_ignore(source, to, needle):
    done = flowplanner("relay", "--from", source, "--to", to)
    assert_clean_error(done, needle)
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("options", "needle", "status"),
    [
        (("--prefill-publish", "fleet:20380"), "FPM publisher URL must be tcp:// or ipc://", 2),
        (("--prefill-publish", "SAME", "--decode-publish", "SAME"), "cannot publish FPMs", 1),
        (
            ("--prefill-publish", "tcp://127.0.0.1:0", "--decode-publish", "tcp://127.0.0.1:0"),
            "cannot reach Kafka at 127.0.0.1:1",
            1,
        ),
    ],
)
def test_fleet_bad_addresses_and_no_broker_are_one_line(options, needle, status):
    """They were tracebacks (only the config and scenario were checked)."""
    config = str(REPO / "examples/planner.yaml")
    same = f"tcp://127.0.0.1:{free_port()}"  # both roles on one port: the second is in use
    options = tuple(same if option == "SAME" else option for option in options)
    done = flowplanner("fleet", "--kafka", "127.0.0.1:1", "--config", config, *options)
    assert_clean_error(done, needle)
    assert done.returncode == status
