"""List selectors of the test API server (the equality-based subset)."""

from __future__ import annotations

import re
from typing import Any

from .api_status import ApiError


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``).

    >>> label_selector_matches("app=planner,!canary", {"app": "planner"})
    True
    """
    if re.search(r"\s(in|notin)\s*\(", selector):
        raise ApiError(
            400, "BadRequest", "set-based label selectors are not supported by the test server"
        )
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in re.split("==?", term, maxsplit=1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    """Field selector on ``metadata.name`` / ``metadata.namespace`` (``=``, ``==``, ``!=``).

    >>> field_selector_matches("metadata.name!=a", {"metadata": {"name": "b"}})
    True
    """
    meta = obj.get("metadata", {})
    fields = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace")}
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        negate = "!=" in term
        key, value = (s.strip() for s in re.split("!=|==?", term, maxsplit=1))
        if key not in fields:
            raise ApiError(400, "BadRequest", f"field label not supported: {key}")
        if (fields[key] == value) == negate:
            return False
    return True
