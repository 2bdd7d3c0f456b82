"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the test API server applies them.

Both functions are pure: they return a new document and never mutate their inputs.

>>> merge_patch({"a": 1, "b": {"c": 2}}, {"b": {"c": None, "d": 3}})
{'a': 1, 'b': {'d': 3}}
>>> json_patch({"a": [1, 2]}, [{"op": "test", "path": "/a/0", "value": 1},
...                            {"op": "add", "path": "/a/-", "value": 3}])
{'a': [1, 2, 3]}
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied (bad operation, missing path, failed ``test``)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes a key, anything else replaces.

    >>> merge_patch({"a": [1, 2]}, {"a": [3]})
    {'a': [3]}
    >>> merge_patch("x", {"k": None, "v": 1})
    {'v': 1}
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_pointer(pointer: str) -> list[str]:
    """RFC 6901 JSON pointer to its reference tokens (``~1`` is ``/``, ``~0`` is ``~``).

    >>> parse_pointer("/spec/services/a~1b/replicas")
    ['spec', 'services', 'a/b', 'replicas']
    >>> parse_pointer("")
    []
    """
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality: ``true`` is not ``1``, ``1`` equals ``1.0``.

    >>> json_equal(True, 1), json_equal(1, 1.0), json_equal({"a": [1]}, {"a": [1]})
    (False, True, True)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _array_index(token: str, size: int, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return size
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > size or (index == size and not allow_end):
        raise PatchError(f"array index {index} out of bounds (length {size})")
    return index


def _parent(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path {pointer!r}: missing key {token!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), allow_end=False)]
        else:
            raise PatchError(f"path {pointer!r}: cannot descend into a scalar")
    return node


def _get(doc: Any, pointer: str) -> Any:
    tokens = parse_pointer(pointer)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {pointer!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_array_index(last, len(parent), allow_end=False)]
    raise PatchError(f"path {pointer!r}: cannot index a scalar")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = parse_pointer(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_array_index(last, len(parent), allow_end=True), value)
    else:
        raise PatchError(f"path {pointer!r}: cannot add to a scalar")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = parse_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove: path {pointer!r} does not exist")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_array_index(last, len(parent), allow_end=False)]
    else:
        raise PatchError(f"path {pointer!r}: cannot remove from a scalar")
    return doc


def _operand(op: dict[str, Any], name: str) -> Any:
    if name not in op:
        raise PatchError(f"operation {op.get('op')!r} is missing {name!r}")
    return op[name]


def json_patch(document: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations in order; any failure rejects the whole patch.

    >>> try:
    ...     json_patch({"r": 1}, [{"op": "test", "path": "/r", "value": 2}])
    ... except PatchError as e:
    ...     print(e)
    test failed: value at '/r' is 1, not 2
    """
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be an array of operations")
    doc = copy.deepcopy(document)
    for op in operations:
        if not isinstance(op, dict):
            raise PatchError(f"operation {op!r} is not an object")
        kind = op.get("op")
        path = _operand(op, "path")
        if not isinstance(path, str):
            raise PatchError(f"path {path!r} is not a string")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(_operand(op, "value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            value = copy.deepcopy(_operand(op, "value"))
            _get(doc, path)
            doc = value if path == "" else _add(_remove(doc, path), path, value)
        elif kind in ("move", "copy"):
            source = _operand(op, "from")
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                if path.startswith(source + "/"):
                    raise PatchError(f"cannot move {source!r} into its own child {path!r}")
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            actual = _get(doc, path)
            expected = _operand(op, "value")
            if not json_equal(actual, expected):
                raise PatchError(f"test failed: value at {path!r} is {actual!r}, not {expected!r}")
        else:
            raise PatchError(f"unknown operation {kind!r}")
    return doc
