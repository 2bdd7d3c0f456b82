"""Fixtures of the simulator tests: the shipped H200 profile and traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.profiles import load_profile
from connectors.traces import read_trace
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILE_DIR = DATA / "profiles" / "h200_llama3.1-8b-fp8_tp1"
TRACES = DATA / "traces"


@pytest.fixture(scope="session")
def h200() -> PerformanceProfile:
    return load_profile(PROFILE_DIR)


@pytest.fixture(scope="session")
def azure_conv() -> list[TraceRequest]:
    return read_trace(TRACES / "azure_2023_conv.csv")


@pytest.fixture(scope="session")
def mooncake() -> list[TraceRequest]:
    return read_trace(TRACES / "mooncake_arxiv_first1000.jsonl")
