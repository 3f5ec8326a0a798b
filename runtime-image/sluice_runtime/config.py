"""The settings of ``sluice-runtime run`` (parsed by :mod:`sluice_runtime.cli`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sluice.core.replace import PreviousVersion
from sluice.core.sizing import Container
from sluice.core.spec import parse_timestamp

from sluice_runtime.kafka_security import KafkaSecurity


@dataclass
class RunConfig:
    plan: str
    checkpoint: str
    bootstrap: str
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    available_now: bool = False
    http_addr: str | None = "0.0.0.0:8080"
    query_id: str | None = None
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: ids the operator assigned (``status.identity``); None: derived from the query id
    consumer_group: str | None = None
    transactional_id: str | None = None
    resolve_connector: bool = False
    #: election (None: run at once on the checkpoint, no standby)
    lease_name: str | None = None
    lease_namespace: str | None = None
    pod_name: str | None = None
    lease_seconds: float = 10.0
    #: a replaced plan version's first term starts where this previous version's output ends
    previous: PreviousVersion | None = None
    #: the topic the plan's sink writes instead of its own (a backfill's versioned topic); the plan
    #: and its hash stay as pinned
    output_topic: str | None = None
    #: where the sources start on a checkpoint without offsets: ``earliest`` or an RFC 3339 time
    #: (:func:`start_from_options`); None: as the plan says
    start_from: str | None = None
    #: the executor pod template (a JSON object) handed to Spark's Kubernetes scheduler, written to
    #: a file at start (:func:`sluice_runtime.cli.executor_template_conf`); None: Spark's default pod
    executor_pod_template: str | None = None
    #: the digest of the engine the operator deployed this driver with (``SLUICE_ENGINE``; "" when
    #: none): echoed in the Lease records, so that an engine upgrade's gate tells its drivers apart
    engine: str = ""
    #: the driver container's memory (``SLUICE_MEMORY_LIMIT``, else ``SLUICE_MEMORY_REQUEST``), which
    #: the driver's heap is derived from (``sluice.core.sizing``); None: Spark's defaults
    memory: Container | None = None


EARLIEST = "earliest"


class StartFromError(ValueError):
    """A start position that is neither ``earliest`` nor an RFC 3339 time."""


def start_from_millis(text: str) -> int | None:
    """Milliseconds since the epoch of an RFC 3339 time (``2026-11-20T10:00:00Z``, with a zone,
    optional fraction); None for ``earliest``; :class:`StartFromError` for anything else."""
    value = text.strip()
    if value == EARLIEST:
        return None
    try:
        moment = parse_timestamp(value)  # the parser spec.upgrade.backfillFrom is validated with
    except ValueError as exc:
        raise StartFromError(f"neither {EARLIEST!r} nor a time: {exc}") from None
    return int((moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1))


def start_from_options(text: str) -> dict[str, str]:
    """The Kafka source options that start a fresh checkpoint at ``text`` (see
    :func:`start_from_millis`): ``earliest``, or the first record at or after the time in every
    partition (``startingTimestamp``); a partition without one starts at its end (strategy
    ``latest``) instead of failing the query."""
    millis = start_from_millis(text)
    if millis is None:
        return {"startingOffsets": EARLIEST}
    return {"startingTimestamp": str(millis), "startingOffsetsByTimestampStrategy": "latest"}
