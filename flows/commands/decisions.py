"""``flowplanner decisions``: print the decisions in a Kafka topic as a table a person can read.

One row per decision: time, deployment, id, prefill and decode as ``current->target``, source,
and the reason (with the per-role reasons when they differ, and the note). A message that is not
a valid ScalingDecision is shown as an ``ERROR`` row with its partition, offset and the reason.
Times that look like Unix time (after 2001-09-09) are printed as UTC date and time; smaller
values (the event time of a recording that starts at 0) as seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence

from connectors.kafka import DecisionMessage, KafkaConnectorError, read_decision_messages
from connectors.virtual import held_instead
from flows.display import format_step, format_time
from schemas import ScalingDecision

COLUMNS = ("TIME", "DEPLOYMENT", "ID", "PREFILL", "DECODE", "SOURCE", "REASON")
DEFAULT_WIDTHS = (20, 16, 4, 9, 9, 10)
"""Widths of every column but the last (used when following, before the data is known)."""


def timeout_seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds > 0 (librdkafka takes a negative one as forever).

    >>> timeout_seconds("2.5")
    2.5
    >>> timeout_seconds("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a number of seconds > 0, got '-1'
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return seconds


def format_reason(decision: ScalingDecision) -> str:
    """The reason column: reason, per-role reasons when they say more, and the note.

    >>> d = ScalingDecision(deployment="d", decision_id=1, time=0, reason="scale_up",
    ...                     source="load", prefill_reason="no_change", decode_reason="scale_up",
    ...                     note="proceeded without acknowledgement")
    >>> format_reason(d)
    'scale_up [prefill: no_change, decode: scale_up] | note: proceeded without acknowledgement'
    """
    text = decision.reason
    roles = [
        (role, reason)
        for role, reason in (
            ("prefill", decision.prefill_reason),
            ("decode", decision.decode_reason),
        )
        if reason is not None
    ]
    if any(reason != decision.reason for _, reason in roles):
        text += " [" + ", ".join(f"{role}: {reason}" for role, reason in roles) + "]"
    if decision.note:
        text += f" | note: {decision.note}"
    return text


def decision_cells(item: ScalingDecision | DecisionMessage) -> tuple[str, ...]:
    """The table cells of one decision, or of a message that is not one (an ERROR row)."""
    if isinstance(item, DecisionMessage):
        if item.decision is None:
            return (
                "ERROR",
                item.key or "",
                "",
                "",
                "",
                "",
                f"partition {item.partition} offset {item.offset}: {item.error}",
            )
        item = item.decision
    return (
        format_time(item.time),
        item.deployment,
        str(item.decision_id),
        format_step(item.current_prefill, item.num_prefill),
        format_step(item.current_decode, item.num_decode),
        item.source,
        format_reason(item),
    )


def format_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    """Cells padded to ``widths`` (the id right-aligned), the last cell as is."""
    padded = [
        cell.rjust(width) if name == "ID" else cell.ljust(width)
        for name, cell, width in zip(COLUMNS, cells, widths, strict=False)
    ]
    return "  ".join([*padded, cells[-1]]).rstrip()


def format_decisions_table(items: Iterable[ScalingDecision | DecisionMessage]) -> str:
    """A header and one row per decision (or unreadable message), columns sized to fit.

    >>> d = ScalingDecision(deployment="llama", decision_id=7, time=105.0, num_prefill=3,
    ...                     current_prefill=2, current_decode=4, reason="scale_up",
    ...                     source="load")
    >>> print(format_decisions_table([d]))
    TIME   DEPLOYMENT  ID  PREFILL  DECODE    SOURCE  REASON
    105.0  llama        7  2->3     4 (keep)  load    scale_up
    """
    rows = [decision_cells(item) for item in items]
    widths = [len(name) for name in COLUMNS[:-1]]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=False)]
    return "\n".join(format_row(cells, widths) for cells in [COLUMNS, *rows])


def run(args: argparse.Namespace) -> int:
    try:
        _refuse_other_planner_topics(args.bootstrap, args.topic, args.timeout)
        messages = read_decision_messages(
            args.bootstrap,
            args.topic,
            follow=args.follow,
            from_beginning=not args.new_only,
            timeout_s=args.timeout,
        )
        if args.follow:
            print(format_row(COLUMNS, DEFAULT_WIDTHS), flush=True)
            for message in messages:
                print(format_row(decision_cells(message), DEFAULT_WIDTHS), flush=True)
        else:
            found = list(messages)
            found.sort(key=_reading_order)
            print(format_decisions_table(found))
    except KafkaConnectorError as error:
        print(f"flowplanner decisions: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _refuse_other_planner_topics(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Refuse a topic of the planner's input events or acknowledgements (an ERROR row for
    every message of it said the same, less plainly)."""
    held = held_instead(bootstrap, topic, "scaling decisions", timeout_s=timeout_s)
    if held is not None:
        raise KafkaConnectorError(
            f"Kafka topic {topic} at {bootstrap} holds {held}, not scaling decisions: "
            "decisions are in the topic named by the planner's output"
        )


def _reading_order(message: DecisionMessage) -> tuple[int, float, str, int, int]:
    # Decisions by time then deployment and id; unreadable messages last, by position.
    if message.decision is None:
        return (1, 0.0, "", message.partition, message.offset)
    d = message.decision
    return (0, d.time, d.deployment, d.decision_id, 0)


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decisions",
        help="print the scaling decisions in a Kafka topic as a table",
        description="Print the scaling decisions in a Kafka topic as a table. Without "
        "--follow, reads what the topic holds now (sorted by time) and exits.",
    )
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka broker")
    parser.add_argument("--topic", required=True, help="decisions topic")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep printing new decisions as they arrive, those of partitions added to the "
        "topic meanwhile included (read from their beginning)",
    )
    parser.add_argument(
        "--new-only", action="store_true", help="skip the decisions already in the topic"
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up when the broker does not answer for this long (default 10)",
    )
    parser.set_defaults(func=run)
