"""The inventory of plan versions (pure): ``status.versions[]``, what each version created.

Version 1 is recorded when the query is first deployed; a replace adds version N+1 as ``Running``
and marks version N ``Retired`` (with the time). A replace that was rolled back records version
N+1 as ``RolledBack``: nothing needs it, and the clean-up removes what it left at once. A retired
version's checkpoint, consumer and marker groups, transactional id and dead-letter topics are what a
clean-up removes; the running version's never.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.records import VersionRecord

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
                   since: str, output_topic: str | None = None, state: str = RUNNING) -> VersionRecord:
    """What version ``identity.plan_version`` created; ``output_topic``: the topic it writes when
    that is not its plan's sink topic (a backfill's versioned topic)."""
    return VersionRecord(
        version=identity.plan_version, plan_hash=plan_hash, config_map=config_map,
        checkpoint_path=identity.checkpoint_path, consumer_group=identity.consumer_group,
        transactional_id=identity.transactional_id, output_topic=output_topic or plan.sink.topic,
        dead_letter_topics=dead_letter_topics(plan, output_topic), state=state,  # type: ignore[arg-type]
        since=since)


def _newest_first(versions: list[VersionRecord]) -> list[VersionRecord]:
    return sorted(versions, key=lambda v: -v.version)


def with_running(versions: list[VersionRecord] | None, record: VersionRecord,
                 now: str) -> list[VersionRecord]:
    """``versions`` with ``record`` running: another running version retires at ``now``; a record of
    the same version is replaced (idempotent), newest version first."""
    out: list[VersionRecord] = []
    for item in versions or []:
        if item.version == record.version:
            continue
        if item.state == RUNNING:
            item = item.model_copy(update={"state": RETIRED, "retired_at": now})
        out.append(item)
    return _newest_first([record, *out])


def with_rolled_back(versions: list[VersionRecord] | None, record: VersionRecord,
                     now: str) -> list[VersionRecord]:
    """``versions`` with ``record`` (a replace's new version that was rolled back) as ``RolledBack``
    at ``now``; the running version stays running."""
    out = [v for v in versions or [] if v.version != record.version]
    return _newest_first([record.model_copy(update={"state": ROLLED_BACK, "retired_at": now}), *out])


def with_plan(versions: list[VersionRecord] | None, version: int, plan_hash: str,
              config_map: str) -> list[VersionRecord] | None:
    """``versions`` with version ``version`` now on another plan (an in-place upgrade); None when
    nothing changes."""
    out, changed = [], False
    for item in versions or []:
        if item.version == version and (item.plan_hash, item.config_map) != (plan_hash, config_map):
            item = item.model_copy(update={"plan_hash": plan_hash, "config_map": config_map})
            changed = True
        out.append(item)
    return out if changed else None
