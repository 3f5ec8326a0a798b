"""Admission of StreamingQuery and QueryCluster objects (pure): what the validating webhook answers.

The webhook refuses early what the reconcile would refuse later, with the same words:

* a spec the CRD's pydantic model refuses (``spec.<field>: <message>``);
* SQL that does not compile (``spec.sql: line L, column C: <message>``, as in
  ``status.lastCompileError``);
* on UPDATE of a query with a pinned plan, an edit the classifier calls ``reject`` (unsupported, or a
  replace while ``allowReplace`` is false), with the classifier's reasons. The edit is classified
  exactly as the operator classifies it (``sluice.core.classify.classify(running plan, new plan,
  spec.upgrade or the cluster's defaults)``), against the plan the workload runs.

Allowed edits that are not trivial (an in-place data-selection or schema-evolution change, any
replace) get warnings, which ``kubectl apply`` (also ``--dry-run=server``) prints: what the operator
will do, then the classifier's reasons. Metadata-only and status-only updates, and spec edits that
leave the plan as it was, are allowed without a word (the operator's own finalizer and annotation
writes go through here too).

No I/O: the kopf side (``sluice.operator.handlers.admission``) reads the QueryCluster and the running
plan's ConfigMap (:func:`running_config_map` names it) and passes them in. The CRD spec models live
in ``sluice.crd``, a layer above this one, so they are passed in too (:class:`SpecModels`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from sluice.core.classify import classify
from sluice.core.compiler import CompileTarget, compile_query, source_subjects
from sluice.core.engine import query_digest
from sluice.core.errors import CompileError
from sluice.core.formats.registry import (
    SinkCheck,
    admission_registry_check,
    backfill_topic,
    registry_problems,
)
from sluice.core.manifest import validation_problems
from sluice.core.naming import QueryIdentity
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.records import QueryRecords
from sluice.core.replace import backfill_output_topic, state_reset_note
from sluice.core.rollout import BACKFILL, REVERTIBLE, Step
from sluice.core.spec import REGISTRY_FORMATS, QuerySpec, UpgradePolicy
from sluice.core.storage_review import (
    checkpoint_store,
    executor_claim_problem,
    int_or,
    standby_warning,
    storage_mode,
    storage_review,
)

#: the QueryCluster a query without ``spec.clusterRef`` uses
DEFAULT_CLUSTER = "default"
#: the API server may cut longer warnings (Kubernetes documents 256 characters): cut them here
WARNING_MAX = 256
#: reasons listed as warnings after the summary (the rest: ``status.lastUpgrade.reasons``, ``sluice diff``)
MAX_REASONS = 4
#: categories whose in-place upgrade is worth a warning (``transparent`` changes nothing the user sees)
NOTABLE_IN_PLACE = frozenset({"data-selection", "schema-evolution"})

CREATE = "CREATE"
UPDATE = "UPDATE"


@dataclass(frozen=True)
class Verdict:
    """The answer to one admission request."""

    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    #: HTTP code of a refusal: 422 for an invalid spec, 403 for an upgrade the policy refuses
    code: int = 200


def allow(*warnings: str) -> Verdict:
    return Verdict(True, warnings=[_cut(w) for w in warnings])


def deny(message: str, code: int = 422) -> Verdict:
    return Verdict(False, message=message, code=code)


@dataclass(frozen=True)
class SpecModels:
    """The CRD spec models: ``sluice.crd.streamingquery.StreamingQuerySpec`` (a :class:`QuerySpec`
    with the CRD's other fields) and ``sluice.crd.querycluster.QueryClusterSpec``."""

    query: type[QuerySpec]
    cluster: type[BaseModel]


@dataclass(frozen=True)
class RunningPlan:
    """The plan the query's workload runs, as the kopf side found it."""

    config_map: str
    #: its ``plan.json``; None when the ConfigMap (or the key) is missing
    text: str | None


def _cut(text: str) -> str:
    return text if len(text) <= WARNING_MAX else text[: WARNING_MAX - 1] + "…"


def spec_changed(operation: str, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """Whether the request sets a spec (a CREATE, or an UPDATE whose spec differs)."""
    return operation == CREATE or old is None or (old.get("spec") or {}) != (new.get("spec") or {})


def cluster_name(obj: Mapping[str, Any]) -> str:
    """The QueryCluster a StreamingQuery refers to."""
    ref = (obj.get("spec") or {}).get("clusterRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return str(name) if name else DEFAULT_CLUSTER


@dataclass(frozen=True)
class Basis:
    """The plan an edit is classified against, and the plan version it runs as."""

    hash: str
    config_map: str
    version: int
    #: the topic that version writes when it is not its plan's sink topic (a backfill moved it)
    output_topic: str | None
    #: an upgrade in flight to this plan: the operator classifies the edit once it ended, against
    #: the plan that runs then (this one if it succeeds)
    provisional: bool = False


def basis(obj: Mapping[str, Any]) -> Basis | None:
    """The plan the operator classifies an edit of ``obj`` against (None without a pinned plan): the
    pinned plan; the target of a rollout that failed and stayed there (``rollback: Never``); while
    an upgrade is in flight (Backfilling, Applying, Verifying), its target, provisionally."""
    records = QueryRecords.of(obj.get("status"))
    pinned, rollout = records.plan, records.rollout
    if pinned is None:
        return None
    if rollout is not None and (rollout.step == Step.FAILED or rollout.step in REVERTIBLE):
        return Basis(hash=rollout.target_hash, config_map=rollout.target_config_map or pinned.config_map,
                     version=rollout.target_plan_version, output_topic=rollout.output_topic or None,
                     provisional=rollout.step != Step.FAILED)
    return Basis(hash=pinned.hash, config_map=pinned.config_map, version=pinned.version,
                 output_topic=pinned.output_topic or None)


def running_config_map(obj: Mapping[str, Any]) -> str | None:
    """The ConfigMap the kopf side reads for :func:`review_query` (None: nothing to read)."""
    found = basis(obj)
    return found.config_map if found is not None else None


# -- StreamingQuery --------------------------------------------------------------------------------


def validation_message(exc: ValidationError) -> str:
    """``spec.<field>: <message>`` for each problem (the reconcile's InvalidSpec message)."""
    return "; ".join(f"{p.field}: {p.message}" for p in validation_problems(exc, "spec"))


def compile_message(exc: CompileError) -> str:
    """``spec.sql: line L, column C: <message>`` for each problem (the reconcile's CompileFailed
    message and ``status.lastCompileError.message``)."""
    return "; ".join(p.render() if p.line is None else f"{p.field or 'spec.sql'}: {p.render()}"
                     for p in exc.problems)


def _query(models: SpecModels, spec: Any) -> tuple[QuerySpec, UpgradePolicy | None]:
    """The query part and ``spec.upgrade`` of a valid spec (raises ValidationError otherwise)."""
    full = models.query.model_validate(spec if isinstance(spec, Mapping) else {})
    query = QuerySpec.model_validate(full.model_dump(by_alias=True, include=set(QuerySpec.model_fields)))
    upgrade = getattr(full, "upgrade", None)
    return query, upgrade if isinstance(upgrade, UpgradePolicy) else None


def same_inputs(models: SpecModels, old: Mapping[str, Any] | None, query: QuerySpec) -> bool:
    """Whether the edit leaves what the plan is compiled from as it was: the pinned plan stays,
    whatever this operator's compiler makes of the spec (``sluice.core.engine.plan_inputs``)."""
    if old is None:
        return False
    try:
        before, _ = _query(models, old.get("spec"))
    except ValidationError:
        return False
    return query_digest(before) == query_digest(query)


def compile_target(status: Mapping[str, Any],
                   schemas: Mapping[str, RegistrySchema] | None = None) -> CompileTarget:
    """What an edit is compiled for: the Spark and settings of the engine the query runs on, and the
    latest schema of each avro source subject."""
    engine = status.get("engine") or {}
    if not engine.get("sparkVersion"):
        return CompileTarget(schemas=dict(schemas or {}))
    return CompileTarget(spark_version=str(engine["sparkVersion"]),
                         spark_conf={str(k): str(v) for k, v in (engine.get("sparkConf") or {}).items()},
                         schemas=dict(schemas or {}))


def review_query(operation: str, new: Mapping[str, Any], old: Mapping[str, Any] | None,
                 cluster_upgrade: Mapping[str, Any] | UpgradePolicy | None, *, models: SpecModels,
                 running_plan: RunningPlan | None = None, unavailable: str | None = None,
                 cluster: Mapping[str, Any] | None = None,
                 schemas: Mapping[str, RegistrySchema] | None = None,
                 sink_check: SinkCheck | None = None) -> Verdict:
    """Admit a CREATE or UPDATE of a StreamingQuery.

    ``cluster_upgrade``: the QueryCluster's ``spec.upgrade`` (``{}`` when it has none), None when the
    cluster was not found (the defaults apply). ``running_plan``: the plan the workload runs
    (needed on an UPDATE of a query with a pinned plan, see :func:`running_config_map`).
    ``unavailable``: why the kopf side could not read what it needed (the edit is then not
    classified, and the warning says so). ``cluster``: the QueryCluster's spec, for the query's layout
    on its checkpoint storage (executors on a one-node claim are refused, standbys there warned of).
    ``schemas``: the latest schema of each avro source subject (None: the registry was not asked, so
    a query with avro sources is not compiled here); ``sink_check``: the registry's refusal of an avro
    sink's new schema, value or key (``sluice.core.formats.registry``).
    """
    if not spec_changed(operation, new, old):
        return allow()
    try:
        query, own_policy = _query(models, new.get("spec"))
    except ValidationError as exc:
        return deny(validation_message(exc))
    status = (old or new).get("status") or {}
    if cluster is not None and (problems := registry_problems(query, cluster_name(new),
                                                              bool(cluster.get("schemaRegistry")))):
        return deny("; ".join(f"{p.field}: {p.message}" for p in problems))
    if schemas is None and source_subjects(query):
        return allow(f"not compiled here: the operator compiles the query with its avro sources' schemas "
                     f"from the schema registry, not read here ({unavailable or 'no registry'})")
    try:
        plan = compile_query(query, compile_target(status, schemas))
    except CompileError as exc:
        return deny(compile_message(exc))
    new_hash = plan.hash or plan.compute_hash()
    avro_sink = bool({query.sink.format, query.sink.key_format} & REGISTRY_FORMATS) and \
        running_plan is not None and running_plan.text
    running = Plan.from_json(running_plan.text) if avro_sink and running_plan and running_plan.text else None
    base = basis({"status": status}) if running is not None else None
    policy = own_policy or _cluster_policy(cluster_upgrade)
    topic = (backfill_topic(plan, running, policy, _version_identity(new.get("metadata") or {},
                                                                     base.version + 1)) if base else None)
    refused_sink = admission_registry_check(query, plan, running, sink_check, topic)
    if refused_sink is not None:
        return deny(refused_sink)

    new_spec = new.get("spec")
    refused, warnings = storage_review(new_spec if isinstance(new_spec, Mapping) else {}, cluster, status,
                                       cluster_name(new))
    if refused is not None:
        return deny(refused)
    meta = new.get("metadata") or {}
    if cluster_upgrade is None and unavailable is None:
        warnings.append(f"QueryCluster {cluster_name(new)!r} not found in namespace "
                        f"{meta.get('namespace')!r}: the query waits for it (ClusterNotFound)")
    if operation != UPDATE or not status.get("plan") or same_inputs(models, old, query):
        return allow(*warnings)  # nothing runs yet, or this edit leaves the plan as it was
    return _upgrade(plan, new_hash, status, meta, policy, running_plan, unavailable, warnings)


def _cluster_policy(cluster_upgrade: Mapping[str, Any] | UpgradePolicy | None) -> UpgradePolicy:
    if isinstance(cluster_upgrade, UpgradePolicy):
        return cluster_upgrade
    try:
        return UpgradePolicy.model_validate(dict(cluster_upgrade or {}))
    except ValidationError:
        return UpgradePolicy()  # the operator reports the invalid cluster itself (ClusterInvalid)


def _upgrade(plan: Plan, new_hash: str, status: Mapping[str, Any], meta: Mapping[str, Any],
             policy: UpgradePolicy, running_plan: RunningPlan | None, unavailable: str | None,
             warnings: list[str]) -> Verdict:
    records = QueryRecords.of(status)
    pinned, rollout = records.plan, records.rollout
    step = rollout.step if rollout is not None else None
    base = basis({"status": status})
    assert base is not None and pinned is not None
    if rollout is not None and step in REVERTIBLE and new_hash == pinned.hash != rollout.target_hash:
        return allow(*warnings, f"the spec is back at the running plan {new_hash[:12]}: the upgrade in "
                     f"flight ({step}, to plan {base.hash[:12]}) is rolled back (Cancelled)")
    if new_hash == base.hash:
        return allow(*warnings)
    if unavailable is not None or running_plan is None:
        return allow(*warnings, f"the upgrade was not classified here ({unavailable or 'no running plan'}); "
                     f"the operator classifies it (status.lastUpgrade)")
    if running_plan.text is None and not base.provisional:  # the operator refuses it the same way
        return deny(f"unsupported change refused: the running plan's ConfigMap {running_plan.config_map} is "
                    f"missing, so the edit cannot be classified; revert the spec to plan {base.hash[:12]}",
                    code=403)
    try:
        old = Plan.from_json(running_plan.text or "")
    except ValueError as exc:
        return allow(*warnings, f"the upgrade was not classified here (the plan in ConfigMap "
                     f"{running_plan.config_map} does not load: {str(exc).splitlines()[0]}); the operator "
                     f"classifies it (status.lastUpgrade)")
    result = classify(old, plan, policy)
    category, decision = str(result.category), str(result.decision)
    reasons = [str(r) for r in result.reasons]
    if base.provisional:  # decided once the upgrade in flight ended, maybe against another plan
        warnings.append(f"an upgrade is in flight ({step}, to plan {base.hash[:12]}): the operator finishes "
                        f"it first, then classifies this edit against the plan that runs; if the upgrade "
                        f"succeeds, this edit is:")
        if decision == "reject":
            return allow(*warnings, f"{category} change: refused, the query stays on plan {base.hash[:12]}",
                         *_reasons(reasons))
    if decision == "reject":
        return deny(f"{category} change refused: " + " ".join(reasons), code=403)
    if decision == "replace":  # what the new checkpoint costs, before the reasons (which may be cut)
        summary = [_replace_summary(category, plan, old, base, meta, policy), state_reset_note(plan)]
    elif decision == "in-place" and category in NOTABLE_IN_PLACE:
        summary = [f"{category} change: in-place upgrade, same checkpoint"]
    else:  # none / transparent: nothing the user would notice
        return allow(*warnings)
    return allow(*warnings, *summary, *_reasons(reasons))


def _reasons(reasons: list[str]) -> list[str]:
    """The first reasons, and where to read them whole when some are cut or left out."""
    shown = reasons[:MAX_REASONS]
    if len(reasons) > len(shown) or any(len(r) > WARNING_MAX for r in shown):
        shown.append("every reason in full: status.lastUpgrade.reasons once applied, or sluice diff OLD.yaml "
                     "NEW.yaml")
    return shown


def _version_identity(meta: Mapping[str, Any], version: int) -> QueryIdentity:
    """The identity of plan version ``version`` of the query, for its versioned topic (which derives
    from the topic and the plan version alone)."""
    return QueryIdentity(service_id="-", namespace=str(meta.get("namespace") or "-"),
                         name=str(meta.get("name") or "-"), uid="", plan_version=version)


def _replace_summary(category: str, new: Plan, old: Plan, base: Basis, meta: Mapping[str, Any],
                     policy: UpgradePolicy) -> str:
    """What a replace does: the strategy and the topic the new version writes (the operator's rule,
    ``sluice.operator.executor.replace_output_topic``)."""
    version = base.version + 1
    running_topic = base.output_topic or old.sink.topic
    if policy.replace_strategy == BACKFILL:
        identity = _version_identity(meta, version)
        topic = backfill_output_topic(new.sink.topic, old.sink.topic,
                                      identity.versioned_topic(new.sink.topic))
        return (f"{category} change: replace with backfill, output moves to topic {topic} "
                f"(plan version {version})")
    topic = running_topic if new.sink.topic == old.sink.topic else new.sink.topic
    where = f"output stays on topic {topic}" if topic == running_topic else f"output moves to topic {topic}"
    return f"{category} change: replace with hand-off, {where} (plan version {version}, new checkpoint)"


# -- storage and availability ----------------------------------------------------------------------

# -- QueryCluster ----------------------------------------------------------------------------------


def review_cluster(operation: str, new: Mapping[str, Any], old: Mapping[str, Any] | None, *,
                   models: SpecModels) -> Verdict:
    """Admit a CREATE or UPDATE of a QueryCluster: its spec must be valid (field named)."""
    if not spec_changed(operation, new, old):
        return allow()
    spec = new.get("spec")
    try:
        models.cluster.model_validate(spec if isinstance(spec, Mapping) else {})
    except ValidationError as exc:
        return deny(validation_message(exc))
    spec = spec if isinstance(spec, Mapping) else {}
    mode = storage_mode(spec.get("storage"))
    problem = executor_claim_problem("spec.executors", int_or(spec.get("executors"), 0), mode)
    if problem is not None:
        return deny(problem)
    warning = standby_warning(mode, int_or(spec.get("standbyReplicas"), 0))
    warnings = [warning] if warning else []
    before = (old or {}).get("spec") or {}
    if operation == UPDATE and checkpoint_store(before) != checkpoint_store(spec):
        warnings.append(f"spec.storage: checkpoints move from {checkpoint_store(before)} to "
                        f"{checkpoint_store(spec)} for queries created from now on; a running query keeps "
                        f"its checkpoint where it is and refuses this cluster's engine upgrade "
                        f"(UpgradeRejected)")
    changed = engine_fields_changed(before, spec) if operation == UPDATE else []
    if not changed:
        return allow(*warnings)
    at_once = (spec.get("upgrade") or {}).get("maxConcurrentRollouts") or 1
    return allow(*warnings,
                 f"this change ({', '.join(changed)}) reaches the queries of this cluster: each is upgraded "
                 f"behind its health gate and rolled back on failure, at most {at_once} at a time; a "
                 f"failure halts the rest (see the QueryCluster's status.rollout)")




#: the QueryCluster fields that reach its queries' pods or plans (``sluice.crd.engine.Engine``)
ENGINE_FIELDS = ("image", "imagePullPolicy", "sparkVersion", "sparkConf", "driver", "executor", "executors",
                 "drainSeconds", "kafka.bootstrapServers", "kafka.tls", "kafka.sasl", "kafka.clientSettings",
                 "podTemplate",
                 "lease.durationSeconds", "storage.objectStore", "standbyExecutors")


def engine_fields_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The engine fields an edit of a QueryCluster spec changes (as written)."""
    def get(spec: Mapping[str, Any], path: str) -> Any:
        value: Any = spec
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    return [f for f in ENGINE_FIELDS if get(old, f) != get(new, f)]


# -- the ValidatingWebhookConfiguration ------------------------------------------------------------

#: (webhook name, plural, kopf handler id): one webhook per resource
WEBHOOKS = (("streamingqueries.sluice.dev", "streamingqueries", "validate-streamingquery"),
            ("queryclusters.sluice.dev", "queryclusters", "validate-querycluster"))
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
#: namespaces never sent to the webhook when it watches the whole cluster
EXCLUDED_NAMESPACES = ("kube-system",)


def webhook_configuration(name: str, client_config: Mapping[str, Any], *, failure_policy: str,
                          timeout_seconds: int, namespaces: list[str] | None = None,
                          group: str = "sluice.dev", version: str = "v1alpha1") -> dict[str, Any]:
    """The ValidatingWebhookConfiguration the operator keeps: CREATE and UPDATE of the two kinds (not
    their status subresource), in the namespaces it watches (all but kube-system when cluster-wide).

    ``client_config``: ``{"url": ...}`` or ``{"service": {...}}`` plus ``caBundle``; each webhook's
    path gets the kopf handler id (kopf routes ``/<id>`` to that handler)."""
    if failure_policy not in ("Fail", "Ignore"):
        raise ValueError(f"failurePolicy must be Fail or Ignore, got {failure_policy!r}")
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"timeoutSeconds must be 1..30 (the API server's limit), got {timeout_seconds}")
    if namespaces:
        selector = {"matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "In",
                                          "values": sorted(namespaces)}]}
    else:
        selector = {"matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "NotIn",
                                          "values": list(EXCLUDED_NAMESPACES)}]}
    webhooks = []
    for webhook, plural, handler_id in WEBHOOKS:
        config = {k: v for k, v in client_config.items() if k != "url" and k != "service"}
        if client_config.get("service"):
            service = dict(client_config["service"])
            service["path"] = f"{str(service.get('path') or '').rstrip('/')}/{handler_id}"
            config["service"] = service
        else:
            config["url"] = f"{str(client_config['url']).rstrip('/')}/{handler_id}"
        webhooks.append({
            "name": webhook,
            "clientConfig": config,
            "rules": [{"apiGroups": [group], "apiVersions": [version], "resources": [plural],
                       "operations": [CREATE, UPDATE], "scope": "Namespaced"}],
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "namespaceSelector": selector,
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": ["v1"],
        })
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "sluice-operator"}},
            "webhooks": webhooks}
