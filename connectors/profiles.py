"""Read a pre-deployment performance profile from disk (reference spec §6.1).

Layout of a profile directory (what the profiler writes)::

    {dir}/selected_prefill_interpolation/raw_data.npz   prefill_isl, prefill_ttft (ms),
                                                        prefill_thpt_per_gpu
    {dir}/selected_decode_interpolation/raw_data.npz    x_kv_usage, y_context_length, z_itl (ms),
                                                        z_thpt_per_gpu, max_kv_tokens ([0] used)
    {dir}/prefill_raw_data.json, {dir}/decode_raw_data.json   JSON fallbacks, same keys
                                                        (``max_kv_tokens`` a scalar there)

The NPZ of a side wins; its JSON is read only when the NPZ is absent. A side with neither file
is ``None`` in the result; a directory with no side at all, an unreadable file, a missing key or
a bad value (not finite, out of range, or beyond a plausibility ceiling: lengths above
``schemas.events.MAX_REQUEST_TOKENS``, ``max_kv_tokens`` above ``schemas.fpm.MAX_FPM_TOKENS``,
latencies above :data:`MAX_PROFILE_LATENCY_MS`, throughputs above :data:`MAX_PROFILE_THROUGHPUT`)
raises :class:`ProfileError` naming the file and the key.

:func:`read_benchmark` reads the other bootstrap source, a worker's self-benchmark.
"""

from __future__ import annotations

import json
import math
import tokenize
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import ValidationError

from schemas.events import MAX_REQUEST_TOKENS
from schemas.fpm import MAX_FPM_TOKENS
from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile

PREFILL_NPZ = Path("selected_prefill_interpolation") / "raw_data.npz"
DECODE_NPZ = Path("selected_decode_interpolation") / "raw_data.npz"
PREFILL_JSON = Path("prefill_raw_data.json")
DECODE_JSON = Path("decode_raw_data.json")

_Side = TypeVar("_Side", PrefillProfile, DecodeProfile)

# key -> check on every value (description, predicate)
_Check = tuple[str, Callable[[float], bool]]
MAX_PROFILE_LATENCY_MS = 3_600_000.0
"""*ours*: the longest TTFT or ITL a profile point may report (an hour): beyond it the point is
a broken measurement, not a slow engine."""
MAX_PROFILE_THROUGHPUT = 1e9
"""*ours*: the most tokens per second per GPU a profile point may report (10^4x today's best)."""

_FRACTION: _Check = ("in [0, 1]", lambda v: 0 <= v <= 1)


def _within(low: str, limit: float, name: str) -> _Check:
    above = (lambda v: v > 0) if low == "> 0" else (lambda v: v >= 0)
    return (f"{low} and <= {name} = {limit:g}", lambda v: above(v) and v <= limit)


_LENGTH = _within("> 0", MAX_REQUEST_TOKENS, "MAX_REQUEST_TOKENS")
_CONTEXT: _Check = (
    f"0 or in [1, MAX_REQUEST_TOKENS = {MAX_REQUEST_TOKENS:g}] (a context of under one token "
    "would count each point as millions of decode requests)",
    lambda v: v == 0 or 1 <= v <= MAX_REQUEST_TOKENS,
)
_LATENCY = _within("> 0", MAX_PROFILE_LATENCY_MS, "MAX_PROFILE_LATENCY_MS")
_THROUGHPUT = _within(">= 0", MAX_PROFILE_THROUGHPUT, "MAX_PROFILE_THROUGHPUT")
PREFILL_ARRAYS: dict[str, _Check] = {
    "prefill_isl": _LENGTH,
    "prefill_ttft": _LATENCY,
    "prefill_thpt_per_gpu": _THROUGHPUT,
}
DECODE_ARRAYS: dict[str, _Check] = {
    "x_kv_usage": _FRACTION,
    "y_context_length": _CONTEXT,
    "z_itl": _LATENCY,
    "z_thpt_per_gpu": _THROUGHPUT,
}


class ProfileError(ValueError):
    """A profile directory or file is missing or malformed (the message names file and key).

    >>> try:
    ...     load_profile("/nonexistent/profile")
    ... except ProfileError as error:
    ...     print(error)
    profile directory /nonexistent/profile does not exist or is not a directory
    """


def load_profile(directory: str | Path) -> PerformanceProfile:
    """Load both sweeps of the profile in ``directory``.

    >>> shipped = Path(__file__).parents[1] / "tests/data/profiles/h200_llama3.1-8b-fp8_tp1"
    >>> profile = load_profile(shipped)
    >>> len(profile.prefill.prefill_isl), profile.decode.max_kv_tokens
    (17, 945029)
    """
    root = Path(directory)
    if not root.is_dir():
        raise ProfileError(f"profile directory {root} does not exist or is not a directory")
    prefill = _load_side(root, PREFILL_NPZ, PREFILL_JSON, _prefill_from)
    decode = _load_side(root, DECODE_NPZ, DECODE_JSON, _decode_from)
    if prefill is None and decode is None:
        tried = ", ".join(
            str(root / p) for p in (PREFILL_NPZ, PREFILL_JSON, DECODE_NPZ, DECODE_JSON)
        )
        raise ProfileError(f"no profile data in {root} (looked for {tried})")
    return PerformanceProfile(prefill=prefill, decode=decode)


def read_benchmark(path: str | Path) -> Any:
    """The parsed JSON of a worker's saved self-benchmark (spec §6.3 priority 1).

    The file holds the answer of the worker's ``get_perf_metrics`` endpoint,
    ``{"results": [{"point": {"point_type": ...}, "fpms": [...]}]}``;
    :func:`operators.bootstrap.benchmark_fpms` turns it into forward passes.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "bench.json")
    >>> _ = open(path, "w").write('{"results": []}')
    >>> read_benchmark(path)
    {'results': []}
    """
    path = Path(path)
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise ProfileError(f"cannot read self-benchmark {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ProfileError(f"self-benchmark {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ProfileError(f"self-benchmark {path} is not valid JSON: nested too deeply") from None


def _load_side(
    root: Path, npz: Path, fallback: Path, build: Callable[[Path, dict[str, Any]], _Side]
) -> _Side | None:
    if (root / npz).is_file():
        return build(root / npz, _read_npz(root / npz))
    if (root / fallback).is_file():
        return build(root / fallback, _read_json(root / fallback))
    return None


_NPZ_DAMAGE = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,  # a corrupt compressed member (numpy.savez_compressed)
    tokenize.TokenError,  # a corrupt .npy header (numpy parses it as a Python literal)
    SyntaxError,
)


def _read_npz(path: Path) -> dict[str, Any]:
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                return {key: data[key] for key in data.files}
    except _NPZ_DAMAGE as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise ProfileError(f"{path}: not a readable .npz file ({reason})") from exc
    kind = "a single .npy array" if isinstance(data, np.ndarray) else type(data).__name__
    raise ProfileError(
        f"{path}: not an .npz file of named arrays but {kind} (write it with numpy.savez)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # also UnicodeDecodeError, JSONDecodeError, > 4300 digits
        raise ProfileError(f"{path}: not a readable JSON file ({exc})") from exc
    except RecursionError:
        raise ProfileError(f"{path}: not a readable JSON file (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _array(path: Path, data: dict[str, Any], key: str, check: _Check) -> list[float]:
    if key not in data:
        raise ProfileError(f"{path}: missing key {key!r}")
    raw = data[key]
    try:
        values = np.asarray(raw, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int > 1e308
        raise ProfileError(f"{path}: key {key!r} is not an array of numbers ({exc})") from exc
    if isinstance(raw, np.ndarray) and raw.dtype.kind not in "iuf":
        raise ProfileError(f"{path}: key {key!r} has dtype {raw.dtype}, expected numbers")
    if isinstance(raw, list) and any(isinstance(v, (bool, str)) for v in raw):
        raise ProfileError(f"{path}: key {key!r} must hold numbers only")
    if values.ndim != 1 or values.size == 0:
        raise ProfileError(f"{path}: key {key!r} must be a non-empty 1-D array")
    description, ok = check
    for i, v in enumerate(values.tolist()):
        if not math.isfinite(v) or not ok(v):
            raise ProfileError(f"{path}: key {key!r}[{i}] = {v!r} must be finite and {description}")
    return [float(v) for v in values.tolist()]


def _same_length(path: Path, arrays: dict[str, list[float]]) -> None:
    lengths = {key: len(values) for key, values in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ProfileError(f"{path}: arrays must have equal length, got {lengths}")


def _prefill_from(path: Path, data: dict[str, Any]) -> PrefillProfile:
    arrays = {key: _array(path, data, key, check) for key, check in PREFILL_ARRAYS.items()}
    _same_length(path, arrays)
    try:
        return PrefillProfile(**arrays)
    except ValidationError as exc:  # pragma: no cover - the checks above are stricter
        raise ProfileError(f"{path}: {exc}") from exc


def _decode_from(path: Path, data: dict[str, Any]) -> DecodeProfile:
    arrays = {key: _array(path, data, key, check) for key, check in DECODE_ARRAYS.items()}
    _same_length(path, arrays)
    if "max_kv_tokens" not in data:
        raise ProfileError(f"{path}: missing key 'max_kv_tokens'")
    try:
        raw = np.asarray(data["max_kv_tokens"])
    except (TypeError, ValueError) as exc:  # a ragged list: [1, [2]]
        raise ProfileError(f"{path}: key 'max_kv_tokens' is not a number ({exc})") from exc
    if raw.dtype.kind not in "iuf" or raw.size == 0 or raw.ndim > 1:
        raise ProfileError(f"{path}: key 'max_kv_tokens' must be a number (or a 1-D array of one)")
    max_kv = float(raw.reshape(-1)[0])
    if not math.isfinite(max_kv) or not 1 <= max_kv <= MAX_FPM_TOKENS or max_kv != int(max_kv):
        raise ProfileError(
            f"{path}: key 'max_kv_tokens' = {max_kv!r} must be an integer >= 1 and"
            f" <= MAX_FPM_TOKENS = {MAX_FPM_TOKENS}"
        )
    try:
        return DecodeProfile(**arrays, max_kv_tokens=int(max_kv))
    except ValidationError as exc:  # pragma: no cover - the checks above are stricter
        raise ProfileError(f"{path}: {exc}") from exc
