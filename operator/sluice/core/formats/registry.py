"""What the operator decides from a schema registry's answers (pure): whether the query may use avro
at all (its QueryCluster names a registry), and whether a sink's new schema may replace the subject's
latest version in place (the registry's compatibility answer, and its reason when it says no)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.core.errors import Problem
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec

__all__ = ["admission_registry_check", "changed_sink_schema", "incompatibility", "registry_problems"]


def registry_problems(query: QuerySpec, cluster_name: str, has_registry: bool) -> list[Problem]:
    """An avro source or sink needs the QueryCluster's ``spec.schemaRegistry``."""
    if has_registry:
        return []
    why = f"needs a schema registry: QueryCluster {cluster_name!r} has no spec.schemaRegistry"
    problems = [Problem(f"source '{s.name}' has format avro and {why}", field=f"spec.sources[{i}].format")
                for i, s in enumerate(query.sources) if s.format == "avro"]
    if query.sink.format == "avro":
        problems.append(Problem(f"the sink has format avro and {why}", field="spec.sink.format"))
    return problems


def incompatibility(subject: str, answer: Mapping[str, Any]) -> str | None:
    """Why the registry refuses a schema under ``subject`` (None: compatible), from its answer to
    ``POST /compatibility/subjects/<subject>/versions/latest?verbose=true``: Confluent's registry gives
    ``messages`` (a list), Apicurio's ccompat API a ``reason``."""
    if answer.get("is_compatible", True) is not False:
        return None
    said = answer.get("messages") or answer.get("reason") or []
    reasons = [str(m) for m in said] if isinstance(said, list) else [str(said)]
    detail = "; ".join(r.strip() for r in reasons if str(r).strip()) or "no reason given"
    return (f"the sink's new Avro schema is incompatible with subject {subject!r} under its compatibility "
            f"level, so it cannot be changed in place: {detail}")


def changed_sink_schema(plan: Plan, running: Plan | None) -> RegistrySchema | None:
    """The avro sink schema of ``plan`` that the registry must accept under its subject: None when the
    sink writes json, or when the running plan writes the same schema to the same subject already."""
    schema = plan.sink.value_schema
    if schema is None or (running is not None and running.sink.value_schema == schema):
        return None
    return schema


def admission_registry_check(query: QuerySpec, plan: Plan, running: Plan | None,
                             sink_check: Callable[[RegistrySchema], str | None] | None) -> str | None:
    """Why the admission webhook refuses ``plan``'s sink schema (``sink_check``: the kopf side's question
    to the registry, answered with :func:`incompatibility`), or None."""
    schema = changed_sink_schema(plan, running) if query.sink.format == "avro" else None
    return sink_check(schema) if schema is not None and sink_check is not None else None
