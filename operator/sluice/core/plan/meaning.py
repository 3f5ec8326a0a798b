"""Spark settings that change what a query computes or how its state is laid out (pure).

A plan records the value of each of these settings it was compiled with (``settings.conf``), so
that neither a new Spark (whose default changed) nor a ``sparkConf`` edit changes a running query
behind its back: the runtime applies the plan's values over anything else, and a change of one is
a change of the plan, classified like a SQL edit.

Two kinds:

* **checkpoint** settings are written by Spark into every ``offsets/N`` file of a checkpoint
  (``OffsetSeqMetadata``) and restored from it on restart, silently ignoring the session's value
  (read off a Spark 4.3.0 checkpoint, see docs/upgrades.md "Pinned settings"). They decide the
  layout of the state: a change needs a new checkpoint (``topology``).
* **result** settings are not in the checkpoint: Spark would apply a new value at once. They
  change results (time zone, ANSI casts and overflow, time parsing, decimal precision, empty
  batches that close windows): ``data-selection`` for a stateless query (old rules before the
  upgrade, new after), ``topology`` for a stateful one (its state was built under the old rules).

Defaults are those of the Spark line the plan targets (:data:`DEFAULTS`, checked against the
installed PySpark by ``tests/integration/test_platform_spark.py``), except the session time zone,
which Sluice pins to UTC rather than inheriting the container's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sluice.core.sparkversion import parse

Kind = Literal["checkpoint", "result"]


@dataclass(frozen=True)
class Meaning:
    key: str
    kind: Kind
    what: str


#: the settings ``PinnedSettings`` has typed fields for (the plan format's first four)
TYPED: dict[str, str] = {
    "spark.sql.shuffle.partitions": "shuffle_partitions",
    "spark.sql.streaming.stateStore.providerClass": "state_store_provider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "changelog_checkpointing",
    "spark.sql.streaming.stateStore.encodingFormat": "state_format",
}

#: settings the plan pins in ``settings.conf``, besides the typed ones
MEANINGS: tuple[Meaning, ...] = (
    Meaning("spark.sql.session.timeZone", "result", "the session time zone (timestamps without a zone, "
            "date functions)"),
    Meaning("spark.sql.ansi.enabled", "result", "ANSI mode (invalid casts and overflows fail instead of "
            "giving null)"),
    Meaning("spark.sql.legacy.timeParserPolicy", "result", "how timestamps and dates are parsed"),
    Meaning("spark.sql.decimalOperations.allowPrecisionLoss", "result", "the precision of decimal "
            "arithmetic"),
    Meaning("spark.sql.streaming.noDataMicroBatches.enabled", "result", "whether batches without new data "
            "run (they close windows and emit results)"),
    Meaning("spark.sql.streaming.multipleWatermarkPolicy", "checkpoint", "the global watermark of a query "
            "with several watermarks"),
    Meaning("spark.sql.streaming.aggregation.stateFormatVersion", "checkpoint", "the state format of "
            "aggregations"),
    Meaning("spark.sql.streaming.join.stateFormatVersion", "checkpoint", "the state format of stream-stream "
            "joins"),
    Meaning("spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion", "checkpoint",
            "the state format of flatMapGroupsWithState"),
    Meaning("spark.sql.streaming.stateStore.rocksdb.formatVersion", "checkpoint", "RocksDB's file format"),
    Meaning("spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion", "checkpoint",
            "RocksDB's merge operator"),
    Meaning("spark.sql.streaming.stateStore.compression.codec", "checkpoint", "the state files' compression"),
    Meaning("spark.sql.streaming.stateStore.rowChecksum.enabled", "checkpoint", "checksums of state rows"),
    Meaning("spark.sql.streaming.statefulOperator.useStrictDistribution", "checkpoint",
            "how state is partitioned"),
    Meaning("spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled", "checkpoint",
            "the nullability of stateful operators' output"),
    Meaning("spark.sql.dropDuplicates.deterministicKeyOrder.enabled", "checkpoint",
            "the key order of deduplication state"),
)
BY_KEY: dict[str, Meaning] = {m.key: m for m in MEANINGS}

#: Values pinned when the QueryCluster's sparkConf does not set them, by Spark major.minor: the
#: defaults of that Spark (read off PySpark 4.3.0), except the time zone (Spark's default is the
#: JVM's, which a new image may change; Sluice pins UTC).
DEFAULTS: dict[str, dict[str, str]] = {
    "4.3": {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.ansi.enabled": "true",
        "spark.sql.legacy.timeParserPolicy": "CORRECTED",
        "spark.sql.decimalOperations.allowPrecisionLoss": "true",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
        "spark.sql.streaming.aggregation.stateFormatVersion": "2",
        "spark.sql.streaming.join.stateFormatVersion": "2",
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
        "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
        "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2",
        "spark.sql.streaming.stateStore.compression.codec": "lz4",
        "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
        "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
        "spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled": "true",
        "spark.sql.dropDuplicates.deterministicKeyOrder.enabled": "true",
    },
}

#: settings a QueryCluster's sparkConf may not set: the query's spec owns them
OWNED_BY_SPEC: dict[str, str] = {"spark.sql.shuffle.partitions": "spec.shufflePartitions of each query"}

_ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."
#: Settings that bound the memory a query runs in, never what it computes nor how its state is laid
#: out: they never enter plans, whoever sets them (the QueryCluster's sparkConf, or
#: ``sluice.core.sizing`` from the containers' memory), and a change of one is ``transparent`` (the
#: drivers restart with it on the same checkpoint). RocksDB reads its memory settings when a state
#: store opens, never from the checkpoint.
RUNTIME_ONLY: dict[str, str] = {
    "spark.driver.memory": "the driver's JVM heap",
    "spark.driver.memoryOverhead": "the driver's memory outside the heap",
    "spark.executor.memory": "an executor's JVM heap",
    "spark.executor.memoryOverhead": "an executor's memory outside the heap",
    _ROCKSDB + "boundedMemoryUsage": "one memory bound for every RocksDB instance of a JVM",
    _ROCKSDB + "maxMemoryUsageMB": "that bound",
    _ROCKSDB + "writeBufferCacheRatio": "the bound's share for memtables",
    _ROCKSDB + "highPriorityPoolRatio": "the bound's share for index and filter blocks",
    _ROCKSDB + "writeBufferSizeMB": "a memtable's size",
    _ROCKSDB + "maxWriteBufferNumber": "memtables per instance",
    _ROCKSDB + "blockCacheSizeMB": "an unbounded instance's block cache",
}


def is_pinned(key: str) -> bool:
    """Whether ``key`` enters the plan (a change of it re-plans the query)."""
    return key in BY_KEY or key in TYPED


def defaults_for(spark_version: str) -> dict[str, str]:
    """The pinned defaults for ``spark_version``: those of the newest known line of its major at or
    below it, else of the oldest known line of its major, else of the newest known line (a Spark this
    operator does not know gets explicit values all the same: the plan never inherits a default)."""
    major, minor, _ = parse(spark_version)
    known = sorted(parse(f"{line}.0")[:2] for line in DEFAULTS)
    same_major = [k for k in known if k[0] == major]
    below = [k for k in same_major if k[1] <= minor]
    chosen = below[-1] if below else same_major[0] if same_major else known[-1]
    return dict(DEFAULTS[f"{chosen[0]}.{chosen[1]}"])


def pinned_conf(spark_version: str, spark_conf: dict[str, str]) -> dict[str, str]:
    """``settings.conf`` of a plan compiled for ``spark_version`` with a QueryCluster's
    ``spark_conf``: every setting of :data:`MEANINGS`, the cluster's value where it sets one."""
    out = defaults_for(spark_version)
    out.update({k: str(v) for k, v in spark_conf.items() if k in BY_KEY})
    return dict(sorted(out.items()))


def typed_overrides(spark_conf: dict[str, str]) -> dict[str, str]:
    """The typed ``PinnedSettings`` fields a QueryCluster's ``spark_conf`` sets (field -> value)."""
    return {TYPED[k]: str(v) for k, v in spark_conf.items() if k in TYPED and k not in OWNED_BY_SPEC}


def conf_problems(spark_conf: dict[str, str]) -> list[str]:
    """Why a QueryCluster's ``spark_conf`` is refused ([] when it is not)."""
    return [f"{key} is pinned per query by {owner}; remove it from sparkConf" for key, owner in
            OWNED_BY_SPEC.items() if key in spark_conf]
