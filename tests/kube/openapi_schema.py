"""The subset of CRD ``openAPIV3Schema`` handling the test API server implements.

Like the real API server, an object is first *pruned* (fields the structural schema does not
know are dropped, as are ``null`` values of non-nullable fields) and then *validated*; each
violation becomes a ``metav1.StatusCause`` of a 422 ``Invalid`` response.

Supported keywords: ``type`` (object, array, string, integer, number, boolean), ``properties``,
``required``, ``additionalProperties`` (schema or boolean), ``items``, ``minimum``, ``maximum``,
``exclusiveMinimum``/``exclusiveMaximum`` (boolean form), ``enum``, ``minLength``,
``maxLength``, ``minItems``, ``maxItems``, ``minProperties``, ``maxProperties``, ``nullable``,
``x-kubernetes-preserve-unknown-fields`` and ``x-kubernetes-int-or-string``.

>>> schema = {"type": "object", "required": ["replicas"],
...           "properties": {"replicas": {"type": "integer", "minimum": 0}}}
>>> [c.message for c in validate({"replicas": -1}, schema, "spec")]
['Invalid value: -1: spec.replicas in body should be greater than or equal to 0']
>>> prune({"replicas": 1, "typo": 2}, schema, "spec")
({'replicas': 1}, ['spec.typo'])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One field error, as in ``metav1.StatusCause`` (``reason``, ``field``, ``message``).

    >>> Cause("FieldValueRequired", "spec.services", "Required value").as_status_cause()["field"]
    'spec.services'
    """

    reason: str
    field: str
    message: str

    def as_status_cause(self) -> dict[str, str]:
        """The JSON form used in a Status ``details.causes`` list."""
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value.

    >>> json_type(True), json_type(3), json_type(3.5), json_type(None)
    ('boolean', 'integer', 'number', 'null')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _render(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _matches_type(value: Any, schema: dict[str, Any]) -> bool:
    actual = json_type(value)
    if schema.get("x-kubernetes-int-or-string"):
        return actual in ("integer", "string")
    expected = schema.get("type")
    if expected is None:
        return True
    if expected == "number":
        return actual in ("integer", "number")
    return actual == expected


def prune(value: Any, schema: dict[str, Any], path: str = "") -> tuple[Any, list[str]]:
    """Drop unknown fields and non-nullable ``null`` fields; returns ``(pruned, dropped)``.

    >>> prune({"a": None, "b": {"x": 1}}, {"type": "object", "properties": {
    ...     "a": {"type": "string"}, "b": {"type": "object",
    ...                                    "x-kubernetes-preserve-unknown-fields": True}}})
    ({'b': {'x': 1}}, [])
    """
    dropped: list[str] = []
    if isinstance(value, dict) and (schema.get("type") in (None, "object")):
        props: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            child_path = _join(path, key)
            if key in props:
                child_schema = props[key]
            elif isinstance(extra, dict):
                child_schema = extra
            elif extra is True or keep_unknown:
                out[key] = item
                continue
            else:
                dropped.append(child_path)
                continue
            if item is None and not child_schema.get("nullable"):
                continue
            out[key], more = prune(item, child_schema, child_path)
            dropped.extend(more)
        return out, dropped
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items: list[Any] = []
        for i, item in enumerate(value):
            pruned, more = prune(item, schema["items"], f"{path}[{i}]")
            items.append(pruned)
            dropped.extend(more)
        return items, dropped
    return value, dropped


# The size keywords by the JSON type they bound (string lengths, array items, object
# properties): the minimum's keyword and message, then the maximum's.
_SIZE_KEYWORDS: tuple[tuple[type, tuple[str, str], tuple[str, str]], ...] = (
    (
        str,
        ("minLength", "should be at least {} chars long"),
        ("maxLength", "may not be more than {} bytes"),
    ),
    (
        list,
        ("minItems", "should have at least {} items"),
        ("maxItems", "should have at most {} items"),
    ),
    (
        dict,
        ("minProperties", "should have at least {} properties"),
        ("maxProperties", "should have at most {} properties"),
    ),
)


def _numeric_bounds(value: Any, schema: dict[str, Any]) -> list[str]:
    """What a number breaks of ``minimum``/``maximum`` (``exclusive*``: boolean form)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return []
    broken: list[str] = []
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            broken.append(f"should be greater than {low}")
        elif value < low:
            broken.append(f"should be greater than or equal to {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            broken.append(f"should be less than {high}")
        elif value > high:
            broken.append(f"should be less than or equal to {high}")
    return broken


def _size_bounds(value: Any, schema: dict[str, Any]) -> list[str]:
    """What a string, array or object breaks of its size keywords (see ``_SIZE_KEYWORDS``)."""
    broken: list[str] = []
    for sized, (low_key, too_small), (high_key, too_large) in _SIZE_KEYWORDS:
        if not isinstance(value, sized):
            continue
        if low_key in schema and len(value) < schema[low_key]:
            broken.append(too_small.format(schema[low_key]))
        if high_key in schema and len(value) > schema[high_key]:
            broken.append(too_large.format(schema[high_key]))
    return broken


def _unsupported_value(value: Any, supported: list[Any], path: str) -> Cause:
    """The ``FieldValueNotSupported`` cause of a value outside its ``enum``."""
    listed = ", ".join(_render(v) for v in supported)
    message = f"Unsupported value: {_render(value)}: supported values: {listed}"
    return Cause("FieldValueNotSupported", path, message)


def _check_bounds(value: Any, schema: dict[str, Any], path: str) -> list[Cause]:
    """The value keywords' violations: numeric bounds, then sizes, then ``enum``."""
    causes = [
        Cause("FieldValueInvalid", path, f"Invalid value: {_render(value)}: {path} in body {text}")
        for text in (*_numeric_bounds(value, schema), *_size_bounds(value, schema))
    ]
    if "enum" in schema and value not in schema["enum"]:
        causes.append(_unsupported_value(value, schema["enum"], path))
    return causes


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[Cause]:
    """Every violation of ``schema`` by ``value``, depth first (empty list = valid).

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    >>> validate({"n": "3"}, schema)[0].message
    'Invalid value: "string": n in body must be of type integer: "string"'
    """
    if value is None:
        if schema.get("nullable"):
            return []
        expected = schema.get("type", "object")
        message = f'Invalid value: "null": {path} in body must be of type {expected}: "null"'
        return [Cause("FieldValueTypeInvalid", path, message)]
    if not _matches_type(value, schema):
        expected = "integer or string" if schema.get("x-kubernetes-int-or-string") else None
        expected = expected or schema.get("type")
        actual = json_type(value)
        message = (
            f'Invalid value: "{actual}": {path} in body must be of type {expected}: "{actual}"'
        )
        return [Cause("FieldValueTypeInvalid", path, message)]
    causes = _check_bounds(value, schema, path)
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                causes.append(Cause("FieldValueRequired", _join(path, key), "Required value"))
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = props.get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                causes.extend(validate(item, child, _join(path, key)))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            causes.extend(validate(item, schema["items"], f"{path}[{i}]"))
    return causes
