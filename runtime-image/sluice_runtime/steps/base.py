"""What every step builder gets: the Spark session, connection settings and shared collectors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice_runtime.avro import AvroSettings
from sluice_runtime.kafka_security import KafkaSecurity, spark_kafka_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from sluice.core.plan.model import Plan


@dataclass
class DeadLetterRoute:
    """A source whose malformed records go to a dead-letter topic (run as its own query)."""

    source_id: str
    frame: DataFrame  # raw Kafka records already tagged with ``_sluice_malformed``
    topic: str


@dataclass
class BuildContext:
    spark: SparkSession
    plan: Plan
    bootstrap: str
    query_id: str
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: the query's consumer group (``SLUICE_CONSUMER_GROUP``): prefix of the source's group ids
    consumer_group: str | None = None
    dead_letters: list[DeadLetterRoute] = field(default_factory=list)
    #: names of ``observe()`` metrics registered by steps (source id -> observation name)
    observations: dict[str, str] = field(default_factory=dict)
    #: a warm-up run's start offsets per topic (Spark's ``startingOffsets`` JSON), replacing the
    #: plan's own: the warm-up reads only the last records of each source (``latest`` for a topic
    #: it has none for)
    warm_offsets: dict[str, str] | None = None
    #: the first term of a replaced plan version: start offsets per topic (``startingOffsets``
    #: JSON) where the previous version's output ends (:mod:`sluice_runtime.replace`); a topic
    #: not listed starts as the plan says
    start_offsets: dict[str, str] | None = None
    #: a fresh checkpoint of a backfill (``SLUICE_START_FROM``): every source not in
    #: ``start_offsets`` starts at ``earliest`` or an RFC 3339 time instead of the plan's
    #: ``startingOffsets`` (:func:`sluice_runtime.config.start_from_options`)
    start_from: str | None = None
    #: the schema registry, the avro sink's schema id and the writer schemas fetched so far
    #: (``SLUICE_SCHEMA_REGISTRY_*``, ``SLUICE_SINK_SCHEMA_ID``; :mod:`sluice_runtime.avro`)
    avro: AvroSettings = field(default_factory=AvroSettings)
    #: source id -> its records tagged (``_sluice_parsed``, ``_sluice_malformed``) and a malformed
    #: record's reason: filled by the source builder as it builds (the streaming frames); given,
    #: the builder takes the records from there instead of reading the topic (a batch built from a
    #: micro-batch read once, :func:`sluice_runtime.main_output.one_read_source`)
    tagged: dict[str, tuple[DataFrame, Any]] = field(default_factory=dict)
    #: whether the sources observe their malformed counts (not in a batch built from a micro-batch:
    #: the streaming query observed them)
    observe: bool = True

    def kafka_options(self) -> dict[str, str]:
        """Kafka client options for Spark's connector (``kafka.``-prefixed): address and security."""
        return spark_kafka_options(self.bootstrap, self.security)

    def sink_options(self) -> dict[str, str]:
        """Options of Spark's Kafka sink: :meth:`kafka_options` plus the producer's client settings."""
        return spark_kafka_options(self.bootstrap, self.security, "producer")

    def source_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source: :meth:`kafka_options`, the consumer's client settings and
        the source's consumer group prefix (when the query has one).

        ``groupIdPrefix``, not ``kafka.group.id``: Spark appends a unique suffix per query, so the
        dead-letter query reading the same topic never shares a consumer with the main one.
        """
        opts = spark_kafka_options(self.bootstrap, self.security, "consumer")
        if self.consumer_group:
            opts["groupIdPrefix"] = self.consumer_group
        return opts


Builder = Callable[[Any, "list[DataFrame]", BuildContext], "DataFrame"]


def select_schema(df: DataFrame, step: Any) -> DataFrame:
    """Order and restrict the output to the step's declared schema (names only)."""
    names = [f.name for f in step.schema_]
    return df.select(*[df[f"`{n}`"] for n in names])
