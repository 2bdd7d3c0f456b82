"""Pipeline health counters, shared by every source and sink (prometheus-client default registry).

They are exported together with the planner gauges by the metrics exporter.
"""

from __future__ import annotations

from prometheus_client import Counter

EVENTS_IN = Counter("flowplanner_events_in", "Input events read, before validation", ["source"])
DEAD_LETTERS = Counter(
    "flowplanner_dead_letters", "Inputs rejected with a reason (dead-lettered)", ["kind"]
)
FPM_GAPS = Counter(
    "flowplanner_fpm_sequence_gaps",
    "FPM messages missing according to publisher sequence numbers",
    ["endpoint"],
)
DECISIONS_OUT = Counter("flowplanner_decisions_out", "Scaling decisions emitted", ["deployment"])
