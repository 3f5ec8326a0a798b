"""Clean-up of retired plan versions: carries out what :mod:`sluice.core.cleanup` decides.

Called by the rollout executor when no rollout is in flight. Every step is idempotent and the
version's entry leaves ``status.versions`` last, so an operator killed at any point does the rest
when it reconciles again; every removal is an event.
"""

from __future__ import annotations

import datetime as dt
import logging

from sluice.core import cleanup as plan_mod
from sluice.core.cleanup import CLEANUP_REQUEST, CleanupRequest
from sluice.core.election import lease_name
from sluice.core.gate import parse_time
from sluice.core.records import VersionRecord
from sluice.core.spec import CleanupPolicy
from sluice.core.status import EventReason, now_rfc3339
from sluice.core.versions import RETIRED, ROLLED_BACK
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator.builders.context import QueryContext
from sluice.operator.env import QueryRun
from sluice.operator.kafka_admin import KafkaUnavailable

log = logging.getLogger("sluice.operator")


def policy_of(ctx: QueryContext) -> CleanupPolicy:
    return ctx.spec.cleanup or ctx.cluster.cleanup


def clean_up(run: QueryRun, ctx: QueryContext, cluster: QueryClusterSpec) -> None:
    """Clean up what the due retired versions left; record when the next one falls due."""
    versions = run.records.versions
    if not any(v.state in (RETIRED, ROLLED_BACK) for v in versions):
        if run.status.get("cleanup"):
            run.write({"cleanup": None})
        return
    policy = policy_of(ctx)
    now = parse_time(run.env.clock()) or dt.datetime.now(dt.UTC)
    decided = plan_mod.plan_cleanup(versions, policy, now)
    next_due = now_rfc3339(decided.next_due) if decided.next_due else None
    if not decided.due:
        if (run.status.get("cleanup") or {}).get("nextDue") != next_due:
            run.write({"cleanup": {"nextDue": next_due} if next_due else None})
        return
    waiting = _remove_checkpoints(run, ctx, decided.due)
    if waiting:
        run.write({"cleanup": {"nextDue": run.env.clock(), "message": waiting}})
        return
    try:
        admin = run.env.topic_admin(run.ns, cluster)
        existing = admin.groups()
        for item in decided.due:
            groups = admin.delete_groups(plan_mod.groups_to_delete(item, existing, decided.kept))
            if groups:
                run.event("Normal", EventReason.GROUPS_DELETED,
                          f"plan version {item.version}: deleted consumer groups {', '.join(groups)}")
            for topic in plan_mod.topics_to_delete(item, decided.kept, policy):
                if admin.delete_topic(topic):
                    run.event("Normal", EventReason.TOPIC_DELETED,
                              f"plan version {item.version}: deleted topic {topic!r}")
    except KafkaUnavailable as exc:
        run.write({"cleanup": {"nextDue": run.env.clock(), "message": f"Kafka: {exc}"}})
        return
    _delete_config_maps(run, ctx, decided.kept)
    gone = {v.version for v in decided.due}
    run.write({"versions": [v for v in versions if v.version not in gone],
               "cleanup": {"nextDue": next_due} if next_due else None})
    for item in decided.due:
        how = "rolled back" if item.state == ROLLED_BACK else "retired"
        run.event("Normal", EventReason.VERSION_CLEANED_UP,
                  f"plan version {item.version} cleaned up ({how} {item.retired_at}); "
                  f"its transactional id {item.transactional_id} expires on the brokers by itself")


def _remove_checkpoints(run: QueryRun, ctx: QueryContext, due: list[VersionRecord]) -> str | None:
    """Ask the active driver to remove the due versions' checkpoints; a message while it has not."""
    paths = [v.checkpoint_path for v in due if v.checkpoint_path]
    if not paths:
        return None
    request = CleanupRequest.for_paths(paths)
    name = lease_name(ctx.names.base)
    lease = run.env.kube.get("Lease", run.ns, name)
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    if annotations.get(plan_mod.CLEANUP_DONE) == request.id:
        if (run.status.get("cleanup") or {}).get("checkpointsRemoved") != request.id:
            run.write({"cleanup": {**(run.status.get("cleanup") or {}), "checkpointsRemoved": request.id}})
            run.event("Normal", EventReason.CHECKPOINT_REMOVED,
                      f"the active driver removed {', '.join(request.paths)}")
        return None
    if (run.status.get("cleanup") or {}).get("checkpointsRemoved") == request.id:
        return None  # done before (the Lease was re-created since)
    if lease is None:
        return "waiting for the driver Lease"
    if annotations.get(CLEANUP_REQUEST) != request.to_json():
        run.env.kube.patch("Lease", run.ns, name,
                           {"metadata": {"annotations": {CLEANUP_REQUEST: request.to_json()}}})
    if ctx.spec.suspend:
        return f"suspended: {', '.join(request.paths)} will be removed by the next active driver"
    return f"waiting for the active driver to remove {', '.join(request.paths)}"


def _delete_config_maps(run: QueryRun, ctx: QueryContext, kept: list[VersionRecord]) -> None:
    records = run.records
    needed = {v.config_map for v in kept if v.config_map}
    if records.plan is not None:
        needed.add(records.plan.config_map)
    if records.rollout is not None and records.rollout.target_config_map:
        needed.add(records.rollout.target_config_map)
    existing = [str(cm["metadata"]["name"]) for cm in
                run.env.kube.list("ConfigMap", run.ns, f"sluice.dev/query={ctx.names.base}")
                if str(cm["metadata"]["name"]).startswith(f"{ctx.names.base}-plan-")]
    for name in plan_mod.config_maps_to_delete(existing, needed):
        if run.env.kube.delete("ConfigMap", run.ns, name):
            run.event("Normal", EventReason.PLAN_CONFIG_MAP_DELETED, f"deleted plan ConfigMap {name}")


def discard_pending(run: QueryRun) -> bool:
    """Whether a rolled-back version's leftovers are still to be removed (a new rollout of the same
    version number must start on an empty checkpoint)."""
    return any(v.state == ROLLED_BACK for v in run.records.versions)
