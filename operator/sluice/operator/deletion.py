"""StreamingQuery deletion (the finalizer): drain the drivers, then apply the deletion policy."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from sluice.core import cleanup
from sluice.core.naming import QueryIdentity, QueryNames
from sluice.core.records import VersionRecord
from sluice.core.spec import CleanupPolicy
from sluice.core.status import EventReason, Facts
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import PurgeStatus, StreamingQuerySpec
from sluice.operator.builders import QueryContext
from sluice.operator.builders.purge import PURGE_DEADLINE_SECONDS, purge_pod, purge_pod_name, purge_prefix
from sluice.operator.desired import engine_of, with_pinned_service
from sluice.operator.env import DEFAULT_CLUSTER, Env, QueryRun, Retry, backoff
from sluice.operator.kafka_admin import KafkaUnavailable, TopicAdmin
from sluice.operator.kube import KubeError
from sluice.operator.lease import driver_selector

log = logging.getLogger("sluice.operator")

KAFKA_DELETE_RETRIES = 3
#: purge pods started for one deletion before the objects are left in place (with a Warning)
PURGE_ATTEMPTS = 3


def delete_query(env: Env, body: dict[str, Any], retry: int, runtime_seconds: float) -> None:
    """Finalizer: drain the driver, then apply the deletion policy; never hang."""
    run = QueryRun(env, body, dict(body.get("status") or {}))
    ns, name = run.ns, run.name
    spec_raw = body.get("spec") or {}
    policy = spec_raw.get("deletionPolicy", "Retain")
    try:
        spec: StreamingQuerySpec | None = StreamingQuerySpec.model_validate(spec_raw)
    except ValidationError:
        spec = None

    names = QueryNames.for_query(name)
    if run.status.get("phase") != "Deleting":
        try:
            run.write({}, Facts(generation=run.generation, deleting=True,
                                plan_pinned=run.records.plan is not None))
        except KubeError as exc:
            log.warning("cannot mark %s/%s as deleting: %s", ns, name, exc)

    cluster: QueryClusterSpec | None = None
    cluster_name = run.status.get("cluster") or (
        spec.cluster_ref.name if spec and spec.cluster_ref else DEFAULT_CLUSTER
    )
    cluster_obj = env.kube.get("QueryCluster", ns, cluster_name)
    if cluster_obj is not None:
        try:
            cluster = QueryClusterSpec.model_validate(cluster_obj.get("spec") or {})
        except ValidationError:
            cluster = None
    drain_budget = (cluster.drain_seconds if cluster else 120) + 30

    # 1. drain: scale to zero; the pod's termination grace lets the runtime finish and commit
    deployment = env.kube.get("Deployment", ns, names.driver)
    if deployment is not None and deployment["spec"].get("replicas", 0) != 0:
        env.kube.patch("Deployment", ns, names.driver, {"spec": {"replicas": 0}})
        run.event("Normal", EventReason.DRAINING, "draining the drivers before deletion")
    # a backfill in flight (a replace's new version beside the drivers) stops too
    if env.kube.get("Deployment", ns, names.backfill) is not None:
        env.kube.delete("Deployment", ns, names.backfill)
    pods = env.kube.list("Pod", ns, driver_selector(names.base))
    pods += env.kube.list("Pod", ns, driver_selector(names.base, "backfill"))
    if pods:
        if runtime_seconds < drain_budget:
            raise Retry(f"waiting for {len(pods)} driver pod(s) to drain", 5)
        run.event("Warning", EventReason.DRAIN_TIMED_OUT,
                  f"driver did not stop within {drain_budget}s; deleting anyway")

    # 2. deletion policy
    if policy == "Delete":
        if spec is not None and cluster is not None and cluster.storage.object_store is not None:
            _purge_object_store(run, _context(run, spec, cluster))
        if spec is not None and cluster is not None:
            try:
                admin = env.topic_admin(ns, cluster)
                if admin.delete_topic(spec.sink.topic):
                    run.event("Normal", EventReason.TOPIC_DELETED, f"deleted topic {spec.sink.topic!r}")
                _delete_inventory(run, admin)
            except (KafkaUnavailable, Retry) as exc:
                if retry < KAFKA_DELETE_RETRIES:
                    raise Retry(f"cannot delete the output topic yet: {exc}", backoff(retry, 2)) from exc
                run.event("Warning", EventReason.TOPIC_CLEANUP_FAILED,
                          f"gave up deleting topic {spec.sink.topic!r} after {retry} retries: {exc}")
        else:
            run.event("Warning", EventReason.TOPIC_CLEANUP_FAILED,
                      f"QueryCluster {cluster_name!r} or the spec is unavailable; output topic left in place")
        if env.kube.delete("PersistentVolumeClaim", ns, names.state_claim):
            run.event("Normal", EventReason.STATE_DELETED, f"deleted state volume claim {names.state_claim}")
    else:
        claim = env.kube.get("PersistentVolumeClaim", ns, names.state_claim)
        if claim is not None:
            if claim["metadata"].get("ownerReferences"):
                env.kube.patch("PersistentVolumeClaim", ns, names.state_claim,
                               {"metadata": {"ownerReferences": []}})
            run.event("Normal", EventReason.STATE_RETAINED,
                      f"kept state volume claim {names.state_claim} and the output topic")
    env.metrics.forget(ns, name)


def _delete_inventory(run: QueryRun, admin: TopicAdmin) -> None:
    """``deletionPolicy: Delete``: what every plan version recorded in ``status.versions`` created
    on the brokers (dead-letter and output topics, consumer and exactly-once marker groups)."""
    versions = list(run.records.versions)
    rollout = run.records.rollout
    service_id = (run.status.get("identity") or {}).get("serviceId")
    if rollout is not None and rollout.output_topic:  # a replace in flight
        target = QueryIdentity(service_id=str(service_id or "?"), namespace=run.ns, name=run.name,
                               uid=str(run.body["metadata"].get("uid") or ""),
                               plan_version=rollout.target_plan_version)
        versions.append(VersionRecord(
            version=target.plan_version, plan_hash=rollout.target_hash,
            config_map=rollout.target_config_map or "", checkpoint_path=target.checkpoint_path,
            consumer_group=target.consumer_group if service_id else "",
            transactional_id=target.transactional_id, output_topic=rollout.output_topic, state="Running",
            since=rollout.started))
    if not versions:
        return
    everything = CleanupPolicy(delete_topics="AfterRetention")
    existing = admin.groups()
    for item in versions:
        for topic in cleanup.topics_to_delete(item, [], everything):
            if admin.delete_topic(topic):
                run.event("Normal", EventReason.TOPIC_DELETED, f"deleted topic {topic!r}")
        groups = admin.delete_groups(cleanup.groups_to_delete(item, existing, []))
        if groups:
            run.event("Normal", EventReason.GROUPS_DELETED,
                      f"plan version {item.version}: deleted consumer groups {', '.join(groups)}")


def _context(run: QueryRun, spec: StreamingQuerySpec, cluster: QueryClusterSpec) -> QueryContext:
    """The query as its drivers ran: the serviceId pinned at creation, the engine they ran on."""
    ctx = QueryContext(namespace=run.ns, name=run.name, uid=str(run.body["metadata"].get("uid") or ""),
                       spec=spec, cluster=with_pinned_service(run, cluster))
    engine = engine_of(run.records.engine)
    return ctx.on_engine(engine) if engine is not None else ctx


def _purge_object_store(run: QueryRun, ctx: QueryContext) -> None:
    """``deletionPolicy: Delete`` with checkpoints in an object store: the purge pod deletes every
    plan version's objects (:mod:`sluice.operator.builders.purge`). Raises Retry while it runs; a
    failed pod is started again up to :data:`PURGE_ATTEMPTS` times, then the objects stay and a
    Warning names the prefix (the deletion goes on: a finalizer that never ends would keep the
    namespace from being deleted). ``status.purge`` records where it stands."""
    kube, ns, name = run.env.kube, run.ns, purge_pod_name(ctx)
    raw = run.status.get("purge")
    record = PurgeStatus.from_storage(raw) or PurgeStatus(prefix=purge_prefix(ctx))
    if record.state != "Running":
        return
    prefix = record.prefix
    pod = kube.get("Pod", ns, name)
    if pod is None:
        record = record.model_copy(update={"attempts": record.attempts + 1})
        run.write({"purge": record})
        kube.create(purge_pod(ctx))
        run.event("Normal", EventReason.STATE_DELETING,
                  f"deleting the checkpoints under {prefix} (pod {name}, attempt {record.attempts})")
        raise Retry(f"waiting for pod {name} to delete the objects under {prefix}", 5)
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        raise Retry(f"waiting for pod {name} to delete the objects under {prefix}", 5)
    said = _termination_message(pod)
    kube.delete("Pod", ns, name)
    if phase == "Succeeded":
        run.write({"purge": record.model_copy(update={"state": "Done"})})
        run.event("Normal", EventReason.STATE_DELETED, f"deleted the checkpoints under {prefix}: {said}")
        return
    if record.attempts < PURGE_ATTEMPTS:
        raise Retry(f"pod {name} failed to delete the objects under {prefix}: {said}", 10 * record.attempts)
    run.write({"purge": record.model_copy(update={"state": "GaveUp"})})
    run.event("Warning", EventReason.STATE_CLEANUP_FAILED,
              f"gave up deleting the checkpoints under {prefix} after {record.attempts} attempts "
              f"(deadline {PURGE_DEADLINE_SECONDS}s each); the objects stay: {said}")


def _termination_message(pod: dict[str, Any]) -> str:
    """What the purge container said (its JSON summary, or why it ended)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        message = str(terminated.get("message") or "").strip()
        if message:
            return message[-900:]
        if terminated.get("reason"):
            return f"{terminated['reason']} (exit {terminated.get('exitCode')})"
    return str((pod.get("status") or {}).get("reason") or "no termination message")
