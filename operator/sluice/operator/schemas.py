"""The schema registry in the reconcile (avro sources and sinks, issue 30).

* Before a plan of a NEW query is compiled, each avro source subject's latest version is fetched and
  passed to the compiler, which pins it (``latest_source_schemas``); a plan that stays pinned, and the
  plan of a query a plan ran before (a rollback), are compiled with the schemas that plan pinned
  (``sluice.core.compiler.registry.kept_source_schemas``, ``sluice.operator.desired``), never with a
  subject's later versions.
* Before the workload is converged, the avro sink schemas (value, and key for ``keyFormat: avro``) of
  the plan asked for, and of the plan that runs, are registered under their subjects (idempotent: the
  same schema keeps its id), and the ids go to the drivers (``SLUICE_SINK_SCHEMA_ID``,
  ``SLUICE_SINK_KEY_SCHEMA_ID``). A sink schema that changes is first checked against its subject: an
  incompatible one is refused with the registry's reason (``SchemaIncompatible``) before anything,
  value or key, is registered or rolled out.
* A registry that does not answer writes ``RegistryUnreachable`` and retries with back-off; nothing is
  half-applied (the workload is not touched in that reconcile).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sluice.core.compiler import source_subjects
from sluice.core.compiler.registry import plan_source_schemas
from sluice.core.formats.registry import (
    SourceSchemaStatus,
    describe_behind,
    incompatibility,
    new_key_schema,
    new_value_schema,
    newly_behind,
    registry_problems,
    source_schema_report,
    versioned_sink_schema,
)
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.rollout import BACKFILL
from sluice.core.spec import REGISTRY_FORMATS, QuerySpec
from sluice.core.status import EventReason, Reason
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders.context import QueryContext
from sluice.operator.env import QueryRun, Retry, Stop, _problem, backoff
from sluice.operator.executor import replace_output_topic
from sluice.operator.registry import Registry, RegistryRefused, RegistryUnavailable

__all__ = ["SinkSchemaIds", "check_registry", "latest_source_schemas", "report_source_schemas",
           "sink_schema_ids", "uses_registry", "version_topics"]


def uses_registry(plan: Plan) -> bool:
    """Whether a plan reads or writes avro or protobuf (its drivers need the registry or a sink
    schema id)."""
    return any({getattr(step, "format", "json"), getattr(step, "key_format", None)} & REGISTRY_FORMATS
               for step in plan.steps)


def check_registry(run: QueryRun, spec: StreamingQuerySpec, cluster: QueryClusterSpec,
                   cluster_name: str) -> None:
    """An avro source or sink without a registry in the QueryCluster: InvalidSpec until either changes."""
    problems = registry_problems(spec.query(), cluster_name, cluster.schema_registry is not None)
    if problems:
        message = "; ".join(f"{p.field}: {p.message}" for p in problems)
        _problem(run, spec, Reason.INVALID_SPEC, message, {"cluster": cluster_name}, EventReason.INVALID_SPEC)
        raise Stop(message)


def _client(run: QueryRun, spec: StreamingQuerySpec, cluster: QueryClusterSpec, cluster_name: str,
            retry: int) -> Registry:
    settings = cluster.schema_registry
    assert settings is not None  # check_registry ran
    try:
        return run.env.registry(run.ns, settings)
    except RegistryUnavailable as exc:
        raise _unreachable(run, spec, cluster_name, settings.url, exc, retry) from exc


def _unreachable(run: QueryRun, spec: StreamingQuerySpec, cluster_name: str, url: str,
                 exc: Exception, retry: int) -> Retry:
    message = f"the schema registry at {url} is unreachable: {exc}"
    _problem(run, spec, Reason.REGISTRY_UNREACHABLE, message, {"cluster": cluster_name},
             EventReason.REGISTRY_UNREACHABLE)
    return Retry(message, backoff(retry))


def latest_source_schemas(run: QueryRun, spec: StreamingQuerySpec, query: QuerySpec,
                          cluster: QueryClusterSpec, cluster_name: str,
                          retry: int) -> dict[str, RegistrySchema]:
    """The latest version of each avro source subject of ``query`` (by subject)."""
    subjects = source_subjects(query)
    if not subjects:
        return {}
    registry = _client(run, spec, cluster, cluster_name, retry)
    out: dict[str, RegistrySchema] = {}
    for subject in subjects:
        try:
            out[subject] = registry.latest(subject)
        except RegistryUnavailable as exc:
            raise _unreachable(run, spec, cluster_name, registry.url, exc, retry) from exc
        except RegistryRefused as exc:
            message = (f"an avro source's subject {subject!r} has no schema the query can read in the schema "
                       f"registry at {registry.url} ({exc}); the query waits for it")
            _problem(run, spec, Reason.INVALID_SPEC, message, {"cluster": cluster_name},
                     EventReason.INVALID_SPEC)
            raise Retry(message, backoff(retry)) from exc
    return out


@dataclasses.dataclass(frozen=True)
class SinkSchemaIds:
    """The ids of the avro sink schemas of each plan (by hash) that uses avro, under their subjects:
    ``value`` (None: the sink's value is json) and ``key`` (None: its key is not avro)."""

    value: dict[str, int | None] = dataclasses.field(default_factory=dict)
    key: dict[str, int | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Wanted:
    """One sink schema of one plan, to be registered (``check``: after the registry accepts it)."""

    key: bool
    plan_hash: str
    schema: RegistrySchema | None
    check: bool

    @property
    def what(self) -> str:
        return new_key_schema(self.schema) if self.key else new_value_schema(self.schema)


def _wanted(avro_plans: Mapping[str, Plan], running: str | None, topics: Mapping[str, str] | None,
            key: bool) -> list[_Wanted]:
    """The value (or key) sink schema of each plan, the running plan's first, each under its subject (a
    plan whose version writes a topic of its own, ``topics``: under that topic's subject, value and
    key alike); one that differs from the running plan's is to be checked for compatibility."""
    def schema_of(plan_hash: str, plan: Plan) -> RegistrySchema | None:
        return versioned_sink_schema(plan, (topics or {}).get(plan_hash), key=key)

    current = avro_plans.get(running or "")
    current_schema = schema_of(running or "", current) if current is not None else None
    out: list[_Wanted] = []
    for plan_hash, plan in sorted(avro_plans.items(), key=lambda item: item[0] != running):
        schema = schema_of(plan_hash, plan)
        check = schema is not None and plan_hash != running and schema != current_schema
        out.append(_Wanted(key, plan_hash, schema, check))
    return out


def sink_schema_ids(run: QueryRun, spec: StreamingQuerySpec, cluster: QueryClusterSpec, cluster_name: str,
                    plans: Mapping[str, Plan], running: str | None, retry: int,
                    topics: Mapping[str, str] | None = None) -> SinkSchemaIds:
    """For each plan (by hash) that uses avro: the ids its avro sink schemas (value, and key for
    ``keyFormat: avro``, under ``<topic>-key`` or ``keySubject``) have under their subjects.
    ``running``: the hash of the plan that runs (its schemas are registered as they are; another plan's
    schema that differs from it is checked for compatibility first). ``topics``: the topic of its own a
    plan's version writes (``version_topics``): its value and key go under that topic's subjects
    (``<topic>-value``, ``<topic>-key``) unless the sink names them. Every changed schema, value and
    key, is checked before any is registered: a refusal leaves the registry as it was."""
    avro_plans = {h: p for h, p in plans.items() if uses_registry(p)}
    if not avro_plans:
        return SinkSchemaIds()
    if cluster.schema_registry is None:  # a plan pinned before the registry was removed: say so
        check_registry(run, spec, cluster, cluster_name)
        return SinkSchemaIds({h: None for h in avro_plans}, {h: None for h in avro_plans})
    wanted = _wanted(avro_plans, running, topics, False) + _wanted(avro_plans, running, topics, True)
    if all(w.schema is None for w in wanted):  # avro sources only
        return SinkSchemaIds({h: None for h in avro_plans}, {h: None for h in avro_plans})
    registry = _client(run, spec, cluster, cluster_name, retry)
    ids = SinkSchemaIds()
    try:
        for w in wanted:
            if w.check and w.schema is not None:
                _refuse_incompatible(run, spec, cluster_name, registry, w.schema, w.what)
        for w in wanted:
            try:
                schema = w.schema
                found = (registry.register(schema.subject, schema.schema_, schema.schema_type)
                         if schema is not None else None)
            except RegistryRefused as exc:
                message = f"the schema registry refused {w.what.replace(' new', '')}: {exc}"
                _problem(run, spec, Reason.SCHEMA_INCOMPATIBLE, message, {"cluster": cluster_name},
                         EventReason.SCHEMA_INCOMPATIBLE)
                raise Stop(message) from exc
            (ids.key if w.key else ids.value)[w.plan_hash] = found
    except RegistryUnavailable as exc:
        raise _unreachable(run, spec, cluster_name, registry.url, exc, retry) from exc
    return ids


def _refuse_incompatible(run: QueryRun, spec: StreamingQuerySpec, cluster_name: str, registry: Registry,
                         schema: RegistrySchema, what: str) -> None:
    """A changed sink schema the subject's compatibility level refuses: SchemaIncompatible, nothing
    registered, until the spec changes."""
    answer = registry.compatibility(schema.subject, schema.schema_, schema.schema_type)
    refused = incompatibility(schema.subject, answer, what) if answer is not None else None
    if refused is not None:
        _problem(run, spec, Reason.SCHEMA_INCOMPATIBLE, refused, {"cluster": cluster_name},
                 EventReason.SCHEMA_INCOMPATIBLE)
        raise Stop(refused)


def report_source_schemas(run: QueryRun, cluster: QueryClusterSpec,
                          plan: Plan | None) -> list[SourceSchemaStatus]:
    """``status.sourceSchemas`` of the running ``plan`` (best effort: a registry that does not answer
    leaves the last report as it was); an event for each subject newly found ahead of the plan."""
    pinned = plan_source_schemas(plan) if plan is not None else {}
    before = [SourceSchemaStatus.model_validate(s) for s in run.status.get("sourceSchemas") or []]
    if not pinned or cluster.schema_registry is None:
        return []
    latest: dict[str, RegistrySchema] = {}
    try:
        registry = run.env.registry(run.ns, cluster.schema_registry)
        for subject in pinned:
            latest[subject] = registry.latest(subject)
    except (RegistryUnavailable, RegistryRefused):
        return before
    now = source_schema_report(pinned, latest)
    for report in newly_behind(before, now):
        run.event("Normal", EventReason.SOURCE_SCHEMA_UPDATED, describe_behind(report))
    return now


def version_topics(run: QueryRun, spec: StreamingQuerySpec, cluster: QueryClusterSpec, ctx: QueryContext,
                   plans: Mapping[str, Plan]) -> dict[str, str]:
    """The topic of its own of each plan whose version writes one: the running version's (a backfill
    moved it), the one a rollout in flight writes, or the one a replace with backfill of the plan asked
    for will write (predicted as the executor decides it: the classifier says replace and the policy
    backfill), so that its sink schemas, value and key, are checked and registered under that topic's
    subjects (``sluice.core.formats.registry.versioned_sink_schema``), not refused against the old
    topic's."""
    pinned, rollout = run.records.plan, run.records.rollout
    running = plans.get(pinned.hash) if pinned is not None else None
    policy = spec.upgrade or cluster.upgrade
    out: dict[str, str] = {}
    for plan_hash, plan in plans.items():
        topic: str | None = None
        if pinned is not None and plan_hash == pinned.hash:
            topic = pinned.output_topic
        elif rollout is not None and rollout.target_hash == plan_hash:
            topic = rollout.output_topic
        elif running is not None and policy.allow_replace and policy.replace_strategy == BACKFILL:
            if run.env.classify(running, plan, policy).decision == "replace":
                topic = replace_output_topic(ctx, running, plan, BACKFILL)
        if topic and topic != plan.sink.topic:
            out[plan_hash] = topic
    return out
