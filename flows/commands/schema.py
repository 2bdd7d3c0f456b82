"""``flowplanner schema``: print the JSON Schema of every wire type."""

from __future__ import annotations

import argparse
import json

from pydantic import BaseModel, TypeAdapter

from schemas import (
    EVENT_ADAPTER,
    DeadLetter,
    DecisionAck,
    ForwardPassMetrics,
    PlannerFile,
    ScalingDecision,
    TickRecord,
    TrafficObservation,
)

WIRE_TYPES: dict[str, type[BaseModel] | TypeAdapter] = {
    "ForwardPassMetrics": ForwardPassMetrics,
    "Event": EVENT_ADAPTER,
    "TrafficObservation": TrafficObservation,
    "ScalingDecision": ScalingDecision,
    "DecisionAck": DecisionAck,
    "TickRecord": TickRecord,
    "DeadLetter": DeadLetter,
    "PlannerFile": PlannerFile,
}


def wire_schemas() -> dict[str, dict]:
    """JSON Schema of each wire type, by name."""
    return {
        name: kind.json_schema() if isinstance(kind, TypeAdapter) else kind.model_json_schema()
        for name, kind in WIRE_TYPES.items()
    }


def run(args: argparse.Namespace) -> int:
    schemas = wire_schemas()
    # one type: its schema itself, ready for a validator; all: a mapping of name to schema
    print(json.dumps(schemas[args.type] if args.type else schemas, indent=2))
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of every wire type")
    parser.add_argument(
        "type", nargs="?", choices=sorted(WIRE_TYPES), help="only this type's schema (unwrapped)"
    )
    parser.set_defaults(func=run)
