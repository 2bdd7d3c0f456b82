"""Admission of inputs: decode, validate, and dead-letter what the planner cannot use.

Every input is either admitted as a typed event or turned into a :class:`schemas.DeadLetter`
whose reason says what was wrong and where; nothing raises. Rejected: bytes that are not UTF-8
(the reason names the first bad byte and its offset), malformed JSON, schema
violations (wrong types, NaN or negative counts — the message names the field), FPMs no real
forward pass can have (above ``schemas.fpm.FPM_CEILINGS``, checked while decoding; the message
names the field), deployments the config does not know, and engine roles the deployment's mode
does not have.
"""

from __future__ import annotations

from pydantic import ValidationError

from schemas import (
    DeadLetter,
    Event,
    FpmBatchEvent,
    FpmEvent,
    PlannerConfig,
    RawEvent,
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
                return self._reject(item, f"invalid event: {problem}")
            except Exception as exc:  # a validator's own failure must not stop the flow
                return self._reject(item, f"invalid event: {type(exc).__name__}: {exc}")
        else:
            event = item
        config = self.configs.get(event.deployment)
        if config is None:
            known = ", ".join(sorted(self.configs))
            reason = f"unknown deployment {event.deployment!r} (the config has {known})"
            return self._reject(item, reason, event)
        if isinstance(event, _ENGINE_EVENTS) and event.payload.role not in config.roles:
            reason = f"role {event.payload.role!r} is not part of mode {config.mode!r}"
            return self._reject(item, reason, event)
        return event

    @staticmethod
    def _reject(item: RawEvent | Event, reason: str, event: Event | None = None) -> DeadLetter:
        if isinstance(item, RawEvent):
            raw = item.data.decode(errors="replace") if isinstance(item.data, bytes) else item.data
            source, position = item.source, item.position
        else:
            raw, source, position = item.model_dump_json(), "typed", None
        return DeadLetter(
            source=source,
            position=position,
            reason=reason,
            raw=raw.strip(),
            deployment=event.deployment if event is not None else None,
        )
