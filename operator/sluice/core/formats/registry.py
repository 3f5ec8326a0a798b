"""What the operator decides from a schema registry's answers (pure): whether the query may use avro
at all (its QueryCluster names a registry), whether a sink's new schema may replace the subject's
latest version in place (the registry's compatibility answer, and its reason when it says no), and
the report of source subjects that gained versions since the running plan pinned them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from sluice.core.classify import UpgradeDecision, classify
from sluice.core.errors import Problem
from sluice.core.naming import QueryIdentity
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.records import StatusModel
from sluice.core.replace import backfill_output_topic
from sluice.core.spec import (
    REGISTRY_FORMATS,
    QuerySpec,
    UpgradePolicy,
    key_subject_of,
    topic_subject,
)

__all__ = [
    "NEW_KEY_SCHEMA",
    "NEW_PROTOBUF_KEY_SCHEMA",
    "NEW_PROTOBUF_SCHEMA",
    "NEW_VALUE_SCHEMA",
    "SinkCheck",
    "SinkQuestion",
    "SourceSchemaStatus",
    "admission_registry_check",
    "backfill_topic",
    "changed_sink_schema",
    "describe_behind",
    "incompatibility",
    "new_key_schema",
    "new_value_schema",
    "newly_behind",
    "refused_upgrade",
    "registry_problems",
    "sink_questions",
    "source_schema_report",
    "upgrade_sink_questions",
    "versioned_key_subject",
    "versioned_sink_schema",
    "versioned_subject",
]


def registry_problems(query: QuerySpec, cluster_name: str, has_registry: bool) -> list[Problem]:
    """An avro or protobuf source or sink needs the QueryCluster's ``spec.schemaRegistry``."""
    if has_registry:
        return []
    why = f"needs a schema registry: QueryCluster {cluster_name!r} has no spec.schemaRegistry"
    problems = [Problem(f"source '{s.name}' has format {s.format} and {why}",
                        field=f"spec.sources[{i}].format")
                for i, s in enumerate(query.sources) if s.format in REGISTRY_FORMATS]
    problems += [Problem(f"source '{s.name}' has keyFormat {s.key_format} and {why}",
                         field=f"spec.sources[{i}].keyFormat")
                 for i, s in enumerate(query.sources) if s.key_format in REGISTRY_FORMATS]
    if query.sink.format in REGISTRY_FORMATS:
        problems.append(Problem(f"the sink has format {query.sink.format} and {why}",
                                field="spec.sink.format"))
    if query.sink.key_format in REGISTRY_FORMATS:
        problems.append(Problem(f"the sink has keyFormat {query.sink.key_format} and {why}",
                                field="spec.sink.keyFormat"))
    return problems


#: what a refusal names: the sink's value schema, or its key schema (``keyFormat: avro``)
NEW_VALUE_SCHEMA, NEW_KEY_SCHEMA = "the sink's new Avro schema", "the sink's new Avro key schema"
NEW_PROTOBUF_SCHEMA = "the sink's new Protobuf schema"
NEW_PROTOBUF_KEY_SCHEMA = "the sink's new Protobuf key schema"


def new_value_schema(schema: RegistrySchema | None) -> str:
    """What a refusal of a sink's value schema names it: its type's words."""
    protobuf = schema is not None and schema.schema_type == "PROTOBUF"
    return NEW_PROTOBUF_SCHEMA if protobuf else NEW_VALUE_SCHEMA


def new_key_schema(schema: RegistrySchema | None) -> str:
    """What a refusal of a sink's key schema names it: its type's words."""
    protobuf = schema is not None and schema.schema_type == "PROTOBUF"
    return NEW_PROTOBUF_KEY_SCHEMA if protobuf else NEW_KEY_SCHEMA


#: the registry's refusal (None: accepted or not asked) of an avro sink schema, named as the second argument
SinkCheck = Callable[[RegistrySchema, str], "str | None"]


def incompatibility(subject: str, answer: Mapping[str, Any], what: str = NEW_VALUE_SCHEMA) -> str | None:
    """Why the registry refuses a schema under ``subject`` (None: compatible), from its answer to
    ``POST /compatibility/subjects/<subject>/versions/latest?verbose=true``: Confluent's registry gives
    ``messages`` (a list), Apicurio's ccompat API a ``reason``."""
    if answer.get("is_compatible", True) is not False:
        return None
    said = answer.get("messages") or answer.get("reason") or []
    reasons = [str(m) for m in said] if isinstance(said, list) else [str(said)]
    detail = "; ".join(r.strip() for r in reasons if str(r).strip()) or "no reason given"
    return (f"{what} is incompatible with subject {subject!r} under its compatibility "
            f"level, so it cannot be changed in place: {detail}")


def changed_sink_schema(plan: Plan, running: Plan | None, key: bool = False) -> RegistrySchema | None:
    """The avro sink schema of ``plan`` that the registry must accept under its subject: None when the
    sink writes json, or when the running plan writes the same schema to the same subject already.
    ``key``: the sink's avro key schema instead (``keyFormat: avro``)."""
    schema = plan.sink.key_schema if key else plan.sink.value_schema
    if schema is None or (running is not None and (running.sink.key_schema if key else
                                                   running.sink.value_schema) == schema):
        return None
    return schema


#: one question to the registry: an avro sink schema under its subject, and what a refusal names it
SinkQuestion = tuple[RegistrySchema, str]


def sink_questions(query: QuerySpec, plan: Plan, running: Plan | None, topic: str | None = None
                   ) -> list[SinkQuestion]:
    """The avro sink schemas of ``plan`` the registry is asked about, in the order asked: the value
    schema, then the key schema of an avro key, each under the subject it goes under when the version
    writes ``topic`` (:func:`backfill_topic`, :func:`versioned_sink_schema`; None: the plan's own
    subjects); each only when it changed from ``running``'s (:func:`changed_sink_schema`)."""
    out: list[SinkQuestion] = []
    for key, what, fmt in ((False, new_value_schema(plan.sink.value_schema), query.sink.format),
                           (True, new_key_schema(plan.sink.key_schema), query.sink.key_format)):
        schema = versioned_sink_schema(plan, topic, key=key)
        changed = changed_sink_schema(plan, running, key=key) is not None
        if fmt in REGISTRY_FORMATS and schema is not None and changed:
            out.append((schema, what))
    return out


def admission_registry_check(query: QuerySpec, plan: Plan, running: Plan | None,
                             sink_check: SinkCheck | None, topic: str | None = None) -> str | None:
    """Why the admission webhook refuses ``plan``'s sink schemas (``sink_check``: the kopf side's question
    to the registry, answered with :func:`incompatibility`), or None: the value schema, then the key
    schema of an avro key (:func:`sink_questions`). ``topic``: the topic of its own a version writes
    (:func:`backfill_topic`): value and key are asked under that topic's subjects, as the operator
    registers them."""
    if sink_check is None:
        return None
    for schema, what in sink_questions(query, plan, running, topic):
        refused = sink_check(schema, what)
        if refused is not None:
            return refused
    return None


def upgrade_sink_questions(query: QuerySpec, plan: Plan, running: Plan, policy: UpgradePolicy,
                           version: int | None = None) -> list[SinkQuestion]:
    """What the registry is asked about an upgrade from ``running`` to ``plan`` (``sluice diff``,
    ``kubectl sluice diff``), as the webhook asks it: :func:`sink_questions` with value and key under
    the subjects of the versioned topic a replace with backfill writes (:func:`backfill_topic`).

    ``version``: the new version's plan version. None when it is not known (``sluice diff``: manifests
    carry no status): a schema that goes under a versioned topic's subject (``<sink>-v<N>-value``,
    ``<sink>-v<N>-key``, N unknown) is then not asked about (the operator checks it there before it
    registers it); whether it goes there does not depend on N (every version after the first writes
    ``<sink>-v<N>``)."""
    identity = QueryIdentity(service_id="-", namespace="-", name="-", uid="", plan_version=version or 2)
    topic = backfill_topic(plan, running, policy, identity)
    questions = sink_questions(query, plan, running, topic)
    if topic is not None and version is None:
        moved = {versioned_subject(plan, topic), versioned_key_subject(plan, topic)}
        return [(schema, what) for schema, what in questions if schema.subject not in moved]
    return questions


def refused_upgrade(decision: UpgradeDecision, refused: str) -> UpgradeDecision:
    """``decision`` once the registry refuses the sink's new schema (``refused``, from
    :func:`incompatibility`): ``reject``, that reason first (the category stays the classifier's)."""
    return decision.model_copy(update={"decision": "reject", "reasons": [refused, *decision.reasons]})


def backfill_topic(plan: Plan, running: Plan | None, policy: UpgradePolicy, identity: QueryIdentity
                   ) -> str | None:
    """The versioned topic ``plan``'s version writes when the edit from ``running`` is carried out as a
    replace with backfill (``identity``: the new version's, for its name), as the operator decides it
    (``sluice.operator.schemas.version_topics``); None otherwise, or when the edit names a new sink topic
    (the version writes the plan's own topic). Its sink schemas go under that topic's subjects
    (:func:`versioned_sink_schema`)."""
    if running is None or not policy.allow_replace or policy.replace_strategy != "backfill":
        return None
    if classify(running, plan, policy).decision != "replace":
        return None
    versioned = identity.versioned_topic(plan.sink.topic)
    topic = backfill_output_topic(plan.sink.topic, running.sink.topic, versioned)
    return topic if topic != plan.sink.topic else None


class SourceSchemaStatus(StatusModel):
    """An avro source subject of the running plan: the version the plan pinned, and the subject's
    latest version when the operator last asked (a newer one is reported, never acted on: the next
    edit of the query pins it)."""

    subject: str = Field(description="The source's registry subject.")
    pinned_version: int | None = Field(default=None, description="The version the running plan pinned.")
    pinned_id: int | None = Field(default=None, description="Its schema id.")
    latest_version: int | None = Field(default=None, description="The subject's latest version.")
    latest_id: int | None = Field(default=None, description="Its schema id.")

    @property
    def behind(self) -> bool:
        """Whether the subject has a version the running plan does not read with."""
        return self.latest_id is not None and self.latest_id != self.pinned_id


def source_schema_report(pinned: Mapping[str, RegistrySchema],
                         latest: Mapping[str, RegistrySchema]) -> list[SourceSchemaStatus]:
    """The running plan's avro source subjects (``pinned``, by subject) against the subjects' latest
    versions (``latest``; a subject missing: not known now)."""
    out = []
    for subject, schema in sorted(pinned.items()):
        now = latest.get(subject)
        out.append(SourceSchemaStatus(subject=subject, pinned_version=schema.version, pinned_id=schema.id,
                                      latest_version=now.version if now else None,
                                      latest_id=now.id if now else None))
    return out


def newly_behind(before: list[SourceSchemaStatus], now: list[SourceSchemaStatus]) -> list[SourceSchemaStatus]:
    """The subjects whose latest version the report did not know yet (one event each)."""
    known = {(s.subject, s.latest_id) for s in before}
    return [s for s in now if s.behind and (s.subject, s.latest_id) not in known]


def describe_behind(report: SourceSchemaStatus) -> str:
    return (f"source subject {report.subject!r} has version {report.latest_version} (id {report.latest_id}); "
            f"the running plan reads with version {report.pinned_version} (id {report.pinned_id}) and keeps "
            "it until the query is edited")


def _moved_subject(schema: RegistrySchema | None, own: str, moved: str | None) -> str | None:
    """The subject a sink schema goes under on a topic of its own: ``moved`` (that topic's
    TopicNameStrategy subject) when the schema is under ``own`` (the plan topic's); None when there is
    no schema, no topic of its own, or the sink named its subject (kept as named)."""
    if schema is None or moved is None or schema.subject != own:
        return None
    return moved


def versioned_subject(plan: Plan, topic: str | None) -> str | None:
    """The subject a plan version's sink VALUE schema goes under when the version writes a topic of its
    own (a replace with backfill: ``<sink>-v<N>``): that topic's ``<topic>-value``, unless the sink names
    its ``subject`` (kept as named). None: the plan's own subject."""
    moved = topic_subject(topic) if topic and topic != plan.sink.topic else None
    return _moved_subject(plan.sink.value_schema, topic_subject(plan.sink.topic), moved)


def versioned_key_subject(plan: Plan, topic: str | None) -> str | None:
    """The subject a plan version's sink KEY schema (``keyFormat: avro``) goes under when the version
    writes a topic of its own: that topic's ``<topic>-key``, unless the sink names its ``keySubject``
    (kept as named). None: the plan's own key subject."""
    moved = key_subject_of(topic) if topic and topic != plan.sink.topic else None
    return _moved_subject(plan.sink.key_schema, key_subject_of(plan.sink.topic), moved)


def versioned_sink_schema(plan: Plan, topic: str | None, key: bool = False) -> RegistrySchema | None:
    """``plan``'s sink value schema (``key``: its avro key schema) under the subject it is checked and
    registered under when the version writes ``topic`` (:func:`versioned_subject`,
    :func:`versioned_key_subject`); None: the sink writes no such schema."""
    schema = plan.sink.key_schema if key else plan.sink.value_schema
    subject = versioned_key_subject(plan, topic) if key else versioned_subject(plan, topic)
    if schema is None or subject is None:
        return schema
    return schema.model_copy(update={"subject": subject})
