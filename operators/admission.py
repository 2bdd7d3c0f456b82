"""Admission of inputs: decode, validate, and dead-letter what the planner cannot use.

Every input is either admitted as a typed event or turned into a :class:`schemas.DeadLetter`
whose reason says what was wrong and where; nothing raises. Rejected: malformed JSON, schema
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


class Admission:
    """Decides, per input item, between an admitted event and a dead letter.

    >>> from schemas import RawEvent, PlannerConfig
    >>> admit = Admission({"llama": PlannerConfig(mode="agg")})
    >>> admit(RawEvent("in.jsonl", 1, '{"type":"clock","deployment":"llama","time":1}')).type
    'clock'
    >>> admit(RawEvent("in.jsonl", 2, '{"type":"clock","deployment":"x","time":1}')).reason
    "unknown deployment 'x' (the config has llama)"
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
                return self._reject(item, f"invalid event: {describe_validation_error(exc)}")
            except Exception as exc:  # a validator's own failure must not stop the flow
                return self._reject(item, f"invalid event: {type(exc).__name__}: {exc}")
        else:
            event = item
        config = self.configs.get(event.deployment)
        if config is None:
            known = ", ".join(sorted(self.configs))
            reason = f"unknown deployment {event.deployment!r} (the config has {known})"
            return self._reject(item, reason, event)
        if isinstance(event, FpmEvent | FpmBatchEvent) and event.payload.role not in config.roles:
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
