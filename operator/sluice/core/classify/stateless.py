"""Comparisons of stateless steps: watermarks, filters, projections, unions, sources, the sink."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.core.classify.comparison import IN_PLACE_ROWS, REPLACE, TRANSPARENT, Ctx, fmt
from sluice.core.classify.model import Category
from sluice.core.plan.steptypes import STATEFUL
from sluice.core.spec import REGISTRY_FORMATS


@dataclass(frozen=True)
class _Meaning:
    """What a change of a field means: its category, and the words that follow
    ``<label> changed from <old> to <new>`` in its message (starting with their punctuation)."""

    category: Category
    why: str


def _compare(ctx: Ctx, step: str, fld: str, old: Any, new: Any, label: str, meaning: _Meaning) -> None:
    """Report field ``fld`` of step ``step`` if it changed, as ``<label> changed from ...``."""
    if old != new:
        ctx.add(
            meaning.category,
            step,
            fld,
            old,
            new,
            f"Step {step}: {label} changed from {fmt(old)} to {fmt(new)}{meaning.why}",
        )


#: what a change of a watermark field means when a stateful operator uses the watermark
_WATERMARK_WITH_STATE = {
    "column": _Meaning(
        "topology",
        f". The checkpoint's watermark and the state's eviction were computed from the old "
        f"column. {REPLACE}",
    ),
    "delay": _Meaning(
        "data-selection",
        f". It changes which late records are still accepted and when windows are final, starting "
        f"from the watermark the checkpoint restores (Spark never moves a watermark back, so a "
        f"longer delay only takes effect once event time has caught up). The state's layout "
        f"and meaning do not change; {IN_PLACE_ROWS[0].lower()}{IN_PLACE_ROWS[1:]}",
    ),
}
#: ... and when none does
_WATERMARK_WITHOUT_STATE = _Meaning("transparent", f"; no stateful operator uses it. {TRANSPARENT}")


def _watermark(ctx: Ctx, old: Any, new: Any) -> set[str]:
    for fld, with_state in _WATERMARK_WITH_STATE.items():
        meaning = with_state if ctx.stateful else _WATERMARK_WITHOUT_STATE
        _compare(ctx, new.id, fld, getattr(old, fld), getattr(new, fld), f"watermark {fld}", meaning)
    return set(_WATERMARK_WITH_STATE)


def _filter(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.condition != new.condition:
        ctx.add(
            "data-selection",
            new.id,
            "condition",
            old.condition,
            new.condition,
            f"Step {new.id}: condition changed from {fmt(old.condition)} to {fmt(new.condition)}. "
            f"{IN_PLACE_ROWS}",
        )
    return {"condition"}


def _project(ctx: Ctx, old: Any, new: Any) -> set[str]:
    oe = {e.name: e.expr for e in old.expressions}
    ne = {e.name: e.expr for e in new.expressions}
    for name in [e.name for e in old.expressions] + [e.name for e in new.expressions if e.name not in oe]:
        a, b = oe.get(name), ne.get(name)
        if a == b:
            continue
        if a is None:
            what = f"expression {fmt(name)} was added ({fmt(b)})"
        elif b is None:
            what = f"expression {fmt(name)} was removed (was {fmt(a)})"
        else:
            what = f"expression {fmt(name)} changed from {fmt(a)} to {fmt(b)}"
        ctx.add(
            "data-selection",
            new.id,
            f"expressions.{name}",
            a,
            b,
            f"Step {new.id}: {what}. {IN_PLACE_ROWS} (Operator state that depends on it is reported "
            f"separately.)",
        )
    if [e.name for e in old.expressions if e.name in ne] != [e.name for e in new.expressions if e.name in oe]:
        ctx.add(
            "data-selection",
            new.id,
            "expressions",
            [e.name for e in old.expressions],
            [e.name for e in new.expressions],
            f"Step {new.id}: the order of the projected columns changed from "
            f"{fmt([e.name for e in old.expressions])} to {fmt([e.name for e in new.expressions])}. "
            f"{IN_PLACE_ROWS}",
        )
    return {"expressions"}


def _union(ctx: Ctx, old: Any, new: Any) -> set[str]:
    return set()  # inputs are the sources; a change of sources is reported by the source rules


def _source_topic(ctx: Ctx, old: Any, new: Any) -> None:
    if old.topic != new.topic:
        ctx.add(
            "source-modifying",
            new.id,
            "topic",
            old.topic,
            new.topic,
            f"Step {new.id}: source {fmt(new.source)} now reads topic {fmt(new.topic)} instead of "
            f"{fmt(old.topic)}. The checkpoint's offsets belong to the old topic, so the query needs a "
            f"new checkpoint (replace), reading the new topic from its starting offsets.",
        )


def _source_columns(ctx: Ctx, old: Any, new: Any, key: bool = False) -> None:
    """Columns added, removed or retyped, in the old order and then the order of the new ones (``key``:
    the key's columns, of a key format that did not change)."""
    ocols = {c.name: c.type for c in (old.key_columns or [] if key else old.columns)}
    ncols = {c.name: c.type for c in (new.key_columns or [] if key else new.columns)}
    label, at = ("key column", "keyColumns") if key else ("column", "columns")
    for name in list(ocols) + [n for n in ncols if n not in ocols]:
        a, b = ocols.get(name), ncols.get(name)
        if a == b:
            continue
        what = (
            f"added ({b})"
            if a is None
            else f"removed (was {a})"
            if b is None
            else f"retyped from {fmt(a)} to {fmt(b)}"
        )
        ctx.add(
            "data-selection",
            new.id,
            f"{at}.{name}",
            a,
            b,
            f"Step {new.id}: source {label} {fmt(name)} {what}; records are parsed with the new schema "
            f"from now on (operators whose state depends on this column are reported separately). "
            f"{IN_PLACE_ROWS}",
        )


_STARTING_OFFSETS = _Meaning(
    "transparent", f"; it only applies when a query starts without a checkpoint. {TRANSPARENT}"
)
_RATE_LIMIT = _Meaning("transparent", f". {TRANSPARENT}")
_MIN_PARTITIONS = _Meaning(
    "transparent",
    f"; it changes how many tasks a batch reads the topic with, not what the query computes. {TRANSPARENT} "
    f"With exactly-once written by the tasks (SLUICE_EOS_WRITERS=tasks) a stateless query's batch that was "
    f"partly written before the change is refused on replay (LayoutChanged: its partition count changed); "
    f"the driver's restart drains at a batch boundary, so only a batch cut short (a crash, a drain longer "
    f"than terminationGracePeriodSeconds) is affected: run the old plan until that batch is committed.",
)
_MALFORMED = _Meaning("data-selection", f". {IN_PLACE_ROWS}")
_DATA_LOSS = _Meaning(
    "transparent",
    f"; it only decides whether the query stops or goes on when offsets it has not read are gone from "
    f"the topic. {TRANSPARENT}",
)


_ISOLATION = _Meaning(
    "data-selection",
    f"; with read_committed the records of aborted transactions are no longer read. {IN_PLACE_ROWS}",
)


def _isolation(step: Any) -> str:
    """A source's effective isolation level: read_uncommitted for a plan compiled before the field."""
    return str(step.isolation_level or "read_uncommitted")


def _data_loss(step: Any) -> str:
    """A source's effective onDataLoss: a plan compiled before the field existed skips (as it ran)."""
    return str(step.on_data_loss or "skip")


_READER_SCHEMA = _Meaning(
    "data-selection",
    f"; records are read with the new reader schema from now on (Avro schema resolution: fields the "
    f"writer lacks take their defaults; column changes are reported separately). {IN_PLACE_ROWS}",
)

_PROTOBUF_READER_SCHEMA = _Meaning(
    "data-selection",
    f"; records are read with the new descriptor from now on (Protobuf's rules: fields by number, fields "
    f"the writer lacks at their defaults; column changes are reported separately). {IN_PLACE_ROWS}",
)


def _pinned(schema: Any) -> str | None:
    """A pinned registry schema, briefly: ``'orders-value' version 3 (id 7)``."""
    if schema is None:
        return None
    return f"{schema.subject!r} version {schema.version} (id {schema.id})"


def _reader_schema(ctx: Ctx, old: Any, new: Any) -> set[str]:
    """An avro or protobuf source's pinned reader schema (a format change stays unhandled: topology)."""
    if old.format != new.format or old.format not in REGISTRY_FORMATS:
        return set()
    if old.value_schema != new.value_schema:
        meaning = _READER_SCHEMA if new.format == "avro" else _PROTOBUF_READER_SCHEMA
        _compare(ctx, new.id, "valueSchema", _pinned(old.value_schema), _pinned(new.value_schema),
                 "reader schema", meaning)
    return {"value_schema"}


_KEY_READER_SCHEMA = _Meaning(
    "data-selection",
    f"; record keys are read with the new reader schema from now on (Avro schema resolution, or the new "
    f"Protobuf descriptor; key column changes are reported separately). {IN_PLACE_ROWS}",
)


_KEY_FORMAT = _Meaning(
    "topology",
    f"; the record keys are read or written in another format, as a changed value format is. {REPLACE}",
)


_KEY_PREFIX = _Meaning(
    "data-selection",
    f"; the key's columns have other names in SQL, the keys are read the same way (what uses the "
    f"columns is reported separately). {IN_PLACE_ROWS}",
)


def _key_format(ctx: Ctx, old: Any, new: Any) -> set[str]:
    """A source's or sink's key format (absent: a string key, not read by a source); a source's key
    columns, when the format stays, as its value columns, and the prefix of their names in SQL."""
    _compare(ctx, new.id, "keyFormat", old.key_format or "string", new.key_format or "string",
             "record key format", _KEY_FORMAT)
    if not hasattr(new, "key_columns") or old.key_format != new.key_format or new.key_format is None:
        return {"key_format"}
    _source_columns(ctx, old, new, key=True)
    _compare(ctx, new.id, "keyPrefix", old.key_prefix or "", new.key_prefix or "", "key column prefix",
             _KEY_PREFIX)
    return {"key_format", "key_columns", "key_prefix"}


def _key_reader_schema(ctx: Ctx, old: Any, new: Any) -> set[str]:
    """An avro or protobuf key's pinned reader schema (a key format change stays unhandled: topology,
    as a value format change)."""
    if old.key_format != new.key_format or new.key_format not in REGISTRY_FORMATS:
        return set()
    if old.key_schema != new.key_schema:
        _compare(ctx, new.id, "keySchema", _pinned(old.key_schema), _pinned(new.key_schema),
                 "key reader schema", _KEY_READER_SCHEMA)
    return {"key_schema"}


def _source(ctx: Ctx, old: Any, new: Any) -> set[str]:
    handled = _reader_schema(ctx, old, new) | _key_reader_schema(ctx, old, new) | _key_format(ctx, old, new)
    _source_topic(ctx, old, new)
    _source_columns(ctx, old, new)
    _compare(ctx, new.id, "startingOffsets", old.starting_offsets, new.starting_offsets,
             "startingOffsets", _STARTING_OFFSETS)
    _compare(ctx, new.id, "maxOffsetsPerTrigger", old.max_offsets_per_trigger, new.max_offsets_per_trigger,
             "rate limit maxOffsetsPerTrigger", _RATE_LIMIT)
    _compare(ctx, new.id, "minPartitions", old.min_partitions, new.min_partitions,
             "minPartitions", _MIN_PARTITIONS)
    _compare(ctx, new.id, "malformed", old.malformed.model_dump(mode="json"),
             new.malformed.model_dump(mode="json"), "malformed-record handling", _MALFORMED)
    _compare(ctx, new.id, "onDataLoss", _data_loss(old), _data_loss(new), "onDataLoss", _DATA_LOSS)
    _compare(ctx, new.id, "isolationLevel", _isolation(old), _isolation(new), "isolation level", _ISOLATION)
    return handled | {"topic", "columns", "starting_offsets", "max_offsets_per_trigger", "min_partitions",
                      "malformed", "source", "on_data_loss", "isolation_level"}


#: Stateful steps whose state (and its watermark eviction) is the same in update and append mode.
_SAME_STATE_IN_UPDATE_AND_APPEND = frozenset({"windowAggregateV1"})


def _update_to_append_on_windows(ctx: Ctx, old_mode: str, new_mode: str) -> bool:
    """update -> append where every stateful step of both plans is a windowed aggregation.

    Update mode emits a group whenever it changes and drops it silently once the watermark passes
    the window's end; append mode emits it at that moment. Switching update -> append therefore emits
    every window still in the state once more, with its final value (evidence: corpus pair 31). The
    other direction loses the windows waiting in the state (pair 37), and complete mode keeps groups
    that the other modes evicted: those stay ``topology``.
    """
    if (old_mode, new_mode) != ("update", "append"):
        return False
    types = [s.type for lin in (ctx.old, ctx.new) for s in lin.plan.steps if s.type in STATEFUL]
    return bool(types) and all(t in _SAME_STATE_IN_UPDATE_AND_APPEND for t in types)


_SINK_TOPIC = _Meaning(
    "data-selection",
    ". Records produced after the upgrade go to the new topic and earlier results stay in the old one; "
    "on its own this keeps state and offsets (in-place). Use a replace with backfill if the new topic "
    "needs the full history.",
)
_SINK_SUBJECT = _Meaning(
    "data-selection",
    ". Records produced after the upgrade carry the id of a schema registered under the new subject; "
    "on its own this keeps state and offsets (in-place).",
)
_DELIVERY = _Meaning("transparent", f"; applies from the next micro-batch. {TRANSPARENT}")
_TRIGGER = _Meaning("transparent", f". {TRANSPARENT}")


def _sink_key(topic: str) -> _Meaning:
    return _Meaning(
        "schema-evolution",
        f". Records produced after the upgrade are keyed (and partitioned) differently, which matters "
        f"to consumers reading {fmt(topic)} as a table; on its own this keeps state and offsets "
        f"(in-place).",
    )


def _output_mode(ctx: Ctx, old_mode: str, new_mode: str) -> _Meaning:
    """What a change of output mode from ``old_mode`` to ``new_mode`` means for this query."""
    if _update_to_append_on_windows(ctx, old_mode, new_mode):
        return _Meaning(
            "data-selection",
            ". A windowed aggregation keeps the same state in both modes and drops a window from it "
            "when the watermark passes the window's end; from the upgrade on, each window is emitted "
            "once, with its final value, when it closes (windows updated before the upgrade were "
            "already emitted with their values so far). On its own this keeps state and offsets "
            "(in-place).",
        )
    if ctx.stateful:
        return _Meaning(
            "topology",
            f". Which state has already been emitted depends on the mode: groups waiting in the state "
            f"would be lost or emitted twice. {REPLACE}",
        )
    return _Meaning("transparent", f"; for a query without state both emit every row once. {TRANSPARENT}")


def _sink(ctx: Ctx, old: Any, new: Any) -> set[str]:
    _compare(ctx, new.id, "topic", old.topic, new.topic, "sink topic", _SINK_TOPIC)
    _compare(ctx, new.id, "key", old.key, new.key, "record key", _sink_key(new.topic))
    _compare(ctx, new.id, "outputMode", old.output_mode, new.output_mode, "output mode",
             _output_mode(ctx, old.output_mode, new.output_mode))
    _compare(ctx, new.id, "delivery", old.delivery, new.delivery, "delivery", _DELIVERY)
    _compare(ctx, new.id, "trigger.processingTime", old.trigger.processing_time,
             new.trigger.processing_time, "trigger interval", _TRIGGER)
    handled = {"topic", "key", "output_mode", "delivery", "trigger"} | _key_format(ctx, old, new)
    if old.format == new.format and old.format in REGISTRY_FORMATS and old.value_schema \
            and new.value_schema:
        # the schema is derived from the output schema, which is judged on its own; its subject is not
        _compare(ctx, new.id, "valueSchema.subject", old.value_schema.subject, new.value_schema.subject,
                 "schema registry subject", _SINK_SUBJECT)
        handled.add("value_schema")
    if old.key_format == new.key_format and new.key_format in REGISTRY_FORMATS and old.key_schema \
            and new.key_schema:
        # derived from the key columns (judged as the record key); a changed subject as the value's
        _compare(ctx, new.id, "keySchema.subject", old.key_schema.subject, new.key_schema.subject,
                 "key schema registry subject", _SINK_SUBJECT)
        handled.add("key_schema")
    return handled
