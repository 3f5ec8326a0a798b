"""What every step builder gets: the Spark session, connection settings and shared collectors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    extra_kafka: dict[str, str] = field(default_factory=dict)
    dead_letters: list[DeadLetterRoute] = field(default_factory=list)
    #: names of ``observe()`` metrics registered by steps (source id -> observation name)
    observations: dict[str, str] = field(default_factory=dict)

    def kafka_options(self) -> dict[str, str]:
        """Kafka client options for Spark's connector (``kafka.``-prefixed)."""
        opts = {"kafka.bootstrap.servers": self.bootstrap}
        for key, value in self.extra_kafka.items():
            opts[key if key.startswith("kafka.") else f"kafka.{key}"] = value
        return opts


Builder = Callable[[Any, "list[DataFrame]", BuildContext], "DataFrame"]


def select_schema(df: DataFrame, step: Any) -> DataFrame:
    """Order and restrict the output to the step's declared schema (names only)."""
    names = [f.name for f in step.schema_]
    return df.select(*[df[f"`{n}`"] for n in names])
