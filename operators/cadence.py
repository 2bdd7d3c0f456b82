"""When the planner ticks and what each tick asks for (reference spec §1.3).

Two cadences: load ticks every ``load_adjustment_interval_seconds`` (they always run, even when
only throughput scaling is on, so FPMs keep training the perf models) and throughput ticks every
``throughput_adjustment_interval_seconds`` (only when throughput scaling is on). Cadences due
within :data:`operators.tick.MERGE_TOLERANCE_S` of the earliest merge into one tick, and the
merged one is rescheduled from that tick — as in the reference, so intervals less than 0.5 s
apart keep merging (load 1 s and throughput 1.5 s both run every second). Ours
(``load_rate_window_seconds``): SLA load ticks also ask for the traffic of that recent window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from operators.tick import MERGE_TOLERANCE_S, ScheduledTick
from schemas import PlannerConfig


@dataclass
class Cadence:
    """The next due time of each loop, in the planner's clock (seconds).

    >>> cfg = PlannerConfig(optimization_target="sla", enable_load_scaling=True,
    ...                     throughput_adjustment_interval_seconds=60)
    >>> cadence = Cadence.starting_at(cfg, 100.0)
    >>> tick = cadence.next_tick(cfg)
    >>> tick.at_s, tick.run_load_scaling, tick.run_throughput_scaling
    (105.0, True, False)
    >>> tick.need_traffic_metrics, tick.traffic_metrics_duration_s  # ours: the recent rate
    (True, 30.0)
    >>> ref = cfg.reference_variant()
    >>> Cadence.starting_at(ref, 100.0).next_tick(ref).need_traffic_metrics
    False
    """

    next_load_s: float
    next_throughput_s: float

    @classmethod
    def starting_at(cls, config: PlannerConfig, start_s: float) -> Cadence:
        """Both loops first due one interval after ``start_s`` (throughput only if enabled)."""
        throughput = (
            start_s + config.throughput_adjustment_interval_seconds
            if config.enable_throughput_scaling
            else math.inf
        )
        return cls(start_s + config.load_adjustment_interval_seconds, throughput)

    def next_tick(self, config: PlannerConfig, due_by_s: float | None = None) -> ScheduledTick:
        """The earliest due tick, with every cadence due within the merge tolerance — of the
        earliest, or of ``due_by_s`` when later (a tick that runs late runs every loop due by
        then: one tick, one decision).

        >>> cfg = PlannerConfig(enable_throughput_scaling=True, load_adjustment_interval_seconds=5,
        ...                     throughput_adjustment_interval_seconds=60)
        >>> cadence = Cadence(next_load_s=55.0, next_throughput_s=60.0)
        >>> [(t.at_s, t.run_load_scaling, t.run_throughput_scaling)
        ...  for t in (cadence.next_tick(cfg), cadence.next_tick(cfg, due_by_s=205.0))]
        [(55.0, True, False), (55.0, True, True)]
        """
        at = min(self.next_load_s, self.next_throughput_s)
        horizon = at if due_by_s is None else max(at, due_by_s)
        is_load = self.next_load_s <= horizon + MERGE_TOLERANCE_S
        is_throughput = self.next_throughput_s <= horizon + MERGE_TOLERANCE_S
        # Load-only SLA deployments scrape traffic on every load tick, for the KV hit rate and
        # accept length only (spec §1.3); threshold (easy) modes use neither.
        load_only_scrape = (
            is_load
            and not is_throughput
            and config.sla_mode
            and config.enable_load_scaling
            and not config.enable_throughput_scaling
        )
        # Ours (``load_rate_window_seconds``): SLA load ticks read the recent request rate.
        rate_scrape = (
            is_load
            and not is_throughput
            and config.sla_mode
            and config.enable_load_scaling
            and config.load_rate_window_seconds > 0
        )
        if is_throughput:
            duration = config.throughput_adjustment_interval_seconds
        elif rate_scrape:
            duration = config.load_rate_window_seconds
        elif load_only_scrape:
            duration = config.load_adjustment_interval_seconds
        else:
            duration = 0.0
        return ScheduledTick(
            at_s=at,
            run_load_scaling=is_load,
            run_throughput_scaling=is_throughput,
            need_traffic_metrics=is_throughput or load_only_scrape or rate_scrape,
            traffic_metrics_duration_s=float(duration),
            need_worker_states=True,
            need_worker_fpm=is_load,
        )

    def advance(self, config: PlannerConfig, tick: ScheduledTick, now_s: float) -> None:
        """Reschedule the loops that ``tick`` ran, one interval after ``now_s``."""
        if tick.run_load_scaling:
            self.next_load_s = now_s + config.load_adjustment_interval_seconds
        if tick.run_throughput_scaling and config.enable_throughput_scaling:
            self.next_throughput_s = now_s + config.throughput_adjustment_interval_seconds
