"""Readable validation errors (shared by every place that admits input)."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(error: ValidationError) -> str:
    """One line naming each failing field.

    >>> from schemas.fpm import ForwardPassMetrics
    >>> try:
    ...     ForwardPassMetrics.model_validate({"dp_rank": -1})
    ... except ValidationError as exc:
    ...     print(describe_validation_error(exc))
    dp_rank: Input should be greater than or equal to 0
    """
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(parts)
