"""Reading StreamingQuery manifests (the same YAML a user applies) into pure models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from sluice.core.errors import ManifestError, Problem
from sluice.core.spec import QuerySpec, UpgradePolicy

API_GROUP = "sluice.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"


@dataclass(frozen=True)
class QueryManifest:
    name: str
    namespace: str
    spec: QuerySpec
    upgrade: UpgradePolicy
    raw: dict[str, Any]


def _loc_to_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}"
    return path


def validation_problems(exc: ValidationError, prefix: str) -> list[Problem]:
    """Turn pydantic errors into problems that name the manifest field."""
    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        problems.append(Problem(message=err["msg"], field=_loc_to_path(prefix, loc)))
    return problems


def parse_manifest(text: str) -> QueryManifest:
    """Parse one StreamingQuery manifest; raise ManifestError naming the field or YAML line."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError([Problem(f"invalid YAML: {problem}", line=line, column=column)]) from exc
    queries = [d for d in docs if isinstance(d, dict) and d.get("kind") == "StreamingQuery"]
    if not queries:
        raise ManifestError(
            [Problem("no StreamingQuery found (expected kind: StreamingQuery)", field="kind")]
        )
    if len(queries) > 1:
        raise ManifestError([Problem("more than one StreamingQuery in one file", field="kind")])
    doc = queries[0]
    api_version = doc.get("apiVersion")
    if api_version != API_VERSION:
        raise ManifestError(
            [Problem(f"apiVersion must be {API_VERSION!r}, got {api_version!r}", field="apiVersion")]
        )
    metadata = doc.get("metadata") or {}
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise ManifestError([Problem("metadata.name is required", field="metadata.name")])
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError([Problem("spec is required and must be a mapping", field="spec")])
    try:
        query = QuerySpec.model_validate(spec)
        upgrade = UpgradePolicy.model_validate(spec.get("upgrade") or {})
    except ValidationError as exc:
        raise ManifestError(validation_problems(exc, "spec")) from exc
    return QueryManifest(
        name=str(metadata["name"]),
        namespace=str(metadata.get("namespace") or "default"),
        spec=query,
        upgrade=upgrade,
        raw=doc,
    )
