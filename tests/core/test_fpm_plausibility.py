"""Every plausibility ceiling of an FPM holds on every admission path: a single FPM (the event
envelope), an FPM batch row, and the fast msgpack decoder. A value at the ceiling is accepted,
the next value above it is refused with a reason naming the field."""

from __future__ import annotations

import json
import math

import msgpack
import pytest
from pydantic import ValidationError

from connectors.zmq_source import FpmDecodeError, FpmWireDecoder
from schemas import FPM_BATCH_COLUMNS, ForwardPassMetrics, fpm_to_row, parse_event
from schemas.fpm import FPM_CEILINGS, implausibility
from schemas.fpm_rows import row_problem


def fields_with(path: str, value: float) -> dict:
    """FPM constructor fields with one (possibly nested) field set."""
    *group, name = path.split(".")
    return {group[0]: {name: value}} if group else {name: value}


def just_above(limit: float) -> float:
    return limit + 1 if isinstance(limit, int) else math.nextafter(limit, math.inf)


def fpm_line(fields: dict) -> str:
    payload = {"role": "decode", "fpm": fields}
    return json.dumps({"type": "fpm", "deployment": "d", "time": 1.0, "payload": payload})


def column_of(path: str) -> int:
    group, _, name = path.rpartition(".")
    column = f"{group.removesuffix('_requests')}.{name}" if group else name
    return FPM_BATCH_COLUMNS.index(column)


def test_every_numeric_measurement_has_a_ceiling() -> None:
    # every column but the event time and the counter (an ever-growing id) is bounded
    bounded = {FPM_BATCH_COLUMNS[column_of(path)] for path in FPM_CEILINGS}
    assert bounded == set(FPM_BATCH_COLUMNS) - {"time", "counter_id"}


@pytest.mark.parametrize("path", sorted(FPM_CEILINGS))
def test_the_ceiling_is_accepted_and_above_it_is_refused_on_every_path(path: str) -> None:
    ceiling = FPM_CEILINGS[path]
    at = ForwardPassMetrics.model_validate(fields_with(path, ceiling.limit))
    above = ForwardPassMetrics.model_validate(fields_with(path, just_above(ceiling.limit)))

    assert implausibility(at) is None
    reason = implausibility(above)
    assert reason is not None and reason.startswith(f"{path} = ") and ceiling.name in reason

    # the event envelope (JSON and Kafka lines)
    assert parse_event(fpm_line(fields_with(path, ceiling.limit))).payload.fpm == at
    with pytest.raises(ValidationError, match=f"{path} = .* is implausible"):
        parse_event(fpm_line(fields_with(path, just_above(ceiling.limit))))

    # an FPM batch row names the column
    assert row_problem(fpm_to_row(1.0, at)) is None
    column = FPM_BATCH_COLUMNS[column_of(path)]
    assert (row_problem(fpm_to_row(1.0, above)) or "").startswith(f"{column} = ")

    # the ZMQ decoder: the fast path and the schema's verdict both refuse it
    decoder = FpmWireDecoder()
    assert decoder.decode(at.to_msgpack(), 1.0)[2] == fpm_to_row(1.0, at)
    payload = msgpack.packb(above.model_dump())
    with pytest.raises(FpmDecodeError, match=f"invalid FPM: {path} = "):
        decoder.decode(payload, 1.0)
