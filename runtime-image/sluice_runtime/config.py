"""The settings of ``sluice-runtime run`` (parsed by :mod:`sluice_runtime.cli`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.core.replace import PreviousVersion
from sluice.core.sizing import Container
from sluice.core.spec import parse_timestamp

from sluice_runtime.avro import AvroSettings
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
    #: the schema registry (``SLUICE_SCHEMA_REGISTRY_URL``, ``_USERNAME``, ``_PASSWORD``) and the id
    #: the operator registered an avro sink's schema under (``SLUICE_SINK_SCHEMA_ID``)
    avro: AvroSettings = field(default_factory=AvroSettings)
    #: who writes exactly-once output (``SLUICE_EOS_WRITERS``): ``driver``, one transactional
    #: producer in the driver (:mod:`sluice_runtime.sink_exactly_once`), or ``tasks``, a transaction
    #: per output partition written by the tasks (:mod:`sluice_runtime.eos_tasks`)
    eos_writers: str = "driver"
    #: what a standby does with executor pods (``SLUICE_STANDBY_EXECUTORS``, QueryCluster
    #: ``spec.standbyExecutors``): ``hold`` or ``release`` (:mod:`sluice_runtime.standby_executors`)
    standby_executors: str = "hold"


EOS_WRITERS = ("driver", "tasks")


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


#: the checkpoint file manager for object stores (``spark-hadoop-cloud``): an object appears only
#: when its stream closes, and a failed write is aborted instead of leaving half a file; no rename
OBJECT_STORE_CHECKPOINT_MANAGER = (
    "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager")
#: the credentials chain of S3A when no static keys are given: the AWS SDK's default chain
#: (environment, web identity / workload identity, profile, container and instance metadata)
DEFAULT_CREDENTIALS = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
#: with ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` set: those first, then the default chain
ENV_CREDENTIALS = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


class ObjectStoreConfigError(ValueError):
    """Object-store settings that cannot be used."""


def object_store_conf(checkpoint: str, env: Mapping[str, str] | None) -> dict[str, str]:
    """The Spark settings of a checkpoint in an object store, from the environment the operator
    sets (``SLUICE_S3_ENDPOINT``: absent = AWS; ``SLUICE_S3_PATH_STYLE``: ``true``/``false``,
    default false; ``SLUICE_S3_REGION``; ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``: absent =
    the default credentials chain). {} for a checkpoint on a volume.

    The keys themselves are never copied into Spark's settings: S3A reads them from the
    environment through the SDK's provider, so they do not appear in Spark's configuration dumps."""
    if not checkpoint.startswith("s3a://"):
        return {}
    env = env or {}
    out = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.sql.streaming.checkpointFileManagerClass": OBJECT_STORE_CHECKPOINT_MANAGER,
    }
    endpoint = (env.get("SLUICE_S3_ENDPOINT") or "").strip()
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not endpoint.startswith("http://")).lower()
    path_style = (env.get("SLUICE_S3_PATH_STYLE") or "false").strip().lower()
    if path_style not in ("true", "false"):
        raise ObjectStoreConfigError(f"SLUICE_S3_PATH_STYLE must be true or false, got {path_style!r}")
    out["spark.hadoop.fs.s3a.path.style.access"] = path_style
    region = (env.get("SLUICE_S3_REGION") or "").strip()
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    has_key, has_secret = bool(env.get("AWS_ACCESS_KEY_ID")), bool(env.get("AWS_SECRET_ACCESS_KEY"))
    if has_key != has_secret:
        raise ObjectStoreConfigError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together")
    out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
        f"{ENV_CREDENTIALS},{DEFAULT_CREDENTIALS}" if has_key else DEFAULT_CREDENTIALS)
    return out
