"""A pre-deployment performance profile (reference spec §6.1): what an engine costs.

Loaded from ``selected_prefill_interpolation/raw_data.npz`` and
``selected_decode_interpolation/raw_data.npz`` (or the JSON fallbacks) by
``connectors.profiles.load_profile``; used to bootstrap the perf models and to calibrate the
simulator.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator


class PrefillProfile(BaseModel):
    """Prefill sweep: TTFT (ms) and throughput per GPU (tokens/s) at each ISL.

    >>> p = PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                    prefill_thpt_per_gpu=[5000, 27500])
    >>> dict(zip(p.prefill_isl, p.prefill_ttft))  # ISL → TTFT (ms)
    {100.0: 20.0, 1100.0: 40.0}
    >>> from pydantic import ValidationError
    >>> try:
    ...     PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20], prefill_thpt_per_gpu=[5])
    ... except ValidationError as err:
    ...     print(err.errors()[0]["msg"])
    Value error, prefill profile arrays must have equal length
    """

    model_config = ConfigDict(frozen=True)

    prefill_isl: list[float]
    prefill_ttft: list[float]
    prefill_thpt_per_gpu: list[float]

    @model_validator(mode="after")
    def _same_length(self) -> PrefillProfile:
        if not len(self.prefill_isl) == len(self.prefill_ttft) == len(self.prefill_thpt_per_gpu):
            raise ValueError("prefill profile arrays must have equal length")
        return self


class DecodeProfile(BaseModel):
    """Decode sweep: ITL (ms) and throughput per GPU at (KV usage fraction, context length).

    >>> d = DecodeProfile(x_kv_usage=[0.1, 0.5], y_context_length=[1000, 4000], z_itl=[6, 21],
    ...                   z_thpt_per_gpu=[900, 3800], max_kv_tokens=100_000)
    >>> [(u * d.max_kv_tokens, itl) for u, itl in zip(d.x_kv_usage, d.z_itl)]  # KV → ITL ms
    [(10000.0, 6.0), (50000.0, 21.0)]
    """

    model_config = ConfigDict(frozen=True)

    x_kv_usage: list[float]
    y_context_length: list[float]
    z_itl: list[float]
    z_thpt_per_gpu: list[float]
    max_kv_tokens: int

    @model_validator(mode="after")
    def _same_length(self) -> DecodeProfile:
        n = len(self.x_kv_usage)
        if not n == len(self.y_context_length) == len(self.z_itl) == len(self.z_thpt_per_gpu):
            raise ValueError("decode profile arrays must have equal length")
        return self


class PerformanceProfile(BaseModel):
    """Both sweeps of one engine configuration.

    >>> p = PerformanceProfile(prefill=PrefillProfile(prefill_isl=[100], prefill_ttft=[20],
    ...                                               prefill_thpt_per_gpu=[5000]))
    >>> p.decode is None
    True
    """

    model_config = ConfigDict(frozen=True)

    prefill: PrefillProfile | None = None
    decode: DecodeProfile | None = None
