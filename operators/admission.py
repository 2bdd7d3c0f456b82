"""Admission of inputs: decode, validate, and dead-letter what the planner cannot use.

Every input is either admitted as a typed event or turned into a :class:`schemas.DeadLetter`
whose reason says what was wrong and where; nothing raises. Rejected: bytes that are not UTF-8
(the reason names the first bad byte and its offset), malformed JSON, schema
violations (wrong types, NaN or negative counts — the message names the field), FPMs no real
forward pass can have (above ``schemas.fpm.FPM_CEILINGS``, checked while decoding; the message
names the field), deployments the config does not know, and engine roles the deployment's mode
does not have. A forward-pass batch of the right shape with rows no forward pass can have
(``schemas.FpmBatch.refused_rows``) is admitted with its other rows, and the refused rows are
one dead letter that names them (:meth:`Admission.admit`): one bad pass costs no valid one.
"""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from schemas import (
    AckEvent,
    CapabilitiesEvent,
    DeadLetter,
    Event,
    FpmBatchEvent,
    FpmEvent,
    InventoryEvent,
    PlannerConfig,
    RawEvent,
    Role,
    describe_validation_error,
    parse_event,
)

_ENGINE_EVENTS = (FpmEvent, FpmBatchEvent)
"""Events that carry an engine role (a tuple built once: ``A | B`` in the check rebuilt a union
on every event)."""


def not_utf8(data: str | bytes) -> str | None:
    """What makes ``data`` not UTF-8 text, or ``None`` when it is (or is already text).

    Only asked once decoding failed, so valid input pays nothing for it.

    >>> not_utf8(b'{"type": "\\xff"}')
    'not UTF-8 text: byte 0xff at offset 10 (invalid start byte)'
    >>> not_utf8(b'{}') is None
    True
    """
    if isinstance(data, str):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    return None


class Admission:
    """Decides, per input item, between an admitted event and a dead letter.

    >>> from schemas import RawEvent, PlannerConfig
    >>> admit = Admission({"llama": PlannerConfig(mode="agg")})
    >>> admit(RawEvent("in.jsonl", 1, '{"type":"clock","deployment":"llama","time":1}')).type
    'clock'
    >>> admit(RawEvent("in.jsonl", 2, '{"type":"clock","deployment":"x","time":1}')).reason
    "unknown deployment 'x' (the config has llama)"
    >>> admit(RawEvent("in.jsonl", 3, b"\\xfe{}")).reason
    'invalid event: not UTF-8 text: byte 0xfe at offset 0 (invalid start byte)'

    Calling it decodes and checks one input as a whole (a forward-pass batch by its shape);
    the flow, and the scale bench, admit with :meth:`admit`, which also splits a batch's
    refused rows off.
    """

    def __init__(self, configs: dict[str, PlannerConfig]) -> None:
        self.configs = configs

    def __call__(self, item: RawEvent | Event | DeadLetter) -> Event | DeadLetter:
        if isinstance(item, DeadLetter):
            return item
        if isinstance(item, RawEvent):
            try:
                event = parse_event(item.data)
            except ValidationError as exc:
                problem = not_utf8(item.data) or describe_validation_error(exc)
                return self._reject(item, f"invalid event: {problem}", owner=self._owner(item))
            except Exception as exc:  # a validator's own failure must not stop the flow
                reason = f"invalid event: {type(exc).__name__}: {exc}"
                return self._reject(item, reason, owner=self._owner(item))
            if isinstance(event, AckEvent):  # its dead letter names this line, as written
                event.read_at(item.source, item.position, _text(item).strip())
        else:
            event = item
        refused = self.refusal(event)
        return event if refused is None else self._reject(item, refused, event)

    def refusal(self, event: Event) -> str | None:
        """Why a decoded event is refused (its deployment or roles are not configured), or
        ``None``: it is admitted. A replay's merge keys (:mod:`connectors.merge_keys`) count
        only admitted events' times, as the event-time step does.

        >>> from schemas import ClockEvent, PlannerConfig
        >>> admission = Admission({"llama": PlannerConfig(mode="agg")})
        >>> admission.refusal(ClockEvent(deployment="llama", time=1)) is None
        True
        >>> admission.refusal(ClockEvent(deployment="x", time=1))
        "unknown deployment 'x' (the config has llama)"
        """
        config = self.configs.get(event.deployment)
        if config is None:
            known = ", ".join(sorted(self.configs))
            return f"unknown deployment {event.deployment!r} (the config has {known})"
        if isinstance(event, _ENGINE_EVENTS) and event.payload.role not in config.roles:
            return f"role {event.payload.role!r} is not part of mode {config.mode!r}"
        foreign = [role for role in _roles_named(event) if role not in config.roles]
        if foreign:
            return f"{event.type} names role {foreign[0]!r}, not part of mode {config.mode!r}"
        return None

    def admit(self, item: RawEvent | Event | DeadLetter) -> list[Event | DeadLetter]:
        """What ``item`` admits: the event or its dead letter, as calling it; but a decoded
        forward-pass batch comes as the batch of its valid rows (none if no row is), then one
        dead letter for its refused rows: how many, and the first :data:`NAMED_ROWS` of them by
        index with why. One letter per input line, however many rows it refuses, keeps the
        dead letters (and their copies of the line) the size of the input.

        >>> from schemas import RawEvent, PlannerConfig
        >>> row = [1.0, 7, 0.02] + [0, 0, 0.0, 0, 4, 4000, 0.0] + [0, 0, 0.0, 0, 0, 0.0]
        >>> bad = row[:2] + [61.0] + row[3:]
        >>> rows = [row, bad, row[:1] + [8] + row[2:]] + [bad] * 4
        >>> line = ('{"type": "fpm_batch", "deployment": "d", "time": 1, "payload": '
        ...         f'{{"role": "decode", "rows": {rows}}}}}')
        >>> batch, letter = Admission({"d": PlannerConfig(mode="decode")}).admit(
        ...     RawEvent("in.jsonl", 4, line))
        >>> [row[1] for row in batch.payload.rows], letter.position
        ([7, 8], 4)
        >>> print(letter.reason)  # doctest: +NORMALIZE_WHITESPACE
        invalid event: fpm_batch.payload: 5 of 7 rows refused: row 1: wall_time = 61.0 is
        implausible for one forward pass (above MAX_FORWARD_PASS_SECONDS = 60.0); row 3: the
        same; row 4: the same; and 2 more
        """
        event = self(item)
        if not isinstance(event, FpmBatchEvent) or not isinstance(item, RawEvent):
            return [event]  # a typed batch was built inside: its producer checked its rows
        refused = event.payload.refused_rows()
        if not refused:
            return [event]
        letter = self._reject(item, _refused_rows_reason(refused, len(event.payload.rows)), event)
        skip = {i for i, _ in refused}
        rows = [row for i, row in enumerate(event.payload.rows) if i not in skip]
        if not rows:
            return [letter]
        payload = event.payload.model_copy(update={"rows": rows})
        return [event.model_copy(update={"payload": payload}), letter]

    def _owner(self, item: RawEvent) -> str | None:
        """The configured deployment a refused input names, if it names one (with several
        deployments on one input, whose bad input it was). Only that field is read: the rest of
        the line is skipped, not built again (a 20 MB line took 4x as long with ``json``)."""
        try:
            named = _Named.model_validate_json(item.data).deployment
        except ValueError:  # a ValidationError too: not JSON, or no deployment string
            return None
        return named if named in self.configs else None

    @staticmethod
    def _reject(
        item: RawEvent | Event,
        reason: str,
        event: Event | None = None,
        owner: str | None = None,
    ) -> DeadLetter:
        position: int | None
        if isinstance(item, RawEvent):
            raw, source, position = _text(item), item.source, item.position
        elif isinstance(item, AckEvent) and item.origin is not None:  # read from its topic
            source, position, raw = item.origin
        else:
            raw, source, position = item.model_dump_json(), "typed", None
        return DeadLetter(
            source=source,
            position=position,
            reason=reason,
            raw=raw.strip(),
            deployment=event.deployment if event is not None else owner,
        )


class _Named(BaseModel):
    """An input's ``deployment``, whatever else it holds."""

    model_config = ConfigDict(extra="ignore")
    deployment: str


def _text(item: RawEvent) -> str:
    """The input as text (bytes that are not UTF-8 with replacement characters)."""
    return item.data.decode(errors="replace") if isinstance(item.data, bytes) else item.data


def _roles_named(event: Event) -> list[Role]:
    """The roles an inventory or capabilities event gives replicas or limits (an inventory of
    a role the mode has not — 14 phantom prefill replicas of a decode deployment — went into
    its decisions and GPU-hours). Zero replicas, or empty limits, name no role: the reference's
    connector reports 0 prefill replicas of a deployment without a prefill service."""
    if isinstance(event, InventoryEvent):
        counts = event.payload
        return [
            role
            for role in get_args(Role)
            if getattr(counts, f"ready_num_{role}")
            or getattr(counts, f"expected_num_{role}")
            or getattr(counts, f"{role}_scaling_in_progress")
        ]
    if isinstance(event, CapabilitiesEvent):
        return [
            role
            for role in get_args(Role)
            if (caps := getattr(event.payload, role)) is not None
            and caps.model_dump(exclude_none=True)
        ]
    return []


NAMED_ROWS = 3
"""A forward-pass batch's dead letter names this many of its refused rows (the first); it counts
all of them."""


def _refused_rows_reason(refused: list[tuple[int, str]], total: int) -> str:
    """Why a batch's rows were refused: the first :data:`NAMED_ROWS` by index, with why (``the
    same`` when it repeats the row before), then how many more."""
    named: list[str] = []
    last = ""
    for i, problem in refused[:NAMED_ROWS]:
        named.append(f"row {i}: {'the same' if problem == last else problem}")
        last = problem
    more = len(refused) - len(named)
    if more:
        named.append(f"and {more} more")
    head = "" if len(refused) == 1 else f"{len(refused)} of {total} rows refused: "
    return f"invalid event: fpm_batch.payload: {head}{'; '.join(named)}"
