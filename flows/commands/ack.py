"""``flowplanner ack``: acknowledge applied decisions (the external orchestrator's side).

Writes ``{"deployment": D, "acked_decision_id": N}`` to the virtual connector's acknowledgement
topic, so the planner sends the next decision it holds for ``D``; it applies from the planner's
next tick. ``--time`` records when it was applied, for the record only: the planner does not take
an acknowledgement's time as event time (an orchestrator's clock is not the data's).
"""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from connectors.kafka import KafkaConnectorError
from connectors.virtual import send_ack
from flows.commands.decisions import timeout_seconds
from schemas import describe_validation_error


def run(args: argparse.Namespace) -> int:
    try:
        ack = send_ack(
            args.bootstrap,
            args.topic,
            args.deployment,
            args.decision_id,
            time=args.time,
            timeout_s=args.timeout,
        )
    except ValidationError as error:
        print(f"flowplanner ack: {describe_validation_error(error)}", file=sys.stderr)
        return 2
    except KafkaConnectorError as error:
        print(f"flowplanner ack: {error}", file=sys.stderr)
        return 1
    print(
        f"acknowledged decision {ack.acked_decision_id} of {ack.deployment} on {args.topic}",
        flush=True,
    )
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ack",
        help="acknowledge a deployment's applied decisions (virtual connector)",
        description="Tell the planner that a deployment's decisions up to --decision-id have "
        "been applied, by writing to the acknowledgement topic (which the planner creates when "
        "it starts).",
    )
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka broker")
    parser.add_argument("--topic", required=True, help="acknowledgement topic")
    parser.add_argument("--deployment", required=True, help="deployment whose decisions applied")
    parser.add_argument(
        "--decision-id", required=True, type=int, metavar="N", help="newest decision id applied"
    )
    parser.add_argument(
        "--time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="when it was applied, for the record (default: none); the planner applies an "
        "acknowledgement from its next tick either way",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up when the broker does not acknowledge within this long (default 10)",
    )
    parser.set_defaults(func=run)
