"""What one deployment's planner knows of its engines, shared by the load and throughput loops.

:class:`EngineFleet` holds the config, the engine capabilities, the worker inventory, the
runtime metadata (KV hit rate, accept length) and the perf models (SLA target), and answers the
questions both loops ask of them: a role's capabilities, GPUs per replica and minimum endpoint
count, the GPU (and power) budget as this tick sees the fleet, and what one replica of a role
serves at given lengths (:meth:`~EngineFleet.capacity`). Plain state: it pickles.
"""

from __future__ import annotations

import logging
from functools import partial

from operators.bootstrap import limit_overshoot, within_engine_limits
from operators.gpu_budget import GpuBudget
from operators.inventory import Inventory
from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.power_budget import PowerBudget
from operators.throughput_scaling import (
    Capacity,
    agg_capacity,
    decode_capacity,
    prefill_capacity,
)
from operators.traffic_intake import RuntimeMetadata
from schemas import EngineCapabilities, PlannerConfig, Role, WorkerCapabilities

PerfModel = PrefillPerfModel | DecodePerfModel | AggPerfModel

_NO_CAPS = EngineCapabilities()

log = logging.getLogger(__name__)

_LIMITS = {"max_num_seqs", "max_num_batched_tokens", "max_kv_tokens"}
"""The capabilities that bound one forward pass (:mod:`operators.engine_limits`)."""


def perf_models(config: PlannerConfig) -> dict[Role, PerfModel]:
    """The perf models of ``config``'s roles (SLA target only; agg keeps its one under
    ``decode``), each empty.

    >>> sorted(perf_models(PlannerConfig(mode="disagg", optimization_target="sla")))
    ['decode', 'prefill']
    >>> perf_models(PlannerConfig(mode="decode", optimization_target="load",
    ...                           decode_scale_up_kv_rate=80, decode_scale_down_kv_rate=20))
    {}
    """
    models: dict[Role, PerfModel] = {}
    if not config.sla_mode:
        return models
    sizes = (
        config.max_num_fpm_samples,
        config.load_min_observations,
        config.fpm_sample_bucket_size,
    )
    suspect_factor = config.perf_model_suspect_factor
    if config.mode == "agg":
        models["decode"] = AggPerfModel(*sizes, suspect_factor=suspect_factor)
    else:
        for role in config.roles:
            if role == "prefill":
                models[role] = PrefillPerfModel(
                    *sizes, basis=config.perf_model_basis, suspect_factor=suspect_factor
                )
            else:
                models[role] = DecodePerfModel(*sizes, suspect_factor=suspect_factor)
    return models


class EngineFleet:
    """The deployment's engines as the planner sees them: config, capabilities, inventory,
    runtime metadata and perf models.

    >>> from schemas import WorkerCounts
    >>> caps = WorkerCapabilities(decode=EngineCapabilities(num_gpu=2))
    >>> fleet = EngineFleet(PlannerConfig(mode="decode", optimization_target="sla"), caps)
    >>> fleet.gpus_per_replica("decode"), fleet.min_endpoint("decode"), list(fleet.models)
    (2, 1, ['decode'])
    >>> fleet.inventory.update(WorkerCounts(ready_num_decode=3))
    >>> fleet.budget().ready["decode"], fleet.accept_length
    (3, 1.0)
    """

    def __init__(
        self, config: PlannerConfig, capabilities: WorkerCapabilities | None = None
    ) -> None:
        self.config = config
        self.capabilities = capabilities or WorkerCapabilities()
        self.inventory = Inventory()
        self.metadata = RuntimeMetadata()
        self.models = perf_models(config)

    def caps(self, role: Role) -> EngineCapabilities:
        """The capabilities of ``role``'s engines (all unknown until discovered/configured)."""
        caps = self.capabilities.prefill if role == "prefill" else self.capabilities.decode
        return caps or _NO_CAPS

    def gpus_per_replica(self, role: Role) -> int | None:
        """GPUs of one replica of ``role``: the workers' capabilities, else the config."""
        configured = (
            self.config.prefill_engine_num_gpu
            if role == "prefill"
            else self.config.decode_engine_num_gpu
        )
        return self.caps(role).num_gpu or configured

    def min_endpoint(self, role: Role) -> int:
        """The fewest replicas ``role`` may have."""
        return self.config.min_endpoint_for(role)

    @property
    def accept_length(self) -> float:
        """Effective speculative-decoding accept length (1.0 without speculation)."""
        return self.metadata.accept_length(self._speculative_nextn())

    def _speculative_nextn(self) -> int:
        discovered = self.caps("decode").speculative_nextn
        return discovered if discovered else self.config.speculative_nextn

    def retire_foreign_benchmarks(self) -> None:
        """Ours (``bootstrap_within_engine_limits``): drop bootstrap samples no forward pass of
        these engines can have (see :func:`operators.bootstrap.within_engine_limits`).

        Never below ``load_min_observations`` samples: a profile swept far past a small
        ``max_num_batched_tokens`` would otherwise leave the model nothing to fit and the
        planner no capacity before live data (spec §6). The points beyond the limits nearest
        them (:func:`operators.bootstrap.limit_overshoot`) stay then, as few as make up the
        minimum, with a warning naming the role, how many were beyond and what stayed.
        """
        if not self.config.bootstrap_within_engine_limits:
            return
        for role, model in self.models.items():
            caps = self.caps(role)
            kept_before = model.rejected_kept
            retired = model.retire_benchmarks(
                partial(within_engine_limits, caps=caps),
                nearness=partial(limit_overshoot, caps=caps),
            )
            kept = model.rejected_kept
            if kept and kept != kept_before:  # once per change, not at every capability update
                log.warning(
                    "%s: %d bootstrap points are beyond the engine's limits (%s); kept the %d "
                    "nearest them (up to %.3gx a limit) so the perf model has "
                    "load_min_observations = %d samples",
                    role,
                    retired + len(kept),
                    caps.model_dump(exclude_none=True, include=_LIMITS),
                    len(kept),
                    max(limit_overshoot(fpm, caps) for fpm in kept),
                    model.min_observations,
                )

    def budget(self) -> GpuBudget:
        """The GPU budget (and the power budget, when on) as this tick sees the fleet.

        A replica whose GPUs neither the engines nor the config give counts as 1 GPU, the
        fewest it can have (the reference's defaults class; the config's own check at start
        assumes the same): ``max_gpu_budget`` is a ceiling from the first tick, not only once
        a count is known (spec §8.1 leaves an unknown count unclamped).

        >>> fleet = EngineFleet(PlannerConfig(mode="decode", max_gpu_budget=2))
        >>> fleet.gpus_per_replica("decode"), fleet.budget().gpus["decode"]
        (None, 1)
        """
        roles: tuple[Role, Role] = ("prefill", "decode")
        return GpuBudget(
            self.config,
            {role: self.gpus_per_replica(role) or 1 for role in roles},
            {role: self.inventory.ready(role) for role in roles},
            power=self.power_budget(),
            in_effect={role: self.inventory.current_target(role) for role in roles},
        )

    def power_budget(self) -> PowerBudget | None:
        """The power budget (``enable_power_awareness`` with a limit), else ``None``."""
        limit = self.config.total_gpu_power_limit
        if not self.config.enable_power_awareness or limit is None:
            return None
        roles: tuple[Role, Role] = ("prefill", "decode")
        watts: dict[Role, int | None] = {}
        for role in roles:
            gpus, cap = self.gpus_per_replica(role), self.caps(role).gpu_power_limit_w
            watts[role] = None if gpus is None or cap is None else gpus * cap
        return PowerBudget(limit, watts, {role: self.min_endpoint(role) for role in roles})

    def capacity(
        self, role: Role, demand_rps: float, isl: float, osl: float, floor: bool = True
    ) -> Capacity:
        """What ``role`` needs for ``demand_rps`` requests/s of these lengths within the SLAs,
        by its perf model (``Capacity(None)`` without one); at least the role's minimum
        endpoints unless ``floor=False``."""
        cfg = self.config
        caps = self.caps(role)
        model = self.models.get(role)
        min_ep = self.min_endpoint(role) if floor else 0
        if isinstance(model, PrefillPerfModel):
            return prefill_capacity(
                model,
                demand_rps,
                isl,
                kv_hit_rate=self.metadata.kv_hit_rate,
                ttft_sla_ms=cfg.ttft_ms,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                min_endpoint=min_ep,
                max_batch_requests=(
                    caps.max_num_seqs or caps.max_num_batched_tokens
                    if cfg.prefill_capacity_batching
                    else None
                ),
            )
        if isinstance(model, DecodePerfModel):
            return decode_capacity(
                model,
                demand_rps,
                isl,
                osl,
                itl_sla_ms=cfg.itl_ms,
                max_kv_tokens=caps.max_kv_tokens,
                max_num_seqs=caps.max_num_seqs,
                accept_length=self.accept_length,
                min_endpoint=min_ep,
            )
        if isinstance(model, AggPerfModel):
            return agg_capacity(
                model,
                demand_rps,
                isl,
                osl,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                ttft_sla_ms=cfg.ttft_ms,
                itl_sla_ms=cfg.itl_ms,
                max_kv_tokens=caps.max_kv_tokens,
                max_num_seqs=caps.max_num_seqs,
                kv_hit_rate=self.metadata.kv_hit_rate,
                accept_length=self.accept_length,
                min_endpoint=min_ep,
            )
        return Capacity(None)
