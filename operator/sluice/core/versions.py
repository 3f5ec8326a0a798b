"""The inventory of plan versions (pure): ``status.versions[]``, what each version created.

Version 1 is recorded when the query is first deployed; a replace adds version N+1 as ``Running``
and marks version N ``Retired`` (with the time). A replace that was rolled back records version
N+1 as ``RolledBack``: nothing needs it, and the clean-up removes what it left at once. A retired
version's checkpoint, consumer and marker groups, transactional id and dead-letter topics are what a
clean-up removes; the running version's never.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.core.naming import QueryIdentity
    from sluice.core.plan.model import Plan

RUNNING = "Running"
RETIRED = "Retired"
ROLLED_BACK = "RolledBack"


def default_dead_letter_topic(sink_topic: str) -> str:
    """The dead-letter topic of a source whose malformed policy names none."""
    return f"{sink_topic}.dlq"


def dead_letter_topic(topic: str | None, sink_topic: str, output_topic: str | None = None) -> str:
    """A source's dead-letter topic (``topic`` as the plan names it) when its version writes
    ``output_topic`` instead of ``sink_topic``: the default one (``<sink>.dlq``, which the compiler
    pins in the plan) follows the output topic, so a backfill's dead letters do not mix with the
    version that serves beside it; a topic named otherwise stays."""
    default = default_dead_letter_topic(sink_topic)
    chosen = topic or default
    if output_topic and chosen == default:
        return default_dead_letter_topic(output_topic)
    return chosen


def dead_letter_topics(plan: Plan, output_topic: str | None = None) -> list[str]:
    """The plan's dead-letter topics when it writes ``output_topic`` (default: its sink topic)."""
    out: set[str] = set()
    for step in plan.steps:
        malformed = getattr(step, "malformed", None)
        if malformed is not None and malformed.policy == "deadLetter":
            out.add(dead_letter_topic(malformed.topic, plan.sink.topic, output_topic))
    return sorted(out)


def version_record(identity: QueryIdentity, plan: Plan, plan_hash: str, config_map: str,
                   since: str, output_topic: str | None = None, state: str = RUNNING) -> dict[str, Any]:
    """What version ``identity.plan_version`` created; ``output_topic``: the topic it writes when
    that is not its plan's sink topic (a backfill's versioned topic)."""
    return {
        "version": identity.plan_version,
        "planHash": plan_hash,
        "configMap": config_map,
        "checkpointPath": identity.checkpoint_path,
        "consumerGroup": identity.consumer_group,
        "transactionalId": identity.transactional_id,
        "outputTopic": output_topic or plan.sink.topic,
        "deadLetterTopics": dead_letter_topics(plan, output_topic),
        "state": state,
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


def with_rolled_back(versions: list[dict[str, Any]] | None, record: dict[str, Any],
                     now: str) -> list[dict[str, Any]]:
    """``versions`` with ``record`` (a replace's new version that was rolled back) as ``RolledBack``
    at ``now``; the running version stays running."""
    out = [v for v in versions or [] if v.get("version") != record["version"]]
    return sorted([{**record, "state": ROLLED_BACK, "retiredAt": now}, *out],
                  key=lambda v: -int(v.get("version") or 0))


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


def live_topic(pinned: dict[str, Any] | None, versions: list[dict[str, Any]] | None) -> str | None:
    """The topic holding the live result: the pinned version's own topic, else the running
    version's recorded output topic (None when neither says)."""
    if (pinned or {}).get("outputTopic"):
        return str((pinned or {})["outputTopic"])
    running = [v for v in versions or [] if v.get("state") == RUNNING and v.get("outputTopic")]
    return str(running[0]["outputTopic"]) if running else None

