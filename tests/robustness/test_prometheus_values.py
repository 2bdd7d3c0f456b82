"""Prometheus answers that are well-formed numbers but no real fleet's traffic: a negative mean
length (a histogram sum that went down) and absurd magnitudes. Each is unknown traffic with a
reason and a count in ``flowplanner_traffic_unknown_total``, never a clamped or huge observation;
the next good answer reads again. (Served by the crafted Prometheus HTTP server of
``tests/prometheus/test_traffic_malformed.py``.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.prometheus.test_traffic_malformed import (
    GOOD,
    LABELS,
    CraftedPrometheus,
    Responder,
    frontend,
    new_source,
    unknown_count,
    vector,
)


def answers(num_req: str = "10", isl_sum: str = "10000", osl_sum: str = "1000") -> Responder:
    """A frontend whose 10 finished requests have the given length sums."""

    def answer(promql: str):
        if "unless" in promql:
            return 200, vector()
        if "requests_started_total" in promql:
            return 200, vector((LABELS, num_req))
        for name, total in (("input", isl_sum), ("output", osl_sum)):
            if f"{name}_sequence_tokens_sum" in promql:
                return 200, vector((LABELS, total))
            if f"{name}_sequence_tokens_count" in promql:
                return 200, vector((LABELS, "10"))
        return 200, vector()

    return answer


@pytest.fixture(scope="module")
def prometheus() -> Iterator[CraftedPrometheus]:
    server = CraftedPrometheus()
    try:
        yield server
    finally:
        server.stop()


CASES = {
    "negative ISL": (answers(isl_sum="-10000"), "bad_length", "ISL is -1000, not a length"),
    "negative OSL": (answers(osl_sum="-5"), "bad_length", "OSL is -0.5, not a length"),
    "huge ISL": (answers(isl_sum="1e300"), "implausible", "isl = 1e+299 is implausible"),
    "huge count": (answers(num_req="1e300"), "implausible", "num_req = 1e+300 over duration_s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_implausible_answer_is_unknown_then_a_good_one_reads(
    prometheus: CraftedPrometheus, case: str
) -> None:
    responder, reason, explanation = CASES[case]
    source = new_source(prometheus)
    prometheus.responder = responder
    assert source.observe(60.0, at=1000.0) is None
    assert unknown_count(source.deployment, reason) == 1
    assert explanation in (source.last_unknown_reason or "")

    prometheus.responder = frontend()
    assert source.observe(60.0, at=1000.0) == GOOD
    assert unknown_count(source.deployment, reason) == 1
