"""The execution plan model.

A plan is a DAG of steps. Every step has a ``type`` that carries its version (``filterV1``); a
step's meaning never changes once released: a new meaning is a new step type (``filterV2``) and
the old one stays loadable and runnable (historical plans in ``tests/corpus/historical_plans``).

Expressions are normalized Spark SQL expression text (as produced by the compiler), so that the
plan and its hash do not depend on formatting, comments or keyword case.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

PLAN_FORMAT_VERSION = 1
SPARK_VERSION = "4.3.0"


class PlanModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class FieldSpec(PlanModel):
    """A column of a step's output: name and Spark SQL type (normalized DDL text)."""

    name: str
    type: str
    qualifier: str | None = Field(default=None, description="Relation alias after a join, e.g. 'o'.")


class NamedExpr(PlanModel):
    name: str
    expr: str


class AggregateCall(PlanModel):
    """One aggregate: ``function(args)`` named ``name``; ``expr`` is the full normalized text."""

    name: str
    function: Literal["count", "sum", "min", "max", "avg", "approx_count_distinct"]
    args: list[str] = Field(
        default_factory=list, description="Argument expressions; [] or ['*'] for count(*)."
    )
    expr: str


class MalformedHandling(PlanModel):
    policy: Literal["deadLetter", "skip", "fail"] = "deadLetter"
    topic: str | None = None


class RegistrySchema(PlanModel):
    """A record schema from the schema registry, pinned in the plan by content: a source's reader
    schema (the subject's version and id the compiler found), or the schema a sink writes (derived
    from the output schema; its id is the registry's answer when the operator registers it at
    rollout, not part of the plan). A subject gaining versions never changes a pinned plan."""

    subject: str = Field(description="Subject name, e.g. 'orders-value' (TopicNameStrategy).")
    schema_type: Literal["AVRO", "PROTOBUF"] = Field(default="AVRO",
                                                     description="The registry's schema type.")
    schema_: str = Field(alias="schema", description="The schema's text (Avro JSON, canonical form; "
                         "Protobuf: the .proto text).")
    descriptor: str | None = Field(
        default=None, description="PROTOBUF: the schema compiled by protoc, a FileDescriptorSet (base64) "
        "with its imports, dependencies first: what the runtime decodes and encodes with.")
    message: str | None = Field(
        default=None, description="PROTOBUF: the full name of the message the records carry.")
    id: int | None = Field(default=None, description="A source's pinned schema id in the registry.")
    version: int | None = Field(default=None, description="A source's pinned subject version.")


#: A record key's format in a plan (absent: as before the field; a source does not read the key, a sink
#: writes one key column as text and several as a JSON object).
KeyFormat = Literal["string", "json", "avro", "protobuf", "kafka:string", "kafka:long", "kafka:int",
                    "kafka:short", "kafka:double", "kafka:float", "kafka:bytes", "kafka:uuid"]


class StepBase(PlanModel):
    id: str = Field(description="Stable id of the step within the plan, e.g. 'source-orders', 'aggregate-1'.")
    inputs: list[str] = Field(default_factory=list, description="Ids of the steps feeding this one.")
    schema_: list[FieldSpec] = Field(alias="schema", description="Output schema of the step.")


class KafkaSourceV1(StepBase):
    type: Literal["kafkaSourceV1"] = "kafkaSourceV1"
    source: str = Field(description="Source name as the SQL refers to it.")
    topic: str
    format: Literal["json", "avro", "protobuf"] = Field(
        default="json", description="Record value format: json, or avro in the Confluent wire format "
        "(magic byte, schema id, Avro binary) read with the pinned reader schema (valueSchema), or "
        "protobuf in the Confluent wire format (magic byte, schema id, message indexes, Protobuf binary) "
        "read with the pinned descriptor (valueSchema).")
    value_schema: RegistrySchema | None = Field(
        default=None, description="avro, protobuf: the reader schema pinned from the registry.")
    columns: list[FieldSpec] = Field(description="Declared record value columns.")
    key_format: KeyFormat | None = Field(
        default=None, description="Record key format when the key's columns (keyColumns) are read: string, "
        "json, avro or protobuf (Confluent wire format, keySchema) or kafka:<type> (Kafka's serializers, "
        "big-endian). "
        "Absent: the key is not read (plans compiled before the field, or a string key without columns).")
    key_columns: list[FieldSpec] | None = Field(
        default=None, description="The record key's columns (before the value's in the step's schema).")
    key_schema: RegistrySchema | None = Field(
        default=None, description="avro, protobuf key: the key's reader schema (descriptor) pinned from the "
        "registry.")
    key_prefix: str | None = Field(
        default=None, description="The prefix of the key columns' names in the step's schema (keyColumns "
        "name the key's own fields). Absent: none.")
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(
        default=None, description="At most this many records per micro-batch (Spark's maxOffsetsPerTrigger). "
        "Absent: no limit (plans compiled before the compiler pinned a default).")
    min_partitions: int | None = Field(
        default=None, description="At least this many tasks read the topic per batch (Spark's "
        "minPartitions). Absent: one task per topic partition.")
    malformed: MalformedHandling = Field(default_factory=MalformedHandling)
    on_data_loss: Literal["fail", "skip"] | None = Field(
        default=None,
        description="When offsets the checkpoint asks for are gone from the topic (aged out by retention, "
        "deleted): fail stops the query (Spark's failOnDataLoss=true); skip goes on from the earliest "
        "offset still there. Absent in plans compiled before the field existed: skip, as they ran.",
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] | None = Field(
        default=None,
        description="How the source reads transactional topics: read_committed sees only committed "
        "transactions (the output of an exactly-once query, of Kafka Streams or ksqlDB with exactly-once), "
        "read_uncommitted also the records of aborted ones. Absent in plans compiled before the field "
        "existed: read_uncommitted, as they ran.",
    )


class WatermarkV1(StepBase):
    type: Literal["watermarkV1"] = "watermarkV1"
    column: str
    delay: str = Field(description="Normalized delay, e.g. '1 minute'.")


class FilterV1(StepBase):
    type: Literal["filterV1"] = "filterV1"
    condition: str


class ProjectV1(StepBase):
    type: Literal["projectV1"] = "projectV1"
    expressions: list[NamedExpr]


class AggregateV1(StepBase):
    type: Literal["aggregateV1"] = "aggregateV1"
    keys: list[NamedExpr]
    aggregates: list[AggregateCall]


class WindowSpec(PlanModel):
    column: str = Field(description="Event-time column expression.")
    size: str
    slide: str | None = Field(default=None, description="Slide for sliding windows; None for tumbling.")
    name: str = Field(description="Output name of the window struct column.")


class WindowAggregateV1(StepBase):
    type: Literal["windowAggregateV1"] = "windowAggregateV1"
    window: WindowSpec
    keys: list[NamedExpr] = Field(default_factory=list, description="Grouping keys besides the window.")
    aggregates: list[AggregateCall]


class SessionWindowSpec(PlanModel):
    column: str
    gap: str
    name: str


class SessionWindowAggregateV1(StepBase):
    type: Literal["sessionWindowAggregateV1"] = "sessionWindowAggregateV1"
    session: SessionWindowSpec
    keys: list[NamedExpr] = Field(default_factory=list)
    aggregates: list[AggregateCall]


class JoinKey(PlanModel):
    left: str
    right: str


class StreamStreamJoinV1(StepBase):
    type: Literal["streamStreamJoinV1"] = "streamStreamJoinV1"
    join_type: Literal["inner", "leftOuter", "rightOuter"]
    left_alias: str
    right_alias: str
    keys: list[JoinKey] = Field(min_length=1, description="Equality keys (qualified expressions).")
    time_condition: str | None = Field(default=None, description="Event-time range condition.")
    condition: str = Field(description="Full join condition as Spark evaluates it.")


class UnionV1(StepBase):
    type: Literal["unionV1"] = "unionV1"


class DeduplicateV1(StepBase):
    type: Literal["deduplicateV1"] = "deduplicateV1"
    columns: list[str]


class TriggerSpec(PlanModel):
    processing_time: str | None = None


class KafkaSinkV1(StepBase):
    type: Literal["kafkaSinkV1"] = "kafkaSinkV1"
    topic: str
    format: Literal["json", "avro", "protobuf"] = Field(
        default="json", description="Record value format: json, or avro or protobuf in the Confluent wire "
        "format with the schema valueSchema, registered under its subject by the operator at rollout.")
    value_schema: RegistrySchema | None = Field(
        default=None, description="avro, protobuf: the schema written, derived from the output schema.")
    key: list[str] = Field(default_factory=list)
    key_format: KeyFormat | None = Field(
        default=None, description="Record key format: json (an object of the key columns), avro (a record "
        "of them, keySchema, registered by the operator at rollout) or kafka:<type> (one column, Kafka's "
        "serializers). Absent (string): one key column as text, several as a JSON object.")
    key_schema: RegistrySchema | None = Field(
        default=None, description="avro key: the key schema written, derived from the key columns.")
    output_mode: Literal["append", "update", "complete"] = "append"
    delivery: Literal["atLeastOnce", "exactlyOnce"] = "atLeastOnce"
    trigger: TriggerSpec = Field(default_factory=TriggerSpec)


Step = Annotated[
    KafkaSourceV1
    | WatermarkV1
    | FilterV1
    | ProjectV1
    | AggregateV1
    | WindowAggregateV1
    | SessionWindowAggregateV1
    | StreamStreamJoinV1
    | UnionV1
    | DeduplicateV1
    | KafkaSinkV1,
    Field(discriminator="type"),
]

class PinnedSettings(PlanModel):
    """Spark settings the plan pins: the checkpoint's layout and what the query computes (the
    runtime applies them over every other setting; ``sluice.core.plan.meaning`` lists them)."""

    shuffle_partitions: int = 8
    state_store_provider: str = (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    )
    changelog_checkpointing: bool = True
    state_format: str = Field(
        default="unsaferow", description="spark.sql.streaming.stateStore.encodingFormat"
    )
    conf: dict[str, str] | None = Field(
        default=None,
        description="Further settings that change results or the state's layout, with the value the "
        "plan was compiled with (sluice.core.plan.meaning); absent in plans compiled before they were "
        "pinned (the engine's defaults then).",
    )

    def spark_conf(self) -> dict[str, str]:
        return {
            **(self.conf or {}),
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.streaming.stateStore.providerClass": self.state_store_provider,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(
                self.changelog_checkpointing
            ).lower(),
            "spark.sql.streaming.stateStore.encodingFormat": self.state_format,
        }


class Plan(PlanModel):
    """A compiled, pinned execution plan."""

    version: int = Field(default=PLAN_FORMAT_VERSION, description="Plan format version.")
    spark_version: str = SPARK_VERSION
    settings: PinnedSettings = Field(default_factory=PinnedSettings)
    steps: list[Step] = Field(min_length=2)
    output_schema: list[FieldSpec]
    hash: str = Field(
        default="", description="Content hash (sha256 of the canonical plan without this field)."
    )

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    @property
    def sink(self) -> KafkaSinkV1:
        sinks = [s for s in self.steps if isinstance(s, KafkaSinkV1)]
        return sinks[0]

    def canonical_json(self) -> str:
        """Canonical JSON of the content (sorted keys, no whitespace, hash excluded).

        Fields that are None are left out: a field added to a model later must be optional with
        default None (meaning "as before"), so that old plans keep their hashes.
        """
        data = self.model_dump(mode="json", by_alias=True, exclude={"hash"}, exclude_none=True)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def compute_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def with_hash(self) -> Plan:
        return self.model_copy(update={"hash": self.compute_hash()})

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        return cls.model_validate_json(text)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        return cls.model_validate(data)
