"""Profile files that Python's JSON decoder or numpy refuse with something other than the errors
the reader already names (an integer of more than 4300 digits, nesting deeper than the recursion
limit, an integer beyond float range), and well-formed but absurd values (``max_kv_tokens`` of
1e300, a TTFT of 1e308 ms): each is a :class:`ProfileError` naming the file and the key."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from connectors.profiles import ProfileError, load_profile, read_benchmark

DECODE = {
    "x_kv_usage": [0.1, 0.5],
    "y_context_length": [1000, 1000],
    "z_itl": [5.0, 9.0],
    "z_thpt_per_gpu": [100.0, 200.0],
    "max_kv_tokens": 100_000,
}
BAD_JSON = {
    "4301-digit integer": (json.dumps(DECODE).replace("100000", "9" * 4301), "4300 digits"),
    "deep nesting": ('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    "int beyond float": (
        json.dumps(DECODE).replace("[100.0, 200.0]", f"[{10**400}, 1]"),
        "'z_thpt_per_gpu' is not an array of numbers",
    ),
    "max_kv_tokens 1e300": (
        json.dumps({**DECODE, "max_kv_tokens": 1e300}),
        r"'max_kv_tokens' = 1e\+300 must be an integer >= 1 and <= MAX_FPM_TOKENS",
    ),
    "context length 1e12": (
        json.dumps({**DECODE, "y_context_length": [1000, 1e12]}),
        r"'y_context_length'\[1\] = 1000000000000.0 must be finite and 0 or in \[1, MAX_REQUEST",
    ),
    "ragged max_kv_tokens": (
        json.dumps({**DECODE, "max_kv_tokens": [1, [2]]}),
        "'max_kv_tokens' is not a number",
    ),
    # a context of 0.4 tokens made each point a pass of 1.25 M decode requests (7 232 rps an
    # engine), and 1e-300 overflowed the request count with an error naming no file nor key
    "context length under one token": (
        json.dumps({**DECODE, "y_context_length": [1000, 0.4]}),
        r"'y_context_length'\[1\] = 0.4 must be finite and 0 or in \[1, MAX_REQUEST_TOKENS",
    ),
}


@pytest.mark.parametrize("case", list(BAD_JSON))
def test_a_bad_json_profile_is_a_profile_error(tmp_path: Path, case: str) -> None:
    text, message = BAD_JSON[case]
    (tmp_path / "decode_raw_data.json").write_text(text)
    with pytest.raises(ProfileError, match=message) as error:
        load_profile(tmp_path)
    assert "decode_raw_data.json" in str(error.value)


def test_an_absurd_npz_latency_is_a_profile_error(tmp_path: Path) -> None:
    (tmp_path / "selected_prefill_interpolation").mkdir()
    np.savez(
        tmp_path / "selected_prefill_interpolation/raw_data.npz",
        prefill_isl=np.array([100.0, 1000.0]),
        prefill_ttft=np.array([10.0, 1e308]),
        prefill_thpt_per_gpu=np.array([1e4, 2e4]),
    )
    with pytest.raises(ProfileError, match=r"'prefill_ttft'\[1\] = 1e\+308 must be finite"):
        load_profile(tmp_path)


def test_an_undecodable_self_benchmark_is_a_profile_error(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text('{"results": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ProfileError, match="nested too deeply"):
        read_benchmark(path)


def _prefill_arrays() -> dict[str, np.ndarray]:
    return {
        "prefill_isl": np.array([100.0, 1000.0]),
        "prefill_ttft": np.array([10.0, 50.0]),
        "prefill_thpt_per_gpu": np.array([1e4, 2e4]),
    }


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _deflated_garbage(path: Path) -> None:
    """A savez_compressed-style archive whose members' deflate data is a block of the reserved
    type 3 (zlib.error on reading; the CRC is never reached)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for key in _prefill_arrays():
            archive.writestr(f"{key}.npy", b"\x07" + bytes(63))
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # method: stored → deflate
        start = raw.find(signature)
        while start != -1:
            raw[start + offset] = 8
            start = raw.find(signature, start + 4)
    path.write_bytes(bytes(raw))


def _broken_header(path: Path) -> None:
    """An .npz whose first member's header dict lost its closing brace (numpy tokenizes it:
    tokenize.TokenError)."""
    with zipfile.ZipFile(path, "w") as archive:
        for key, array in _prefill_arrays().items():
            data = _npy_bytes(array)
            archive.writestr(f"{key}.npy", data.replace(b"}", b" ", 1))


BAD_NPZ = {
    "a plain .npy": (
        lambda p: p.write_bytes(_npy_bytes(np.arange(3.0))),
        "not an .npz file of named arrays but a single .npy array",
    ),
    "corrupt deflate data": (_deflated_garbage, r"not a readable \.npz file \(error: .*invalid"),
    "corrupt array header": (_broken_header, r"not a readable \.npz file \(TokenError"),
}


@pytest.mark.parametrize("case", list(BAD_NPZ))
def test_an_unreadable_npz_is_a_profile_error(tmp_path: Path, case: str) -> None:
    write, message = BAD_NPZ[case]
    (tmp_path / "selected_prefill_interpolation").mkdir()
    path = tmp_path / "selected_prefill_interpolation/raw_data.npz"
    write(path)
    with pytest.raises(ProfileError, match=message) as error:
        load_profile(tmp_path)
    assert str(path) in str(error.value)
