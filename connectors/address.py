"""Options of an input or output address (``SCHEME://HOST:PORT/PATH?name=value&...``)."""

from __future__ import annotations

from urllib.parse import parse_qs


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
