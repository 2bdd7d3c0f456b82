"""AckGate: the virtual connector's hold, as a pure function of decisions, acks and event time."""

from __future__ import annotations

import json
import pickle
import random
from functools import partial

import pytest
from bytewax.testing import TestingSink, TestingSource

from flows.planner import PlannerSinks, build_flow
from operators.ack_gate import AckGate
from operators.deployment import DeploymentPlanner
from operators.window import TickWindow
from schemas import (
    AckEvent,
    DeadLetter,
    DecisionAck,
    DeliveredDecision,
    EngineCapabilities,
    PlannerConfig,
    ScalingDecision,
    WorkerCapabilities,
    WorkerCounts,
    fpm_to_row,
    parse_event,
)
from tests.core.planner_inputs import fpm
from tests.decisions import decision
from tests.flow.cluster import run_flow
from tests.flow.streams import DECODE_CONFIG, decode_ramp

# a llama load decision under the planner's own numbering; the gate renumbers what it sends
planned = partial(decision, decision_id=99)


def test_first_decision_is_sent_at_once_and_numbered_from_one() -> None:
    gate = AckGate()
    sent = gate.offer(planned(time=0.0, num_decode=3))
    assert sent is not None
    assert (sent.decision_id, sent.num_decode, sent.note) == (1, 3, None)
    assert gate.waiting


def test_decision_is_held_until_the_previous_one_is_acknowledged() -> None:
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.offer(planned(time=60.0, num_decode=4)) is None
    assert gate.acknowledge(0, now=70.0) is None  # an older id does not release
    sent = gate.acknowledge(1, now=75.0)
    assert sent is not None
    assert (sent.decision_id, sent.num_decode, sent.time) == (2, 4, 60.0)
    assert sent.note == "held 15 s until decision 1 was acknowledged"
    assert gate.waiting and gate.held is None


def test_acknowledged_gate_sends_the_next_decision_immediately() -> None:
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.acknowledge(1, now=30.0) is None  # nothing held
    sent = gate.offer(planned(time=60.0, num_decode=4))
    assert sent is not None and sent.decision_id == 2 and sent.note is None


def test_a_newer_held_decision_replaces_the_older_one() -> None:
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.offer(planned(time=60.0, num_decode=4)) is None
    assert gate.offer(planned(time=120.0, num_decode=5, num_prefill=2)) is None
    sent = gate.acknowledge(1, now=150.0)
    assert sent is not None
    assert (sent.decision_id, sent.num_decode, sent.num_prefill, sent.time) == (2, 5, 2, 120.0)
    # waited since the hold began (60), not since the newest decision (120)
    assert sent.note == (
        "held 90 s until decision 1 was acknowledged (replaced 1 older held decision(s))"
    )
    assert gate.acknowledge(2, now=160.0) is None  # nothing else was kept


def test_decision_equal_to_the_one_in_flight_cancels_the_hold() -> None:
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.offer(planned(time=60.0, num_decode=4)) is None
    assert (
        gate.offer(planned(time=120.0, num_decode=3)) is None
    )  # back to what decision 1 asked for
    assert gate.held is None
    assert gate.acknowledge(1, now=130.0) is None
    assert gate.advance(10_000.0) is None


def test_timeout_in_event_time_proceeds_and_says_so() -> None:
    gate = AckGate(max_wait_seconds=1800)
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.offer(planned(time=100.0, num_decode=4)) is None
    assert gate.advance(1899.999) is None
    sent = gate.advance(1900.0)
    assert sent is not None
    assert sent.decision_id == 2 and sent.num_decode == 4
    assert sent.note == "proceeded without acknowledgement of decision 1 after waiting 1800 s"
    assert gate.waiting  # now decision 2 is the one in flight
    assert gate.acknowledge(1, now=1950.0) is None  # late ack of 1 does not open the gate
    assert gate.offer(planned(time=2000.0, num_decode=5)) is None


def test_timeout_also_fires_when_a_late_decision_arrives() -> None:
    gate = AckGate(max_wait_seconds=300)
    gate.offer(planned(time=0.0, num_decode=3))
    assert gate.offer(planned(time=10.0, num_decode=4)) is None
    sent = gate.offer(planned(time=400.0, num_decode=6))
    assert sent is not None
    assert (sent.decision_id, sent.num_decode) == (2, 6)
    assert sent.note is not None and sent.note.startswith("proceeded without acknowledgement")
    assert "390 s" in sent.note and "replaced 1 older" in sent.note


def test_wait_starts_when_the_hold_begins_not_when_the_last_decision_was_sent() -> None:
    gate = AckGate(max_wait_seconds=1800)
    gate.offer(planned(time=0.0, num_decode=3))
    # Long after decision 1 (never acknowledged) the planner wants something new:
    assert gate.offer(planned(time=5000.0, num_decode=4)) is None
    assert gate.advance(6799.0) is None
    assert gate.advance(6800.0) is not None


def test_a_planner_changing_its_mind_cannot_postpone_the_timeout() -> None:
    # decision 1 (4) is never acknowledged; the planner flaps 5, 4, 5, 4 … once a minute: each 4
    # cancels the hold, but the wait still counts from the first hold (60 s)
    gate = AckGate(max_wait_seconds=1800)
    gate.offer(planned(time=0.0, num_decode=4))
    released = []
    for minute in range(1, 60):
        now = 60.0 * minute
        sent = gate.offer(planned(time=now, num_decode=5 if minute % 2 else 4)) or gate.advance(now)
        if sent is not None:
            released.append((now, sent.num_decode))
    assert released[0] == (1860.0, 5)


def test_repeating_the_held_decision_is_not_replacing_it() -> None:
    gate = AckGate(max_wait_seconds=1800)
    gate.offer(planned(time=0.0, num_decode=3))
    for minute in range(1, 31):
        gate.offer(planned(time=60.0 * minute, num_decode=5))
    sent = gate.advance(1860.0)
    assert sent is not None
    assert sent.note == "proceeded without acknowledgement of decision 1 after waiting 1800 s"


def test_the_same_targets_are_sent_again_once_acknowledged() -> None:
    # the planner repeats a target only when the fleet drifted from it after applying it
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=4))
    gate.acknowledge(1, now=10.0)
    sent = gate.offer(planned(time=20.0, num_decode=4))
    assert sent is not None and (sent.decision_id, sent.num_decode) == (2, 4)


def test_existing_note_is_kept() -> None:
    gate = AckGate(max_wait_seconds=10)
    gate.offer(planned(time=0.0, num_decode=3))
    gate.offer(planned(time=1.0, num_decode=4, note="capped by GPU budget"))
    sent = gate.advance(11.0)
    assert sent is not None and sent.note is not None
    assert sent.note.startswith("capped by GPU budget; proceeded without acknowledgement")


def test_ids_continue_after_the_ids_the_outputs_already_hold() -> None:
    # A restarted planner learns from its outputs which ids were issued; an acknowledgement
    # of the last of them is taken and the ids continue after it.
    gate = AckGate(last_emitted_id=57, in_flight=(None, 2), numbered_after=57)
    assert gate.acknowledge(57, now=0.0) is None and gate.take_refused() == []
    sent = gate.offer(planned(time=10.0, num_decode=3))
    assert sent is not None and sent.decision_id == 58


@pytest.mark.parametrize("bogus", [2, 2**62])
def test_an_acknowledgement_of_a_decision_never_issued_is_refused(bogus: int) -> None:
    # before: an ack of 2**62 released the held decision and every later id jumped past it
    gate = AckGate()
    assert gate.offer(planned(time=0.0, num_decode=3)).decision_id == 1  # type: ignore[union-attr]
    assert gate.offer(planned(time=5.0, num_decode=4)) is None  # held: 1 is not acknowledged
    assert gate.acknowledge(bogus, now=6.0) is None
    assert gate.take_refused() == [
        f"invalid acknowledgement: acked_decision_id {bogus} was never issued (the last is 1)"
    ]
    assert gate.take_refused() == []  # reported once
    assert gate.acked_decision_id == 0 and gate.waiting and gate.held is not None
    sent = gate.acknowledge(1, now=7.0)  # the real acknowledgement still releases it
    assert sent is not None and sent.decision_id == 2


def test_a_fresh_gate_refuses_any_acknowledgement() -> None:
    gate = AckGate()
    assert gate.acknowledge(57, now=0.0) is None
    assert [r.split(" was ")[0] for r in gate.take_refused()] == [
        "invalid acknowledgement: acked_decision_id 57"
    ]
    sent = gate.offer(planned(time=10.0, num_decode=3))
    assert sent is not None and sent.decision_id == 1


def test_stale_and_repeated_acks_change_nothing() -> None:
    gate = AckGate()
    gate.offer(planned(time=0.0, num_decode=3))
    gate.offer(planned(time=5.0, num_decode=4))
    assert gate.acknowledge(0, now=6.0) is None
    assert gate.held is not None and gate.waiting
    assert gate.acknowledge(1, now=7.0) is not None
    assert gate.acknowledge(1, now=8.0) is None


def test_rejects_non_positive_wait() -> None:
    with pytest.raises(ValueError, match="max_wait_seconds"):
        AckGate(max_wait_seconds=0)


def _random_run(seed: int, gate: AckGate, steps: int = 400) -> list[ScalingDecision]:
    rng = random.Random(seed)
    sent: list[ScalingDecision] = []
    now = 0.0
    for _ in range(steps):
        now += rng.choice([1.0, 30.0, 60.0, 600.0])
        choice = rng.random()
        if choice < 0.5:
            out = gate.offer(planned(time=now, num_decode=rng.randint(1, 4)))
        elif choice < 0.8:
            acked = gate.last_emitted_id - rng.randint(0, 1)
            out = gate.acknowledge(acked, now=now)
        else:
            out = gate.advance(now)
        if out is not None:
            sent.append(out)
    return sent


@pytest.mark.parametrize("seed", range(5))
def test_random_sequences_keep_the_invariants(seed: int) -> None:
    gate = AckGate(max_wait_seconds=900)
    sent = _random_run(seed, gate)
    assert len(sent) > 10
    assert [d.decision_id for d in sent] == list(range(1, len(sent) + 1))
    assert sent == _random_run(seed, AckGate(max_wait_seconds=900)), "deterministic"
    assert gate.held is None or gate.waiting  # something is only ever held while waiting


def test_state_pickles_mid_hold_and_continues_identically() -> None:
    gate = AckGate(max_wait_seconds=100)
    gate.offer(planned(time=0.0, num_decode=3))
    gate.offer(planned(time=10.0, num_decode=4))
    copy = pickle.loads(pickle.dumps(gate))
    assert copy.advance(110.0) == gate.advance(110.0)
    assert copy.__dict__ == gate.__dict__


def test_in_the_runtime_a_bogus_acknowledgement_is_a_dead_letter_and_changes_nothing(workers):
    """Through the bytewax runtime (1 and 2 workers): an acknowledgement of decision 2**62 beside
    the real one of decision 1 is dead-lettered, and the decisions are those of the real one."""
    events = [parse_event(json.dumps(e)) for e in decode_ramp("alpha", engines=2, seconds=120)]
    sent = DeliveredDecision(deployment="alpha", decision_id=1, time=0.0)  # awaits its ack

    def run(acks: list[DecisionAck]) -> tuple[list[ScalingDecision], list[DeadLetter]]:
        decisions: list[ScalingDecision] = []
        dead: list[DeadLetter] = []
        flow = build_flow(
            {"alpha": PlannerConfig(**DECODE_CONFIG)},
            [TestingSource(events)],
            PlannerSinks([TestingSink(decisions)], dead_letters=[TestingSink(dead)]),
            acks=TestingSource(acks),
            in_flight={"alpha": sent},
        )
        run_flow(flow, workers)
        return decisions, dead

    real = DecisionAck(deployment="alpha", acked_decision_id=1)
    bogus = DecisionAck(deployment="alpha", acked_decision_id=2**62)
    want, none = run([real])
    got, dead = run([bogus, real])
    assert none == [] and want and want[0].decision_id == 2
    assert got == want  # before: ids 2**62 + 1, ...
    assert [(d.source, d.deployment, d.reason) for d in dead] == [
        (
            "acks",
            "alpha",
            f"invalid acknowledgement: acked_decision_id {2**62} was never issued (the last is 1)",
        )
    ]


def _planner_window(t: float, engines: int, kv_tokens: int, acks: tuple[int, ...] = ()):
    rows = {
        ("decode", f"w{i}", 0): [
            fpm_to_row(
                t - 1,
                fpm(worker_id=f"w{i}", decode_kv=kv_tokens, decode_requests=10, wall_time=0.02),
            )
        ]
        for i in range(engines)
    }
    counts = WorkerCounts(ready_num_decode=engines, expected_num_decode=engines)
    acked = [AckEvent(deployment="d", time=t, payload={"acked_decision_id": n}) for n in acks]
    return TickWindow(rows=rows, inventory=counts, acks=acked)


@pytest.mark.parametrize(
    ("kv_before", "kv_after", "engines"),
    [(110_000, 70_000, 3), (30_000, 95_000, 2)],  # a scale-up, then a scale-down, gone stale
    ids=["up", "down"],
)
def test_a_held_decision_the_planner_no_longer_wants_is_not_sent(kv_before, kv_after, engines):
    # decision 1 goes out; the next tick wants one more step and is held behind it; then the
    # load changes and the planner judges the count it sees right (no_change): the held step
    # went out on the acknowledgement anyway (a scale-up load no longer needed, a scale-down
    # after load rose again); the reference, skipping while it waits, never sends it
    config = PlannerConfig(
        mode="decode",
        optimization_target="throughput",
        max_gpu_budget=-1,
        capabilities=WorkerCapabilities(
            decode=EngineCapabilities(max_kv_tokens=100_000, num_gpu=1)
        ),
    )
    planner = DeploymentPlanner("d", config, window_s=5.0, gate=AckGate(60))
    first = planner.on_window(5.0, _planner_window(5.0, 5 - engines, kv_before)).decision
    assert first is not None and first.num_decode == engines
    held = planner.on_window(10.0, _planner_window(10.0, engines, kv_before))
    assert held.decision is None and held.diagnostics.load_decision_reason in {
        "scale_up",
        "scale_down",
    }
    later = [planner.on_window(15.0, _planner_window(15.0, engines, kv_after))]
    later += [planner.on_window(20.0, _planner_window(20.0, engines, kv_after, acks=(1,)))]
    later += [planner.on_window(t, _planner_window(t, engines, kv_after)) for t in (25.0, 90.0)]
    assert [r.diagnostics.load_decision_reason for r in later] == ["no_change"] * 4
    assert [r.decision for r in later] == [None] * 4
