"""Parts of an input or output address (``SCHEME://HOST:PORT/PATH?name=value&...``): the
``HOST:PORT`` it connects to and its options."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit


def has_host_port(netloc: str) -> bool:
    """Whether ``netloc`` is a ``HOST:PORT`` this process can connect to: a host (IPv6 in
    brackets) and a port 1-65535.

    Every ``HOST:PORT`` of our addresses is one we connect to (a Kafka broker, an engine's FPM
    publisher), never one we bind, so what only means something to ``bind`` is refused: an
    empty host or ``*`` (ZeroMQ's "all interfaces"; ``connect`` rejects it once running) and
    port 0 ("any free port"; a connect to it never reaches a publisher). So are a user part
    (``user@host``: neither Kafka nor ZeroMQ takes one) and blanks.

    >>> has_host_port("127.0.0.1:9092"), has_host_port("[::1]:20380"), has_host_port("b1:1")
    (True, True, True)
    >>> [has_host_port(n) for n in ("h", ":9092", "*:9092", "h:0", "h:x", "h:70000", "")]
    [False, False, False, False, False, False, False]
    >>> has_host_port("u@h:80"), has_host_port("h :80")
    (False, False)
    """
    if "@" in netloc or any(c.isspace() for c in netloc):
        return False
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return False
    return parts.hostname not in (None, "", "*") and port is not None and port > 0


def address_options(address: str, query: str) -> dict[str, str]:
    """The options of an address's query string, each given once; raises ``ValueError``
    naming the address when one is given twice or the query is malformed.

    >>> address_options("zmq+tcp://h:1?role=decode", "role=decode&deployment=")
    {'role': 'decode', 'deployment': ''}
    >>> address_options("kafka://h:1/t?until=end&until=end", "until=end&until=end")
    Traceback (most recent call last):
    ...
    ValueError: kafka://h:1/t?until=end&until=end: option 'until' given 2 times
    """
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as error:
        raise ValueError(f"{address}: bad options ({error})") from None
    options = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise ValueError(f"{address}: option {name!r} given {len(values)} times")
        options[name] = values[0]
    return options
