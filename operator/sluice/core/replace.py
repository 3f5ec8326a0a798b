"""Replace upgrades with hand-off (pure): what the new plan version needs to know about the one
before it, where it starts reading, and what a new checkpoint costs the query.

A replace runs the new plan as version N+1: a new checkpoint, consumer group and transactional
id (:class:`sluice.core.naming.QueryIdentity`). With ``replaceStrategy: handOff`` the old version
drains, hands the Lease over, and the new one starts its sources at exactly the offsets the old
version's output covers:

* the operator passes the previous version's ids to the new drivers
  (:data:`PREVIOUS_VERSION_ENV`, a :class:`PreviousVersion` as JSON);
* the first holder of the new version (its checkpoint holds no batch yet) fences the previous
  version's transactional id, reads the batch its output ends with (:func:`last_output_batch`),
  and the source offsets recorded for that batch in the previous checkpoint's offsets log
  (:func:`parse_offsets_log`), then starts every source there (:func:`starting_offsets`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.core.plan.steptypes import reset_notes
from sluice.core.records import PREVIOUS_VERSION_ENV, PreviousVersion, PreviousVersionError

__all__ = ["PREVIOUS_VERSION_ENV", "PreviousVersion", "PreviousVersionError"]

if TYPE_CHECKING:
    from sluice.core.plan.model import Plan

#: the topic a version writes when it is not its plan's sink topic (a backfill's versioned topic)
OUTPUT_TOPIC_ENV = "SLUICE_OUTPUT_TOPIC"
#: where a backfill's fresh checkpoint starts reading: ``earliest`` or an RFC 3339 time
START_FROM_ENV = "SLUICE_START_FROM"



def previous_version(*, version: int, plan: Plan, plan_hash: str, checkpoint: str, consumer_group: str,
                     transactional_id: str, output_topic: str | None = None) -> PreviousVersion:
    """The running version as a replace's predecessor; ``output_topic``: the topic it writes when
    that is not its plan's sink topic (a version a backfill started on a versioned topic)."""
    return PreviousVersion(version=version, plan_hash=plan_hash, checkpoint=checkpoint,
                           consumer_group=consumer_group, transactional_id=transactional_id,
                           sink_topic=output_topic or plan.sink.topic,
                           exactly_once=plan.sink.delivery == "exactlyOnce")


Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset


def parse_offsets_log(text: str) -> list[Offsets | None]:
    """One Spark offsets log file (``offsets/<batch>``): the end offsets of that batch, one entry
    per source (None for a source that is not a Kafka one). Raises ValueError naming the line."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError("offsets log: line 1: expected a version such as 'v1'")
    out: list[Offsets | None] = []
    for number, line in enumerate(lines[2:], start=3):
        if not line.strip() or line.strip() == "-":
            out.append(None)
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"offsets log: line {number}: not JSON ({exc})") from None
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            out.append(None)  # another kind of source
            continue
        out.append({str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in data.items()})
    return out


def merged_offsets(sources: list[Offsets | None]) -> Offsets:
    """Offsets per topic over every source (a topic read by two sources: the lower offset of each
    partition, so nothing is skipped)."""
    out: Offsets = {}
    for source in sources:
        for topic, parts in (source or {}).items():
            have = out.setdefault(topic, {})
            for partition, offset in parts.items():
                have[partition] = min(offset, have.get(partition, offset))
    return out


def starting_offsets(topics: list[str], committed: Offsets) -> tuple[dict[str, str], list[str]]:
    """Spark ``startingOffsets`` JSON for each of ``topics`` the previous version read, and the
    topics it did not read (they start as the plan says)."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for topic in topics:
        parts = committed.get(topic)
        if not parts:
            missing.append(topic)
            continue
        offsets = {str(p): o for p, o in sorted(parts.items())}
        found[topic] = json.dumps({topic: offsets}, separators=(",", ":"))
    return found, missing


def last_output_batch(*, exactly_once: bool, marker: int | None, last_commit: int | None) -> int | None:
    """The last batch of the previous version whose output is in the sink topic.

    Exactly-once: the commit marker (offset = batch + 1, committed in the same transaction as the
    output) once the previous version's transactional id is fenced; a checkpoint commit is written
    only after its transaction committed, so the later of the two. At-least-once: the checkpoint's
    last commit (a batch written but not committed may be written again: at least once)."""
    from_marker = marker - 1 if exactly_once and marker is not None and marker > 0 else None
    candidates = [b for b in (from_marker, last_commit) if b is not None]
    return max(candidates) if candidates else None


def state_reset_note(plan: Plan) -> str:
    """What starting on an empty checkpoint means for this query's results."""
    notes = reset_notes({s.type for s in plan.steps})
    if not notes:
        return "the query keeps no state: nothing is lost by the new checkpoint"
    return "state starts empty: " + "; ".join(notes)


def backfill_output_topic(new_sink: str, old_sink: str, versioned: str) -> str:
    """The topic a backfill writes: the one the user named, if the edit changed the sink topic;
    else ``versioned`` (``<sink>-v<N+1>``, see :meth:`sluice.core.naming.QueryIdentity.versioned_topic`)."""
    return new_sink if new_sink != old_sink else versioned

