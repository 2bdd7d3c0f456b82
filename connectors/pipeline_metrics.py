"""Pipeline health counters, shared by every source and sink (prometheus-client default registry).

They are exported together with the planner gauges by the metrics exporter.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

EVENTS_IN = Counter("flowplanner_events_in", "Input events read, before validation", ["source"])
DEAD_LETTERS = Counter(
    "flowplanner_dead_letters", "Inputs rejected with a reason (dead-lettered)", ["kind"]
)
DEAD_LETTER_KINDS = frozenset(
    (
        "invalid",
        "unknown",
        "role",
        "late",
        "ahead",
        "stray",
        "truncated",
        "corrupt",
        "malformed",
        "undecodable",
        "duplicate",
        "ignored",
        "limits",
    )
)
"""The ``kind`` label of a dead letter: the first word of its reason when it is one of these
(every reason the flow writes starts with one), else ``other`` — a label is never free text.
The DGD sink counts its own rejected decisions as ``dgd_sink``."""


def dead_letter_kind(reason: str) -> str:
    """The ``kind`` label of a dead letter with this reason.

    >>> dead_letter_kind("late: event time 3 is behind"), dead_letter_kind("Boom at 0x7f")
    ('late', 'other')
    """
    word = reason.split(":")[0].split(" ")[0]
    return word if word in DEAD_LETTER_KINDS else "other"


FPM_GAPS = Counter(
    "flowplanner_fpm_sequence_gaps",
    "FPM messages missing according to publisher sequence numbers",
    ["endpoint"],
)
FPM_SEQUENCE_RESETS = Counter(
    "flowplanner_fpm_sequence_resets",
    "Jumps of an FPM publisher's sequence that are not lost messages, by reason: restart "
    "(backwards, and the next message goes on from there), backward_stray (one frame behind, "
    "the next goes on from before it) or implausible_jump (forward by more than a publisher "
    "could have sent)",
    ["endpoint", "reason"],
)
DECISIONS_OUT = Counter("flowplanner_decisions_out", "Scaling decisions emitted", ["deployment"])
DECISION_DELIVERY_WAITS = Counter(
    "flowplanner_decision_delivery_waits",
    "Waits of a decision sink's flush for an unreachable broker (each as long as its timeout)",
    ["sink"],
)
REPORT_WRITE_FAILURES = Counter(
    "flowplanner_report_write_failures",
    "Diagnostics report pages that could not be written (skipped; the run goes on)",
    ["deployment"],
)
FPM_ENGINES = Gauge(
    "flowplanner_fpm_engines",
    "Engines heard from over ZMQ within engine_silence_seconds",
    ["deployment", "role"],
)
FPM_ENGINES_EXPIRED = Counter(
    "flowplanner_fpm_engines_expired",
    "Engines that went silent for engine_silence_seconds (treated as gone)",
    ["deployment", "role"],
)
TRAFFIC_UNKNOWN = Counter(
    "flowplanner_traffic_unknown",
    "Traffic reads whose result was unknown (missing series or failed query), by reason",
    ["deployment", "reason"],
)
