"""Where ``flowplanner run`` reads and writes: input and output addresses → bytewax connectors.

Inputs: ``PATH`` (recorded JSONL, ``.gz`` ok). Outputs for decisions: ``-`` (readable lines on
stdout) or ``PATH`` (JSON lines). More schemes (Kafka, ZMQ, Kubernetes) register here.
"""

from __future__ import annotations

from bytewax.inputs import Source
from bytewax.outputs import Sink

from connectors.console import JsonlFileSink, LineSink
from connectors.recorded import RecordedSource
from flows.display import decision_line


class EndpointError(ValueError):
    """An input or output address that cannot be used."""


def is_live(address: str) -> bool:
    """Whether an input is unbounded and timed by the system clock.

    >>> is_live("examples/stream.jsonl")
    False
    """
    return "://" in address and not address.startswith("file://")


def input_source(address: str) -> Source:
    """The bytewax source for one ``--input`` address."""
    if "://" in address and not address.startswith("file://"):
        raise EndpointError(f"unsupported input {address!r}")
    return RecordedSource([address.removeprefix("file://")])


def decision_sink(address: str) -> Sink:
    """The bytewax sink for one ``--output`` address (decisions)."""
    if address == "-":
        return LineSink(decision_line)
    if "://" in address and not address.startswith("file://"):
        raise EndpointError(f"unsupported output {address!r}")
    return JsonlFileSink(address.removeprefix("file://"))
