"""Readable validation errors (shared by every place that admits input)."""

from __future__ import annotations

from pydantic import ValidationError

MAX_LISTED_PROBLEMS = 5
"""A description names at most this many failing fields, then says how many more there are."""

MAX_PROBLEM_CHARS = 300
"""Each named problem is clipped to this many characters (field names and some messages quote
the input, e.g. an unknown key or an unknown event type, and input can be megabytes)."""


def describe_validation_error(error: ValidationError) -> str:
    """One bounded line naming each failing field (the first few, then how many more).

    >>> from schemas.fpm import ForwardPassMetrics
    >>> try:
    ...     ForwardPassMetrics.model_validate({"dp_rank": -1})
    ... except ValidationError as exc:
    ...     print(describe_validation_error(exc))
    dp_rank: Input should be greater than or equal to 0
    >>> from schemas.decision import DecisionAck
    >>> try:
    ...     DecisionAck.model_validate({f"k{i}": 0 for i in range(5)})
    ... except ValidationError as exc:
    ...     print(describe_validation_error(exc))  # doctest: +ELLIPSIS
    deployment: Field required; acked_decision_id: Field required; k0: ...; k2: ...; +2 more
    """
    problems = error.errors(include_url=False)
    parts = [_describe_problem(item["loc"], item["msg"]) for item in problems[:MAX_LISTED_PROBLEMS]]
    if len(problems) > MAX_LISTED_PROBLEMS:
        parts.append(f"+{len(problems) - MAX_LISTED_PROBLEMS} more")
    return "; ".join(parts)


def _describe_problem(loc: tuple[int | str, ...], message: str) -> str:
    where = ".".join(str(part) for part in loc)
    text = f"{where}: {message}" if where else message
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"
