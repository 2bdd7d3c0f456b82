"""bytewax adapters of the DGD actuator: a sink that applies scaling decisions and a source that
polls the DGD for the worker inventory.

The source also yields, from the same read, each role's per-GPU power cap (the DGD services'
``dynamo.nvidia.com/gpu-power-limit`` pod annotation) as a :class:`schemas.CapabilitiesEvent`.

Both take a zero-argument *actuator factory* (each bytewax worker builds its own actuator, so
nothing unpicklable crosses workers) and validate the DGD when the dataflow starts, so a wrong
name or a DGD whose services don't fit the mode stops the run at once with
:class:`connectors.dgd.DgdValidationError`.

Neither blocks the bytewax worker on the API server: the source reads on a background thread
and hands finished polls over, the sink applies on a background thread (see :class:`DgdSink`).
A hanging API server would otherwise freeze every input of the dataflow (a new epoch waits for
every partition). The threads are daemons, so a request hung on the API server never holds up
the process's exit. A stop request (:func:`connectors.stopping.stop_waiting`) ends the
sink's wait for its applies at close.

``--output dgd://<namespace>/<name>`` style targets parse with :func:`parse_dgd_target`;
:meth:`DgdSink.from_target` / :meth:`DgdInventorySource.from_target` build both from one.

>>> parse_dgd_target("dgd://dynamo/llama-disagg")
('dynamo', 'llama-disagg')
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from connectors.dgd import (
    DGD_ACTIONS,
    ApplyResult,
    DgdActuator,
    DgdUnavailableError,
    FleetReading,
)
from connectors.pipeline_metrics import DEAD_LETTERS, EVENTS_IN
from connectors.polling import MAX_SLEEP, PENDING_CHECK, DaemonExecutor
from connectors.stopping import forget, inputs_ended, watch
from schemas import (
    CapabilitiesEvent,
    DeadLetter,
    DeliveredDecision,
    EngineCapabilities,
    Event,
    InventoryEvent,
    ScalingDecision,
    TickRecord,
    WorkerCapabilities,
)

log = logging.getLogger(__name__)

ActuatorFactory = Callable[[], DgdActuator]


def parse_dgd_target(target: str) -> tuple[str | None, str | None]:
    """``dgd://<namespace>/<name>`` → ``(namespace, name)``; parts left out are ``None``
    (namespace from the service account, name from ``$DYN_PARENT_DGD_K8S_NAME``).

    >>> parse_dgd_target("dgd://llama"), parse_dgd_target("dgd://")
    ((None, 'llama'), (None, None))
    """
    prefix = "dgd://"
    if not target.startswith(prefix):
        raise ValueError(f"not a DGD target: {target!r} (expected dgd://<namespace>/<name>)")
    parts = [p for p in target[len(prefix) :].split("/") if p]
    if len(parts) > 2:
        raise ValueError(f"not a DGD target: {target!r} (expected dgd://<namespace>/<name>)")
    if len(parts) == 2:
        return parts[0], parts[1]
    return None, (parts[0] if parts else None)


def _factory_for(target: str, **kwargs: Any) -> ActuatorFactory:
    namespace, name = parse_dgd_target(target)

    def build() -> DgdActuator:
        return DgdActuator.from_environment(name=name, namespace=namespace, **kwargs)

    return build


WAIT_SLICE_S = 0.25
"""A sink closing at the end of its input waits for its applies this long at a time, then
checks for a stop request."""


class _DgdSinkPartition(StatelessSinkPartition[Any]):
    def __init__(
        self,
        actuator: DgdActuator,
        deployment: str | None,
        on_result: Callable[[ApplyResult], None] | None,
    ) -> None:
        self.actuator = actuator
        self.deployment = deployment
        self.on_result = on_result
        self.stop_requested = False  # set by stop_waiting() or an interrupt while closing
        self._lock = threading.Lock()
        self._queued: dict[str, ScalingDecision] = {}  # newest not yet applied, per deployment
        self._in_flight: ScalingDecision | None = None  # being applied on the applier thread
        self._abandoned = False  # closed on a stop: what the applier still does is not reported
        self._jobs: list[Future[None]] = []
        self._applier = DaemonExecutor(f"dgd-apply-{actuator.dgd}")
        watch(self)  # stop_waiting() ends a close that waits for the applies

    def _report(self, result: ApplyResult) -> None:
        if self.on_result is not None:
            self.on_result(result)

    def _supersede(self, loser: ScalingDecision, winner: ScalingDecision, when: str) -> None:
        DGD_ACTIONS.labels(dgd=self.actuator.dgd, outcome="superseded").inc()
        reason = f"decision {winner.decision_id} arrived {when}"
        self._report(ApplyResult(loser.deployment, loser.decision_id, "superseded", reason))

    def _raise_failures(self) -> None:
        """Re-raise here what went wrong on the applier thread (a bug, an ``on_result`` error)."""
        for job in [j for j in self._jobs if j.done()]:
            self._jobs.remove(job)
            job.result()

    def write_batch(self, items: list[Any]) -> None:
        self._raise_failures()
        newest: dict[str, ScalingDecision] = {}
        for item in items:
            decision = item[1] if isinstance(item, tuple) and len(item) == 2 else item
            if isinstance(decision, TickRecord):
                decision = decision.decision  # a tick record carries its decision, if any
            if decision is None or isinstance(decision, DeadLetter):
                continue
            if not isinstance(decision, ScalingDecision):
                DEAD_LETTERS.labels(kind="dgd_sink").inc()
                log.warning("DGD sink: ignored %s (not a ScalingDecision)", type(decision).__name__)
                continue
            if self.deployment is not None and decision.deployment != self.deployment:
                continue  # another deployment's: its own DGD sink applies it
            kept = newest.get(decision.deployment)
            if kept is not None:
                loser, decision = sorted((kept, decision), key=lambda d: d.decision_id)
                self._supersede(loser, decision, "in the same batch")
            newest[decision.deployment] = decision
        superseded: list[tuple[ScalingDecision, ScalingDecision]] = []
        with self._lock:
            for deployment, decision in newest.items():
                kept = self._queued.get(deployment)
                if kept is not None:  # its apply is still queued: it applies the newest
                    loser, winner = sorted((kept, decision), key=lambda d: d.decision_id)
                    superseded.append((loser, winner))
                    self._queued[deployment] = winner
                else:
                    self._queued[deployment] = decision
                    self._jobs.append(self._applier.submit(partial(self._apply, deployment)))
        for loser, winner in superseded:
            self._supersede(loser, winner, "before it was applied")

    def _apply(self, deployment: str) -> None:
        """On the applier thread: apply the newest queued decision of ``deployment`` (none
        once a stop was requested: ``close`` reports it)."""
        with self._lock:
            if self.stop_requested or deployment not in self._queued:
                return
            decision = self._in_flight = self._queued.pop(deployment)
        result = self.actuator.apply(decision)
        with self._lock:
            self._in_flight = None
            if self._abandoned:  # close() already reported it as stopped
                return
        self._report(result)

    def close(self) -> None:
        """Apply what is queued, then stop the applier thread; after a stop request (before or
        while waiting) report what is queued or in flight as not applied, without waiting."""
        self._applier.shutdown(wait=False)  # ends after the jobs submitted
        try:
            while not self.stop_requested:
                _done, pending = wait_for(self._jobs, timeout=WAIT_SLICE_S)
                if not pending:
                    break
        except KeyboardInterrupt:  # a signal while closing on the main thread: a stop
            self.stop_requested = True
        forget(self)  # only now: stop_waiting() must reach a close that waits
        if self.stop_requested:
            self._drop_on_stop()
        else:
            self._raise_failures()

    def _drop_on_stop(self) -> None:
        """Report (warning, ``flowplanner_dgd_actions_total{outcome="stopped"}``) each decision
        a stop left in flight or queued. Never raises: bytewax closes sinks as it unwinds."""
        with self._lock:
            self._abandoned = True
            in_flight = self._in_flight
            queued = sorted(self._queued.values(), key=lambda d: (d.deployment, d.decision_id))
            self._queued.clear()
        dropped = [(in_flight, "its apply was in flight and is abandoned")] if in_flight else []
        dropped += [(d, "its apply had not started") for d in queued]
        for decision, what in dropped:
            DGD_ACTIONS.labels(dgd=self.actuator.dgd, outcome="stopped").inc()
            log.warning(
                "DGD %s decision %s/%d: not applied: stopped (%s)",
                self.actuator.dgd,
                decision.deployment,
                decision.decision_id,
                what,
            )
        for job in [j for j in self._jobs if j.done()]:
            if (error := job.exception()) is not None:
                log.error("DGD %s: applier failed before the stop: %r", self.actuator.dgd, error)


class DgdSink(DynamicSink[Any]):
    """Applies :class:`schemas.ScalingDecision` items to a DGD (``(key, decision)`` pairs too).

    A :class:`schemas.TickRecord` contributes its ``decision`` (if any) and a
    :class:`schemas.DeadLetter` is passed over, so the sink can sit on the planner's combined
    output; anything else is dead-lettered (counted, logged).

    Within one batch only the newest decision of a deployment is applied (older ones are
    reported ``superseded``). With ``deployment`` set, decisions of other deployments are
    passed over: every actuator sees the decisions of every deployment, and each deployment's
    ``dgd://`` output applies its own. ``on_result`` receives every
    :class:`connectors.dgd.ApplyResult`.

    Decisions are applied on one background thread per worker, so a slow or hanging API server
    never holds up the dataflow (an apply makes at most ``max_attempts`` attempts with backoff
    between them, each a read and a patch, and two more per service with a scaling adapter,
    every request bounded as a whole by the request timeout: :mod:`connectors.dgd`). What
    waits is at most one decision per deployment, the newest: a newer one arriving before the
    waiting one was applied takes its place (the older one is reported ``superseded``), so
    decisions are applied in order and never stack up. ``on_result`` is
    called on the applier thread for applied decisions, on the worker thread for superseded
    ones. When the sink's input ends (finite runs), bytewax calls the partition's ``close``,
    which applies what is queued first (that one waits on the API server, with all retries).
    A stop request (:func:`connectors.stopping.stop_waiting`, which ``flowplanner run`` calls
    on SIGTERM/SIGINT) ends that wait, or spares it when bytewax closes the sink as it unwinds
    the stop: each
    decision still queued or in flight is then logged as a warning naming its deployment and
    decision id, counted with ``outcome="stopped"``, and not given to ``on_result`` (nor is
    the later result of an apply the stop found in flight: it ends on its daemon thread or
    with the process, and may still reach the DGD).

    >>> sink = DgdSink(lambda: None, deployment="llama")
    >>> sink.deployment
    'llama'
    """

    def __init__(
        self,
        actuator_factory: ActuatorFactory,
        *,
        deployment: str | None = None,
        on_result: Callable[[ApplyResult], None] | None = None,
    ) -> None:
        self.actuator_factory = actuator_factory
        self.deployment = deployment
        self.on_result = on_result

    @classmethod
    def from_target(
        cls,
        target: str,
        *,
        deployment: str | None = None,
        on_result: Callable[[ApplyResult], None] | None = None,
        **actuator_kwargs: Any,
    ) -> DgdSink:
        """A sink for ``dgd://<namespace>/<name>``; ``actuator_kwargs`` go to
        :meth:`DgdActuator.from_environment` (``mode``, ``backend``, ``host``, ``token``, ...)."""
        factory = _factory_for(target, **actuator_kwargs)
        return cls(factory, deployment=deployment, on_result=on_result)

    def delivered(self) -> list[DeliveredDecision]:
        """The decision the DGD's annotation says our last patch carried (see
        :meth:`connectors.dgd.DgdActuator.delivered`); one of another deployment is ignored."""
        actuator = self.actuator_factory()
        actuator.validate()  # a missing or unfit DGD is named as such
        mark = actuator.delivered()
        if mark is None:
            return []
        if self.deployment is not None and mark.deployment != self.deployment:
            log.warning(
                "DGD %s was last patched for deployment %r, not %r: its decisions do not count",
                actuator.dgd,
                mark.deployment,
                self.deployment,
            )
            return []
        return [mark]

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DgdSinkPartition:
        """Build the worker's actuator and validate the DGD (raises on a bad DGD)."""
        actuator = self.actuator_factory()
        actuator.validate()
        return _DgdSinkPartition(actuator, self.deployment, self.on_result)


def fleet_events(deployment: str, time: float, reading: FleetReading) -> list[Event]:
    """The events of one DGD read: its :class:`schemas.InventoryEvent` and, when some role's
    per-GPU power cap is known, a :class:`schemas.CapabilitiesEvent` naming only those caps
    (capabilities merge field by field, so it erases no other capability of the role).

    >>> from schemas import WorkerCounts
    >>> reading = FleetReading(WorkerCounts(), {"prefill": None, "decode": 700}, ())
    >>> [e.type for e in fleet_events("llama", 5.0, reading)]
    ['inventory', 'capabilities']
    >>> caps = fleet_events("llama", 5.0, reading)[1]
    >>> caps.time, caps.payload.prefill, caps.payload.decode.gpu_power_limit_w
    (5.0, None, 700)
    >>> len(fleet_events("llama", 5.0, FleetReading(WorkerCounts(), {"decode": None}, ())))
    1
    """
    events: list[Event] = [InventoryEvent(deployment=deployment, time=time, payload=reading.counts)]
    caps = {
        role: EngineCapabilities(gpu_power_limit_w=watts)
        for role, watts in reading.gpu_power_limits.items()
        if watts is not None
    }
    if caps:
        payload = WorkerCapabilities(**caps)
        events.append(CapabilitiesEvent(deployment=deployment, time=time, payload=payload))
    return events


class _DgdInventoryPartition(StatefulSourcePartition[Event, None]):
    def __init__(
        self,
        actuator: DgdActuator,
        deployment: str,
        interval: timedelta,
        clock: Callable[[], float],
        max_polls: int | None,
    ) -> None:
        self.actuator = actuator
        self.deployment = deployment
        self.interval = interval
        self.clock = clock
        self.max_polls = max_polls
        self.polls = 0
        self.awake: datetime | None = None
        self._poller = DaemonExecutor(f"dgd-inventory-{deployment}")
        self._pending: Future[list[Event]] | None = None
        self._warned: set[str] = set()  # power-cap problems already logged

    def next_batch(self) -> list[Event]:
        if inputs_ended():
            raise StopIteration
        if self._pending is not None:
            if not self._pending.done():
                return []  # the read is still in flight: never wait for it here
            events = self._pending.result()  # re-raises a bug in the read
            self._pending = None
            if events:
                EVENTS_IN.labels(source="dgd").inc(len(events))
            return events
        if self.max_polls is not None and self.polls >= self.max_polls:
            raise StopIteration
        now = datetime.now(UTC)
        if self.awake is not None and now < self.awake:
            return []  # woken early (see next_awake): not due yet
        self.polls += 1
        self.awake = now + self.interval
        self._pending = self._poller.submit(self._poll)
        return []

    def _poll(self) -> list[Event]:
        """On the poller thread: one read of the DGD; nothing if it failed (logged)."""
        try:
            reading = self.actuator.read_fleet(retry=False)
        except DgdUnavailableError as err:
            log.warning("DGD inventory poll failed (will retry in %s): %s", self.interval, err)
            return []
        for problem in reading.power_problems:
            if problem not in self._warned:
                self._warned.add(problem)
                log.warning("DGD %s: per-GPU power cap unknown: %s", self.actuator.dgd, problem)
        return fleet_events(self.deployment, self.clock(), reading)

    def next_awake(self) -> datetime | None:
        if self._pending is not None:
            return datetime.now(UTC) + PENDING_CHECK
        if self.max_polls is not None and self.polls >= self.max_polls:
            return None  # done: let next_batch end the partition now
        # Never sleep past bytewax's epoch (10 s): a new epoch waits for every partition, so a
        # longer poll interval stalled every other input until the poll.
        return None if self.awake is None else min(self.awake, datetime.now(UTC) + MAX_SLEEP)

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()  # a read in flight ends by its deadline, on a daemon thread
        self._poller.shutdown(wait=False)


class DgdInventorySource(FixedPartitionedSource[Event, None]):
    """Polls the DGD every ``interval`` and yields one :class:`schemas.InventoryEvent` per poll,
    followed by a :class:`schemas.CapabilitiesEvent` of the per-GPU power caps when the DGD
    names any (see :func:`fleet_events`).

    Event time is system time (``clock``, default :func:`time.time`); ``deployment`` is the
    planner's deployment key. Each read runs on a background thread and is handed over once it
    has finished, so a hanging API server never stops the other inputs; one read at a time, so
    events come in poll order. A failed poll yields nothing (logged and counted in
    ``flowplanner_dgd_read_errors_total``): an unreadable DGD is never reported as zero
    workers. One partition, so in a multi-worker cluster exactly one worker polls.
    ``max_polls`` ends the source after that many polls (tests, one-shot runs). A power-cap
    annotation that cannot be read leaves that role's cap out and is logged as a warning once
    per distinct problem; it never fails the poll.

    >>> src = DgdInventorySource(lambda: None, "llama", timedelta(seconds=10))
    >>> src.list_parts()
    ['dgd-inventory:llama']
    """

    def __init__(
        self,
        actuator_factory: ActuatorFactory,
        deployment: str,
        interval: timedelta = timedelta(seconds=10),
        *,
        clock: Callable[[], float] = time.time,
        max_polls: int | None = None,
    ) -> None:
        if interval <= timedelta(0):
            raise ValueError("interval must be positive")
        self.actuator_factory = actuator_factory
        self.deployment = deployment
        self.interval = interval
        self.clock = clock
        self.max_polls = max_polls

    @classmethod
    def from_target(
        cls,
        target: str,
        deployment: str,
        interval: timedelta = timedelta(seconds=10),
        *,
        clock: Callable[[], float] = time.time,
        max_polls: int | None = None,
        **actuator_kwargs: Any,
    ) -> DgdInventorySource:
        """A source for ``dgd://<namespace>/<name>`` (``actuator_kwargs`` as for the sink)."""
        factory = _factory_for(target, **actuator_kwargs)
        return cls(factory, deployment, interval, clock=clock, max_polls=max_polls)

    def list_parts(self) -> list[str]:
        return [f"dgd-inventory:{self.deployment}"]

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _DgdInventoryPartition:
        actuator = self.actuator_factory()
        actuator.validate()
        return _DgdInventoryPartition(
            actuator, self.deployment, self.interval, self.clock, self.max_polls
        )
