"""The inventory of plan versions (pure): ``status.versions[]``, what each version created.

Version 1 is recorded when the query is first deployed; a replace adds version N+1 as ``Running``
and marks version N ``Retired`` (with the time). A retired version's checkpoint, consumer and
marker groups, transactional id and dead-letter topics are what a clean-up removes; the running
version's never.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.core.naming import QueryIdentity
    from sluice.core.plan.model import Plan

RUNNING = "Running"
RETIRED = "Retired"


def default_dead_letter_topic(sink_topic: str) -> str:
    """The dead-letter topic of a source whose malformed policy names none."""
    return f"{sink_topic}.dlq"


def dead_letter_topics(plan: Plan) -> list[str]:
    out: set[str] = set()
    for step in plan.steps:
        malformed = getattr(step, "malformed", None)
        if malformed is not None and malformed.policy == "deadLetter":
            out.add(malformed.topic or default_dead_letter_topic(plan.sink.topic))
    return sorted(out)


def version_record(identity: QueryIdentity, plan: Plan, plan_hash: str, config_map: str,
                   since: str) -> dict[str, Any]:
    return {
        "version": identity.plan_version,
        "planHash": plan_hash,
        "configMap": config_map,
        "checkpointPath": identity.checkpoint_path,
        "consumerGroup": identity.consumer_group,
        "transactionalId": identity.transactional_id,
        "outputTopic": plan.sink.topic,
        "deadLetterTopics": dead_letter_topics(plan),
        "state": RUNNING,
        "since": since,
    }


def with_running(versions: list[dict[str, Any]] | None, record: dict[str, Any],
                 now: str) -> list[dict[str, Any]]:
    """``versions`` with ``record`` running: another running version retires at ``now``; a record of
    the same version is replaced (idempotent), newest version first."""
    out: list[dict[str, Any]] = []
    for item in versions or []:
        if item.get("version") == record["version"]:
            continue
        if item.get("state") == RUNNING:
            item = {**item, "state": RETIRED, "retiredAt": now}
        out.append(item)
    return sorted([record, *out], key=lambda v: -int(v.get("version") or 0))


def with_plan(versions: list[dict[str, Any]] | None, version: int, plan_hash: str,
              config_map: str) -> list[dict[str, Any]] | None:
    """``versions`` with version ``version`` now on another plan (an in-place upgrade); None when
    nothing changes."""
    out, changed = [], False
    for item in versions or []:
        current = (item.get("planHash"), item.get("configMap"))
        if item.get("version") == version and current != (plan_hash, config_map):
            item = {**item, "planHash": plan_hash, "configMap": config_map}
            changed = True
        out.append(item)
    return out if changed else None
