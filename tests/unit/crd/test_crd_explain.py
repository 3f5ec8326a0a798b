"""``kubectl explain`` is complete: every field of both CRDs' schemas says what it is."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.crd import KINDS
from sluice.crd.generate import crd_for

#: the API server refuses anything on ``metadata`` but name/generateName rules (a description too)
NOT_DESCRIBABLE = {".metadata"}


def undescribed(node: dict[str, Any], path: str = "") -> list[str]:
    """Paths of the properties (at any depth, through arrays and maps) without a description, and of
    array items and map values that are objects of their own (``kubectl explain`` shows them)."""
    out: list[str] = []
    for name, sub in (node.get("properties") or {}).items():
        where = f"{path}.{name}"
        if not str(sub.get("description") or "").strip() and where not in NOT_DESCRIBABLE:
            out.append(where)
        out += undescribed(sub, where)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        sub = node.get(key)
        if isinstance(sub, dict):
            if sub.get("type") == "object" and sub.get("properties") and not sub.get("description"):
                out.append(path + suffix)
            out += undescribed(sub, path + suffix)
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_property_of_the_schema_has_a_description(kind: Any) -> None:
    root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["description"]
    assert undescribed(root) == []


def test_the_walk_finds_what_is_missing() -> None:
    schema = {"properties": {
        "a": {"type": "string"},
        "b": {"type": "array", "description": "b", "items": {"type": "object", "properties": {
            "c": {"type": "integer"}, "d": {"type": "string", "description": "d"}}}},
        "e": {"type": "object", "description": "e", "additionalProperties": {"type": "string"}},
        "metadata": {"type": "object"},
    }}
    assert undescribed(schema) == [".a", ".b[]", ".b[].c"]
