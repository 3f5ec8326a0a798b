"""The query part of a StreamingQuery spec (pure pydantic models, reused by the CRD models).

Field names are camelCase on the wire (YAML/JSON), snake_case in Python.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Base for spec models: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Column(SpecModel):
    """A column of a source's records."""

    name: str = Field(min_length=1, description="Column name as the SQL refers to it.")
    type: str = Field(
        min_length=1,
        description="Spark SQL type: string, int, bigint, double, boolean, timestamp, date, "
        "decimal(p,s), array<...>, map<...>, struct<...>.",
    )


class EventTime(SpecModel):
    column: str = Field(min_length=1, description="Timestamp column that carries event time.")
    watermark: str = Field(
        min_length=1, description="How late events may arrive, e.g. '1 minute' or '30 seconds'."
    )


class MalformedPolicy(SpecModel):
    """What happens to records that do not parse (bad JSON, wrong types)."""

    policy: Literal["deadLetter", "skip", "fail"] = Field(
        default="deadLetter",
        description="deadLetter: send raw bytes and the error to a dead-letter topic (default); "
        "skip: drop and count; fail: stop the query.",
    )
    topic: str | None = Field(
        default=None, description="Dead-letter topic; defaults to '<sink topic>.dlq'."
    )


#: A record key's format (``keyFormat``): ``string`` (UTF-8 text, the default), ``json`` (a JSON
#: object), ``avro`` (Confluent wire format, subject ``<topic>-key`` unless ``keySubject``), or one of
#: Kafka's own serializers, ``kafka:<type>`` (``kafka:long`` is LongSerializer's 8 bytes big-endian).
KeyFormat = Literal["string", "json", "avro", "protobuf", "kafka:string", "kafka:long", "kafka:int",
                    "kafka:short", "kafka:double", "kafka:float", "kafka:bytes", "kafka:uuid"]
#: the Spark SQL type of the one column of a ``kafka:<type>`` key (and of a ``string`` one)
PRIMITIVE_KEY_TYPES: dict[str, str] = {
    "string": "string", "kafka:string": "string", "kafka:long": "bigint", "kafka:int": "int",
    "kafka:short": "smallint", "kafka:double": "double", "kafka:float": "float", "kafka:bytes": "binary",
    "kafka:uuid": "string"}
_KEY_FORMAT_HELP = ("Record key format: string (UTF-8, the default), json (an object), avro or protobuf "
                    "(Confluent wire format, subject keySubject or '<topic>-key'), "
                    "or Kafka's own serializers kafka:string, "
                    "kafka:long, kafka:int, kafka:short, kafka:double, kafka:float (big-endian, as Kafka's "
                    "LongSerializer...), kafka:bytes (the raw bytes), kafka:uuid (a UUID's text, UTF-8).")


#: the value and key formats whose schemas live in the QueryCluster's schema registry
REGISTRY_FORMATS = frozenset({"avro", "protobuf"})


def key_subject_of(topic: str) -> str:
    """The TopicNameStrategy subject of a topic's record keys."""
    return f"{topic}-key"


#: The rate limit a source's plan pins when the source sets none (``maxOffsetsPerTrigger``): a catch-up
#: on a backlog (a new query from earliest, a query back after a stop) reads it in batches of at most
#: this many records instead of one unbounded batch. Plans compiled before it keep what they pinned.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000


class Source(SpecModel):
    """A Kafka topic the SQL reads under a name, with the columns of its records."""

    name: str = Field(min_length=1, description="The name the SQL uses for this source.")
    topic: str = Field(min_length=1, description="Kafka topic to read.")
    format: Literal["json", "avro", "protobuf"] = Field(
        default="json",
        description="Record value format: json, or avro or protobuf in the Confluent wire format with its "
        "schema in the QueryCluster's schemaRegistry (pinned in the plan when the plan is compiled).",
    )
    subject: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="avro, protobuf: the registry subject of the record value schema; absent: "
        "'<topic>-value' (TopicNameStrategy).",
    )
    message: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="protobuf: the full name of the message the records carry (e.g. 'shop.Order'); absent: "
        "the first message of the subject's schema, as Confluent's serializers default.",
    )
    schema_: list[Column] | None = Field(
        default=None, alias="schema", min_length=1,
        description="Columns of the record value; required for json. avro, protobuf: absent, the columns are "
        "the fields of the subject's latest schema; given, each must be a field of it with the same type.",
    )
    key_format: KeyFormat = Field(default="string", description=_KEY_FORMAT_HELP + " The key's columns "
                                  "(keySchema) are columns of the source beside the value's.")
    key_subject: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="avro, protobuf key: the registry subject of the key schema; absent: '<topic>-key'.")
    key_message: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="protobuf key: the full name of the message the keys carry; absent: the schema's first "
                    "message.")
    key_schema: list[Column] | None = Field(
        default=None, min_length=1,
        description="Columns of the record key, usable in SQL beside the value's (a name may not be a value "
                    "column's too). string: absent (the key is not read) or one string column; kafka:<type>: "
                    "one column of that type (kafka:long bigint, kafka:int int, kafka:short smallint, "
                    "kafka:double double, kafka:float float, kafka:bytes binary, kafka:string and kafka:uuid "
                    "string); json: the object's fields; avro, protobuf: absent, the fields of the key "
                    "subject's record schema (message), or a subset of them.")
    key_prefix: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="A prefix of the key's column names in SQL (Flink's key.fields-prefix), for a key whose "
                    "fields have the names of value columns (a key 'id' and a value 'id': with 'key_', the "
                    "key's is key_id). keySchema names the key's own fields, without it. Only for a source "
                    "that reads its key.")
    event_time: EventTime | None = Field(default=None, description="Event-time column and watermark.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        default="earliest", description="Where a new query starts reading."
    )
    max_offsets_per_trigger: int | None = Field(
        default=None, ge=1,
        description="Rate limit: at most this many records (offsets, over all the topic's partitions) per "
        f"micro-batch. Absent: {DEFAULT_MAX_OFFSETS_PER_TRIGGER:,}, pinned in the plan when it is compiled, "
        "so that a catch-up on a backlog runs as several bounded batches.",
    )
    min_partitions: int | None = Field(
        default=None, ge=1,
        description="Spark tasks a batch reads the topic with, at least: above the topic's partition count "
        "Spark splits large partitions' offset ranges (more parallelism for a stateless query). Absent: one "
        "task per topic partition.",
    )
    malformed: MalformedPolicy = Field(default_factory=MalformedPolicy)
    on_data_loss: Literal["fail", "skip"] = Field(
        default="fail",
        description="When records the query has not read yet are gone from the topic (aged out by "
        "retention, deleted records, a recreated topic): fail stops the query with a KafkaDataLoss "
        "error (default, as Spark does); skip goes on from the earliest offset still in the topic and "
        "counts what it skipped (sluice_source_skipped_offsets_total). Offsets left free by "
        "transaction markers and aborted transactions are not data loss under either.",
    )


    @model_validator(mode="after")
    def _columns(self) -> Source:
        if self.format == "json" and self.schema_ is None:
            raise ValueError("schema: a json source needs its columns (only an avro or protobuf source takes "
                             "them from the schema registry)")
        if self.format == "json" and self.subject is not None:
            raise ValueError("subject: only an avro or protobuf source has a registry subject")
        if self.format != "protobuf" and self.message is not None:
            raise ValueError("message: only a protobuf source names a message")
        if self.key_format not in REGISTRY_FORMATS and self.key_subject is not None:
            raise ValueError("keySubject: only an avro or protobuf key has a registry subject")
        if self.key_format != "protobuf" and self.key_message is not None:
            raise ValueError("keyMessage: only a protobuf key (keyFormat protobuf) names a message")
        if self.key_format == "json" and self.key_schema is None:
            raise ValueError("keySchema: a json key needs its columns")
        wanted = PRIMITIVE_KEY_TYPES.get(self.key_format)
        if wanted is not None and (self.key_schema is not None or self.key_format != "string"):
            if self.key_schema is None or len(self.key_schema) != 1:
                raise ValueError(f"keySchema: a {self.key_format} key is one column (of type {wanted})")
        if self.key_prefix is not None and not self.reads_key:
            raise ValueError("keyPrefix: this source does not read its key (a string key without keySchema); "
                             "set keyFormat or keySchema, or remove keyPrefix")
        return self

    @property
    def reads_key(self) -> bool:
        """Whether the key's columns are columns of the source (a string key without keySchema: no)."""
        return self.key_format != "string" or self.key_schema is not None

    @property
    def key_columns(self) -> list[Column]:
        """The declared key columns (an avro key's come from the registry when none are declared),
        by the key's own field names."""
        return list(self.key_schema or [])

    def key_sql_name(self, name: str) -> str:
        """The name in SQL of the key's field ``name`` (with ``keyPrefix``)."""
        return f"{self.key_prefix or ''}{name}"

    @property
    def key_registry_subject(self) -> str | None:
        """avro, protobuf key: the registry subject of the key schema (``<topic>-key`` unless given)."""
        if self.key_format not in REGISTRY_FORMATS:
            return None
        return self.key_subject or key_subject_of(self.topic)

    @property
    def columns(self) -> list[Column]:
        """The declared columns (none declared: empty; an avro source's come from the registry)."""
        return list(self.schema_ or [])

    @property
    def value_subject(self) -> str | None:
        """avro, protobuf: the registry subject of the value schema (``<topic>-value`` unless given)."""
        return None if self.format == "json" else self.subject or topic_subject(self.topic)


def topic_subject(topic: str) -> str:
    """The TopicNameStrategy subject of a topic's record values."""
    return f"{topic}-value"


class Sink(SpecModel):
    topic: str = Field(min_length=1, description="Kafka topic to write.")
    format: Literal["json", "avro", "protobuf"] = Field(
        default="json",
        description="Record value format: json, or avro or protobuf in the Confluent wire format with a "
        "schema derived from the query's output, registered under subject by the operator at rollout.",
    )
    subject: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="avro, protobuf: the registry subject the output schema is registered under; absent: "
        "'<topic>-value' (TopicNameStrategy).",
    )
    key: list[str] = Field(default_factory=list, description="Output columns that form the record key.")
    key_format: KeyFormat = Field(
        default="string",
        description=_KEY_FORMAT_HELP + " string: one key column as text, several as a JSON object (as "
        "before the field); json: a JSON object of the key columns; avro: a record of them; protobuf: a "
        "message of them; kafka:<type>: one key column of a type that fits.")
    key_subject: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="avro, protobuf key: the registry subject the key schema is registered under; absent: "
        "'<topic>-key'.")
    output_mode: Literal["append", "update", "complete"] = Field(
        default="append", description="Spark output mode."
    )
    delivery: Literal["atLeastOnce", "exactlyOnce"] = Field(
        default="atLeastOnce",
        description="atLeastOnce: Spark's Kafka sink; exactlyOnce: transactional sink "
        "(read with isolation.level=read_committed).",
    )
    partitions: int | None = Field(default=None, ge=1, description="Partitions when the topic is created.")
    replication_factor: int | None = Field(
        default=None, ge=1,
        description="Replication factor when the operator creates the topic; absent: the QueryCluster's "
        "kafka.defaultReplicationFactor, else the broker's default (default.replication.factor).",
    )
    cleanup_policy: Literal["delete", "compact"] | None = Field(
        default=None,
        description="cleanup.policy of the topic when the operator creates it: compact keeps the newest "
        "record of each key (a table of the query's results), only for outputMode update with a key; "
        "absent: the broker's default (log.cleanup.policy, delete unless changed). An existing topic is "
        "never altered.",
    )


    @model_validator(mode="after")
    def _subject(self) -> Sink:
        if self.format == "json" and self.subject is not None:
            raise ValueError("subject: only an avro or protobuf sink has a registry subject")
        if self.key_format not in REGISTRY_FORMATS and self.key_subject is not None:
            raise ValueError("keySubject: only an avro or protobuf key has a registry subject")
        if self.key_format != "string" and not self.key:
            raise ValueError(f"keyFormat: {self.key_format} needs the key columns (key)")
        if self.key_format.startswith("kafka:") and len(self.key) != 1:
            raise ValueError(f"keyFormat: a {self.key_format} key is one column (key has {len(self.key)})")
        return self

    @property
    def key_registry_subject(self) -> str | None:
        """avro, protobuf key: the registry subject of the key schema (``<topic>-key`` unless given)."""
        if self.key_format not in REGISTRY_FORMATS:
            return None
        return self.key_subject or key_subject_of(self.topic)

    @property
    def value_subject(self) -> str | None:
        """avro, protobuf: the registry subject of the value schema (``<topic>-value`` unless given)."""
        return None if self.format == "json" else self.subject or topic_subject(self.topic)


class Trigger(SpecModel):
    processing_time: str | None = Field(
        default=None, description="Micro-batch interval, e.g. '5 seconds'; absent: as fast as possible."
    )


class QuerySpec(SpecModel):
    """The query part of a StreamingQuery: sources, SQL, sink, trigger."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    sources: list[Source] = Field(min_length=1, description="Kafka topics the SQL reads.")
    sql: str = Field(description="One Spark SQL SELECT statement over the sources.")
    sink: Sink
    trigger: Trigger = Field(default_factory=Trigger)
    shuffle_partitions: int = Field(
        default=8, ge=1, le=10000,
        description="spark.sql.shuffle.partitions; pinned by the checkpoint "
        "(changing it is a topology change).",
    )


class UpgradePolicy(SpecModel):
    """What the operator may do when the query changes."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    allow_replace: bool = Field(
        default=True,
        description="Allow upgrades that need a new checkpoint (state is rebuilt, offsets handed off).",
    )
    replace_strategy: Literal["handOff", "backfill"] = Field(
        default="handOff",
        description="handOff: the new query starts where the old one stopped, on the same topic; "
        "backfill: the new query re-reads its sources (from the earliest offsets or backfillFrom) into "
        "a versioned topic beside the old one, which serves until the new one has caught up.",
    )
    backfill_from: str | None = Field(
        default=None,
        description="backfill: an RFC 3339 time (e.g. 2026-11-01T00:00:00Z) the new query starts reading "
        "its sources at instead of the earliest offsets.",
    )
    max_lag_records: int = Field(
        default=1000, ge=0, le=1_000_000_000,
        description="backfill: the new query takes over once its sources are at most this many records "
        "behind (summed over partitions) and it passed the health gate.",
    )
    health_timeout_seconds: int = Field(
        default=300, ge=10, le=86400,
        description="How long the driver on the new plan has to show progress before the upgrade "
        "counts as failed.",
    )
    health_batches: int = Field(
        default=3, ge=1, le=1000,
        description="Micro-batches the driver on the new plan must commit (or, with idle input, "
        "progress events of a live trigger loop) for the upgrade to succeed.",
    )
    rollback: Literal["Auto", "Never"] = Field(
        default="Auto",
        description="Auto: a failed upgrade returns to the last stable plan; Never: the query stays "
        "Degraded on the new plan with its error until the next edit.",
    )
    max_dead_letter_ratio: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="Fail the upgrade when more than this share of the new plan's input rows go to "
        "the dead-letter topic.",
    )

    @field_validator("backfill_from")
    @classmethod
    def _backfill_from(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timestamp(value)
        return value


def parse_timestamp(text: str) -> dt.datetime:
    """An RFC 3339 time with a zone (``2026-11-01T00:00:00Z``, ``...+01:00``, an optional fraction),
    not before 1970 (Kafka's timestamps start there)."""
    value = text.strip()
    try:
        moment = dt.datetime.fromisoformat(value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or "T" not in value.upper():
        raise ValueError(f"{text!r} is not an RFC 3339 time with a zone such as 2026-11-01T00:00:00Z")
    if moment < dt.datetime(1970, 1, 1, tzinfo=dt.UTC):
        raise ValueError(f"{text!r} is before 1970-01-01T00:00:00Z")
    return moment


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``30s``, ``15m``, ``24h``, ``7d`` or ``1h30m``."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 24h, 7d or 1h30m")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


class CleanupPolicy(SpecModel):
    """What the operator removes of the plan versions a replace retired."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    retain_versions: int = Field(
        default=1, ge=0, le=20,
        description="Retired versions kept for rollback (newest first); older ones are cleaned up once "
        "retention has passed since they were retired.",
    )
    delete_topics: Literal["Never", "AfterRetention"] = Field(
        default="Never",
        description="AfterRetention: a cleaned-up version's output and dead-letter topics are deleted too "
        "(never a topic the running or a kept version uses).",
    )
    retention: str = Field(
        default="24h",
        description="How long a retired version is kept before it may be cleaned up (30s, 15m, 24h, 7d).",
    )

    @field_validator("retention")
    @classmethod
    def _retention(cls, value: str) -> str:
        parse_duration(value)
        return value

    @property
    def retention_seconds(self) -> float:
        return parse_duration(self.retention)
