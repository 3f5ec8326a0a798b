"""Clean-up of retired plan versions (pure): which versions are due, what each left behind, and
the request that asks the active driver to remove their checkpoint directories.

``status.versions`` (:mod:`sluice.core.versions`) lists what every version created. Under
``spec.cleanup`` (:class:`sluice.core.spec.CleanupPolicy`) the newest ``retainVersions`` retired
versions are kept for rollback; an older retired one is **due** once ``retention`` has passed
since it retired. For a due version the operator removes, in this order, each step idempotent:

1. its checkpoint directory, through the active driver (the state volume is mounted in the driver
   pods only): the operator writes :data:`CLEANUP_REQUEST` on the query's Lease, the holder removes
   the paths (only siblings of its own checkpoint: other versions of the same query, never its
   own) and answers with :data:`CLEANUP_DONE`;
2. its consumer group and the groups under it (the exactly-once commit markers);
3. with ``deleteTopics: AfterRetention``, its output and dead-letter topics that no kept version
   uses;
4. plan ConfigMaps that neither the pinned plan, a rollout in flight nor a kept version needs;
5. its entry in ``status.versions`` (the last write: an operator killed before it does it again).

A ``RolledBack`` version (a replace's new version whose gate failed) is due at once and never
kept: its checkpoint, groups, and the output and dead-letter topics no kept version uses go,
whatever ``deleteTopics`` says (they hold only what a rolled-back version wrote).

Transactional ids cannot be deleted through Kafka's admin API: the broker forgets an idle one after
``transactional.id.expiration.ms`` (7 days by default).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import posixpath
from dataclasses import dataclass

from sluice.core.gate import parse_time
from sluice.core.records import VersionRecord
from sluice.core.spec import CleanupPolicy
from sluice.core.versions import RETIRED, ROLLED_BACK, RUNNING

CLEANUP_REQUEST = "sluice.dev/cleanup-request"
CLEANUP_DONE = "sluice.dev/cleanup-done"


@dataclass(frozen=True)
class CleanupPlan:
    """What the clean-up does now."""

    due: list[VersionRecord]  # versions to clean up now, oldest first
    kept: list[VersionRecord]  # the running version and the retained retired ones
    next_due: dt.datetime | None  # when the next retired version becomes due (None: never)


def plan_cleanup(versions: list[VersionRecord] | None, policy: CleanupPolicy,
                 now: dt.datetime) -> CleanupPlan:
    """Which versions are due at ``now``, which are kept, and when the next one falls due."""
    items = sorted(versions or [], key=lambda v: -v.version)
    running = [v for v in items if v.state == RUNNING]
    retired = [v for v in items if v.state == RETIRED]
    kept = running + retired[:policy.retain_versions]
    due = [v for v in items if v.state == ROLLED_BACK]
    next_due: dt.datetime | None = None
    for item in retired[policy.retain_versions:]:
        since = parse_time(item.retired_at) or now
        when = since + dt.timedelta(seconds=policy.retention_seconds)
        if when <= now:
            due.append(item)
        elif next_due is None or when < next_due:
            next_due = when
    due.sort(key=lambda v: v.version)
    return CleanupPlan(due=due, kept=kept, next_due=next_due)


def topics_to_delete(due: VersionRecord, kept: list[VersionRecord], policy: CleanupPolicy) -> list[str]:
    """A due version's output and dead-letter topics no kept version uses (with ``AfterRetention``)."""
    if policy.delete_topics != "AfterRetention" and due.state != ROLLED_BACK:
        return []
    used = {t for v in kept for t in [v.output_topic, *v.dead_letter_topics] if t}
    mine = [due.output_topic, *due.dead_letter_topics]
    return sorted({t for t in mine if t and t not in used})


def groups_to_delete(due: VersionRecord, existing: list[str], kept: list[VersionRecord]) -> list[str]:
    """Of the broker's ``existing`` groups, the due version's consumer group and those under it
    (``<group>.…``: its exactly-once markers), never a kept version's."""
    group = due.consumer_group
    if not group:
        return []
    kept_groups = {v.consumer_group for v in kept if v.consumer_group}
    out = []
    for name in existing:
        if name != group and not name.startswith(group + "."):
            continue
        if any(name == k or name.startswith(k + ".") for k in kept_groups):
            continue
        out.append(name)
    return sorted(out)


def config_maps_to_delete(existing: list[str], needed: set[str]) -> list[str]:
    return sorted(name for name in existing if name not in needed)


@dataclass(frozen=True)
class CleanupRequest:
    """The operator's request to the active driver: remove these checkpoint directories."""

    id: str
    paths: tuple[str, ...]

    @classmethod
    def for_paths(cls, paths: list[str]) -> CleanupRequest:
        ordered = tuple(sorted(set(paths)))
        return cls(id=hashlib.sha256("\n".join(ordered).encode()).hexdigest()[:16], paths=ordered)

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "paths": list(self.paths)}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> CleanupRequest | None:
        try:
            data = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(data, dict) or not data.get("id") or not isinstance(data.get("paths"), list):
            return None
        return cls(id=str(data["id"]), paths=tuple(str(p) for p in data["paths"]))


def pending_cleanup(annotations: dict[str, str]) -> CleanupRequest | None:
    """The request on the Lease that the drivers have not carried out yet."""
    request = CleanupRequest.from_json(annotations.get(CLEANUP_REQUEST))
    if request is None or annotations.get(CLEANUP_DONE) == request.id:
        return None
    return request


def refusal(path: str, own_checkpoint: str) -> str | None:
    """Why a driver must not remove ``path`` (None: it may): only another version's checkpoint of
    the same query, a sibling of the driver's own checkpoint base."""
    parts = path.split("/")
    if not path.startswith("/") or ".." in parts or "." in parts:
        return f"{path}: not an absolute path without '..'"
    target, own = posixpath.normpath(path), posixpath.normpath(own_checkpoint)
    if target == own or own.startswith(target + "/") or target.startswith(own + "/"):
        return f"{path}: the driver's own checkpoint {own_checkpoint}"
    if posixpath.dirname(target) != posixpath.dirname(own):
        return f"{path}: not a checkpoint of this query (not beside {own_checkpoint})"
    return None
