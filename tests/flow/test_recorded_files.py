"""Recorded files through the real bytewax runtime: undecodable bytes and cut ``.gz`` files are
dead letters (the rest of the file is used), and several files read as one time-ordered stream
make the same decisions as the single file they were split from, with any number of workers."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.recovery import init_db_dir
from bytewax.testing import TestingSink

import connectors.recorded
from connectors.merged import MergedSource, MergedState
from connectors.recorded import RecordedSource
from tests.flow.cluster import run_flow
from tests.flow.runner import run_recorded as run
from tests.flow.runner import write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream


def clock_line(deployment: str, time: float) -> str:
    return json.dumps({"type": "clock", "deployment": deployment, "time": time, "payload": {}})


def test_invalid_utf8_lines_are_dead_letters_and_the_rest_is_used(tmp_path):
    lines = [json.dumps(e).encode() for e in decode_ramp("alpha", engines=2, seconds=60)]
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"\n".join(lines) + b"\n")
    mixed_lines, bad_positions = [], []
    for i, line in enumerate(lines):
        mixed_lines.append(line)
        if i % 50 == 49:  # a worker id with a stray byte, and a line of binary noise
            mixed_lines.append(line.replace(b'"worker_id": "w', b'"worker_id": "\xff'))
            mixed_lines.append(b"\xfe\xff\x00\x9c garbage")
            bad_positions += [len(mixed_lines) - 1, len(mixed_lines)]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join(mixed_lines) + b"\n")
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    (tmp_path / "c").mkdir(), (tmp_path / "m").mkdir()

    want = run(config, [clean], tmp_path / "c")
    got = run(config, [mixed], tmp_path / "m")

    assert [(d["source"], d["position"]) for d in got["dead"]] == [
        (str(mixed), p) for p in bad_positions
    ]
    # named for what they are, not "Invalid JSON: expected value at line 1 column 1"
    stray = mixed_lines[bad_positions[0] - 1].index(b"\xff")
    assert [d["reason"] for d in got["dead"][:2]] == [
        f"invalid event: not UTF-8 text: byte 0xff at offset {stray} (invalid start byte)",
        "invalid event: not UTF-8 text: byte 0xfe at offset 0 (invalid start byte)",
    ]
    assert all(d["reason"].startswith("invalid event: not UTF-8 text") for d in got["dead"])
    assert want["decisions"], "the clean ramp must decide something"
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]
    assert f"{len(mixed_lines)} events in, {len(bad_positions)} dead-lettered" in got["stderr"]


def test_a_cut_gz_recording_uses_its_lines_and_ends_in_one_dead_letter(tmp_path):
    # a steep ramp: the load crosses the target halfway, well before the cut
    events = decode_ramp("alpha", engines=2, seconds=120, kv_end=900_000)
    whole = "".join(json.dumps(e) + "\n" for e in events).encode()
    compressed = gzip.compress(whole)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(compressed[: len(compressed) * 3 // 4])
    readable = zlib.decompressobj(wbits=31).decompress(cut.read_bytes())
    complete = readable.count(b"\n")  # lines wholly before the cut
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_bytes(readable[: readable.rfind(b"\n") + 1])
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    (tmp_path / "p").mkdir(), (tmp_path / "g").mkdir()

    want = run(config, [prefix], tmp_path / "p")
    got = run(config, [cut], tmp_path / "g")

    assert 0 < complete < len(events)
    [dead] = got["dead"]
    assert (dead["source"], dead["position"]) == (str(cut), complete + 1)
    assert dead["reason"].startswith(f"truncated input: {cut} is cut at line {complete + 1}")
    assert want["decisions"], "the readable part must decide something"
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]
    assert f"{complete + 1} events in, 1 dead-lettered" in got["stderr"]


def worker_of(event: dict) -> str:
    """The engine a forward pass came from; the deployment's other events go with w0."""
    return event["payload"]["fpm"]["worker_id"] if event["type"] == "fpm" else "w0"


@pytest.fixture(scope="module")
def split_by_worker(tmp_path_factory):
    """One 300 s ramp of 3 engines as one file, and split into one file per engine (the
    deployment's state events in the first): each file longer than a source batch."""
    root = tmp_path_factory.mktemp("split")
    events = decode_ramp("alpha", engines=3, seconds=300)
    events.append({"type": "clock", "deployment": "alpha", "time": 305.0, "payload": {}})
    write_stream(root / "whole.jsonl", events)
    parts = [root / f"w{k}.jsonl" for k in range(3)]
    for k, part in enumerate(parts):
        write_stream(part, [e for e in events if worker_of(e) == f"w{k}"])
    assert min(len(p.read_text().splitlines()) for p in parts) > connectors.recorded.BATCH_LINES
    config = write_config(
        root / "c.yaml", {"alpha": DECODE_CONFIG | {"allowed_lateness_seconds": 30}}
    )
    (root / "whole").mkdir()
    return root, config, parts, run(config, [root / "whole.jsonl"], root / "whole")


def test_files_split_by_worker_decide_like_the_unsplit_recording(split_by_worker):
    root, config, parts, whole = split_by_worker

    got = run(config, parts, root / "split")  # on 1 and on 2 workers

    assert whole["dead"] == [] and got["dead"] == []
    assert whole["decisions"], "the ramp must decide something"
    assert got["decisions"] == whole["decisions"]
    assert got["ticks"] == whole["ticks"]


def read_all(
    source: RecordedSource | MergedSource, workers: int, recovery: Path | None = None
) -> list:
    out: list = []
    flow = Dataflow("recorded_in")
    op.output("out", op.input("in", flow, source), TestingSink(out))
    run_flow(flow, workers, recovery=recovery)
    return out


def read_rest(source: MergedSource, state: MergedState) -> list:
    """What a merged partition built from ``state`` hands on, to its end."""
    rest = source.build_part("in", "merged", state)
    out: list = []
    with pytest.raises(StopIteration):
        while True:
            out += rest.next_batch()
    rest.close()
    return out


def positions(items: list) -> list[tuple[str, int]]:
    return [(Path(item.source).name, item.position) for item in items]


def test_merged_files_resume_where_they_stopped(tmp_path, monkeypatch, workers):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(f"{clock_line('x', 1)}\n{{oops\n\n{clock_line('x', 4)}\n")
    b.write_text(f"{clock_line('x', 2)}\n{clock_line('x', 3)}\n")
    merged = [("a.jsonl", 1), ("a.jsonl", 2), ("b.jsonl", 1), ("b.jsonl", 2), ("a.jsonl", 4)]
    assert positions(read_all(RecordedSource([a, b]), workers)) == merged

    # stopped after any batch, a new partition from the snapshot continues the same order
    monkeypatch.setattr(connectors.recorded, "BATCH_LINES", 2)
    first = RecordedSource([a, b]).build_part("in", "recorded", None)
    head = first.next_batch()
    state = first.snapshot()
    first.close()
    rest = RecordedSource([a, b]).build_part("in", "recorded", state)
    tail = rest.next_batch() + rest.next_batch()
    with pytest.raises(StopIteration):
        rest.next_batch()
    rest.close()
    assert (state, positions(head + tail)) == ({str(a): 2, str(b): 0}, merged)

    # through the runtime's recovery: a rerun reads only what was appended since
    init_db_dir(tmp_path, 1)
    assert len(read_all(RecordedSource([a, b]), workers, tmp_path)) == len(merged)
    with a.open("a") as fh:
        fh.write(clock_line("x", 6) + "\n")
    with b.open("a") as fh:
        fh.write(clock_line("x", 5) + "\n")
    again = read_all(RecordedSource([a, b]), workers, tmp_path)
    assert positions(again) == [("b.jsonl", 3), ("a.jsonl", 5)]


def test_merged_inputs_resume_with_what_they_had_read_and_not_handed_on(
    tmp_path, monkeypatch, workers
):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(clock_line("x", t) + "\n" for t in (1, 3, 4, 7)))
    b.write_text(f"{clock_line('x', 2)}\n{{oops\n{clock_line('x', 5)}\n")

    def merged() -> MergedSource:
        return MergedSource([RecordedSource([a]), RecordedSource([b])])

    order = [("a.jsonl", 1), ("b.jsonl", 1), ("b.jsonl", 2), ("a.jsonl", 2), ("a.jsonl", 3)]
    order += [("b.jsonl", 3), ("a.jsonl", 4)]  # the bad line stays behind its neighbour
    assert positions(read_all(merged(), workers)) == order

    # stopped after any batch, with lines read from the files and not handed on — queued, or
    # waiting for the file's next line with a time to key them — a partition built from the
    # snapshot hands on the rest in the same order
    monkeypatch.setattr(connectors.recorded, "BATCH_LINES", 2)
    first = merged().build_part("in", "merged", None)
    head: list = []
    queued = waiting = False
    while len(head) < len(order):
        head += first.next_batch()
        state = first.snapshot()
        queued |= bool(state.queued["0/recorded"])
        waiting |= bool(state.keys["1/recorded"].waiting)
        assert positions(head + read_rest(merged(), state)) == order
    first.close()
    assert queued and waiting

    # through the runtime's recovery: a rerun reads only what was appended since
    init_db_dir(tmp_path, 1)
    assert len(read_all(merged(), workers, tmp_path)) == len(order)
    with b.open("a") as fh:
        fh.write(clock_line("x", 8) + "\n")
    assert positions(read_all(merged(), workers, tmp_path)) == [("b.jsonl", 4)]


def test_a_cut_gz_file_is_reported_once_across_a_resume(tmp_path, workers):
    path = tmp_path / "s.jsonl.gz"
    data = gzip.compress("".join(clock_line("x", t) + "\n" for t in range(2000)).encode())
    path.write_bytes(data[: len(data) // 2])
    init_db_dir(tmp_path, 1)

    first = read_all(RecordedSource([path]), workers, tmp_path)
    again = read_all(RecordedSource([path]), workers, tmp_path)

    *lines, dead = first
    assert [item.position for item in lines] == list(range(1, len(lines) + 1))
    assert (dead.source, dead.position) == (str(path), len(lines) + 1)
    assert dead.reason.startswith("truncated input")
    assert again == []


BAD_LINES_WITH_A_TIME = [
    # Unix time in milliseconds: past the schema's range of event times
    {"type": "clock", "deployment": "alpha", "time": 1.7e12, "payload": {}},
    # an event time in range, but the line is not a valid event
    {"type": "fpm", "deployment": "alpha", "time": 9e9, "payload": {"role": "decode"}},
    {"type": "telemetry", "deployment": "alpha", "time": 9e9, "payload": {}},
]


@pytest.mark.parametrize("bad", BAD_LINES_WITH_A_TIME, ids=["ms-clock", "no-fpm", "bad-type"])
def test_a_bad_line_with_a_time_does_not_reorder_the_merged_files(tmp_path, bad):
    """A rejected line's time is not a place in event time: it must not hold the rest of its
    file back behind the other files (whose newer events would make it late)."""
    events = decode_ramp("alpha", engines=2, seconds=60)
    events.append({"type": "clock", "deployment": "alpha", "time": 65.0, "payload": {}})
    parts = []
    for k in range(2):
        lines = [json.dumps(e) for e in events if worker_of(e) == f"w{k}"]
        if k == 0:
            lines.insert(len(lines) // 2, json.dumps(bad))
        parts.append(tmp_path / f"w{k}.jsonl")
        parts[-1].write_text("\n".join(lines) + "\n")
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    (tmp_path / "whole").mkdir(), (tmp_path / "split").mkdir()

    want = run(config, [write_stream(tmp_path / "whole.jsonl", events)], tmp_path / "whole")
    got = run(config, parts, tmp_path / "split")

    [dead] = got["dead"]
    assert dead["reason"].startswith("invalid event") and dead["source"] == str(parts[0])
    assert want["decisions"], "the ramp must decide something"
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]


def test_one_file_under_two_spellings_is_refused(tmp_path, monkeypatch):
    # protects: paths were compared as strings, so the file was read twice: its requests
    # counted twice (twice the demand) and its forward passes came back as duplicates
    path = write_stream(tmp_path / "s.jsonl", decode_ramp("llama", engines=1, seconds=5))
    (tmp_path / "link.jsonl").symlink_to(path)
    monkeypatch.chdir(tmp_path)
    for other in (path.resolve(), tmp_path / "link.jsonl", Path("./s.jsonl")):
        with pytest.raises(ValueError, match=r"a recorded stream is given twice: s\.jsonl and "):
            RecordedSource([Path("s.jsonl"), other])
    RecordedSource([Path("s.jsonl"), write_stream(tmp_path / "t.jsonl", [])])  # two files
