"""Protobuf values in the Confluent wire format (issue 30): decode and encode with the plan's pinned
descriptor.

The wire format: byte 0 is the magic byte ``0``, bytes 1-4 the schema id (big-endian), then the
message indexes (which message of the schema: ``[0]``, the first, as the single byte 0; else their
count and each as zig-zag varints), then the Protobuf binary encoding of one message.

Decoding (``kafkaSourceV1``, ``format: protobuf``) reads every record with the plan's pinned
descriptor and message, whatever the schema id: Protobuf's own evolution rules (fields by number;
unknown fields skipped, missing ones at their defaults) read records of any compatible writer
version, so the driver never asks the registry. A record whose message indexes are not the pinned
message's, or whose bytes do not parse, is malformed with its reason. A field without presence
(proto3 scalars) reads as its value, zero included; a field with presence (``optional``, a message,
a wrapper) that is unset reads as null.

Encoding (``kafkaSinkV1``, ``format: protobuf``) builds the pinned message from each row and writes
it behind the header of the id the operator registered the schema under (``SLUICE_SINK_SCHEMA_ID``)
and the message's indexes. Nulls are left unset; a null inside a repeated field or a map is written
as its type's zero value (Protobuf has no null there).

Both run as Python UDFs in the executors' (or the driver's) Python workers, with ``protobuf``'s
runtime: Spark's own ``from_protobuf`` (``spark-protobuf``) is not published for this Spark on the
Maven repository reachable here. The message class is built once per worker from the descriptor.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from typing import TYPE_CHECKING, Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from sluice.core.formats import protobuf as core
from sluice.core.plan.model import FieldSpec, RegistrySchema

from sluice_runtime.avro import HEADER_LENGTH, parse_wire_header, wire_header

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.message import Message
    from pyspark.sql import Column

#: the temporary column of a decoded source: struct<ok, reason, value>
DECODED: Final = "_sluice_protobuf"
_UNSIGNED_64 = frozenset({FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_UINT64})


class ProtobufConfigError(ValueError):
    """Protobuf settings of a plan that cannot be used (a schema without its descriptor)."""


@functools.lru_cache(maxsize=16)
def message_class(descriptor: str, name: str) -> type[Message]:
    """The message class of ``name`` in a pinned descriptor (built once per process)."""
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(core.message(descriptor, name))


def _pinned(schema: RegistrySchema, where: str) -> tuple[str, str]:
    if schema.descriptor is None or schema.message is None:
        raise ProtobufConfigError(f"{where}: a protobuf schema without its descriptor and message in the "
                                  "plan")
    return schema.descriptor, schema.message


def header(schema_id: int, indexes: list[int]) -> bytes:
    """The bytes before a message of ``schema_id`` at ``indexes``: Avro's header (magic byte, id), then
    the indexes."""
    return wire_header(schema_id) + core.index_bytes(indexes)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated message indexes")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7


def split(value: bytes) -> tuple[int, list[int], bytes]:
    """(schema id, message indexes, payload) of a value in the wire format; ``ValueError`` saying
    why it is not."""
    schema_id = parse_wire_header(value)
    if schema_id is None or len(value) <= HEADER_LENGTH:
        raise ValueError("record value is not in the Confluent wire format (magic byte 0, a 4-byte schema "
                         "id, message indexes, Protobuf binary)")
    count, at = _varint(value, HEADER_LENGTH)
    if count == 0:
        return schema_id, [0], value[at:]
    if not 0 < count <= 64:
        raise ValueError(f"record value has {count} message indexes")
    indexes = []
    for _ in range(count):
        index, at = _varint(value, at)
        indexes.append(index)
    return schema_id, indexes, value[at:]


# -- message -> Spark values ---------------------------------------------------------------------
def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == core.TIMESTAMP_MESSAGE:
            return value.ToDatetime(tzinfo=dt.UTC)
        if name in core.WRAPPERS:
            return _scalar(field.message_type.fields_by_name["value"], value.value)
        return to_row(value, field.message_type)
    if field.type in _UNSIGNED_64:
        return decimal.Decimal(value)
    return value


def _field_value(message: Message, field: FieldDescriptor) -> Any:
    value = getattr(message, field.name)
    entry = field.message_type
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        inner = entry.fields_by_name["value"]
        return {key: _scalar(inner, item) for key, item in value.items()}
    if field.is_repeated:
        return [_scalar(field, item) for item in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _scalar(field, value)


def to_row(message: Message, descriptor: Descriptor) -> tuple[Any, ...]:
    """A message as the tuple of Spark values of its fields, in the descriptor's order
    (:func:`sluice.core.formats.protobuf.to_spark`)."""
    return tuple(_field_value(message, f) for f in descriptor.fields)


def decoder(descriptor: str, name: str, columns: list[FieldSpec], what: str = "record value") -> Any:
    """The function of one record value (``what``: or key): ``(ok, reason, row of the columns)``."""
    built: list[Any] = []  # once per worker: the class, the indexes, the columns' fields

    def decode(value: bytes | None) -> tuple[bool, str | None, tuple[Any, ...] | None]:
        if not built:
            cls = message_class(descriptor, name)
            by_lower = {f.name.lower(): f for f in cls.DESCRIPTOR.fields}
            fields = [by_lower[c.name.lower()] for c in columns]
            built.extend([cls, core.message_indexes(cls.DESCRIPTOR), fields])
        cls, indexes_wanted, fields = built
        if value is None:
            return False, f"{what} is null", None
        try:
            schema_id, indexes, payload = split(bytes(value))
        except ValueError as exc:
            return False, str(exc).replace("record value", what), None
        if indexes != indexes_wanted:
            return False, (f"{what} carries message indexes {indexes} (schema id {schema_id}), not "
                           f"those of the pinned message {name} ({indexes_wanted})"), None
        message = cls()
        try:
            message.ParseFromString(payload)
        except DecodeError as exc:
            return False, (f"{what} does not decode as Protobuf message {name} (schema id "
                           f"{schema_id}): {exc}"), None
        return True, None, tuple(_field_value(message, f) for f in fields)

    return decode


def decoded_type(columns: list[FieldSpec]) -> str:
    """The DDL of :func:`decode`'s struct: ``ok``, ``reason`` and the value's columns."""
    inner = ",".join(f"`{c.name.replace('`', '``')}`:{c.type}" for c in columns)
    return f"struct<ok:boolean,reason:string,value:struct<{inner}>>"


def decode(schema: RegistrySchema, columns: list[FieldSpec], column: str = "value") -> Column:
    """The UDF of a record value (``column`` "key": of a record key): a struct of ``ok``, ``reason``
    (why it did not decode) and ``value`` (the row of ``columns``, the plan's)."""
    from pyspark.sql import functions as F

    descriptor, name = _pinned(schema, f"protobuf source subject {schema.subject}")
    function = decoder(descriptor, name, columns, "record key" if column == "key" else "record value")
    # pickled rows, not Arrow batches: the runtime image carries no pyarrow or pandas
    return F.udf(function, decoded_type(columns), useArrow=False)(F.col(column))


# -- Spark values -> message ---------------------------------------------------------------------
def _set_scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        return field.enum_type.values_by_name[value].number
    if field.type in _UNSIGNED_64:
        return int(value)
    return value


def _zero(field: FieldDescriptor) -> Any:
    """The zero value of a repeated scalar field's elements (a repeated field's ``default_value`` is
    the empty list)."""
    if field.type == field.TYPE_BYTES:
        return b""
    if field.type == field.TYPE_STRING:
        return ""
    if field.type in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
        return 0.0
    return False if field.type == field.TYPE_BOOL else 0


def _fill_message(target: Message, value: Any) -> None:
    """``target`` (a message field, a repeated element or a map value) filled from a Spark value."""
    descriptor = target.DESCRIPTOR
    if descriptor.full_name == core.TIMESTAMP_MESSAGE:
        moment = value if value.tzinfo is not None else value.astimezone()
        target.FromDatetime(moment.astimezone(dt.UTC))  # type: ignore[attr-defined]
        return
    if descriptor.full_name in core.WRAPPERS:
        target.value = _set_scalar(descriptor.fields_by_name["value"], value)  # type: ignore[attr-defined]
        return
    fill(target, value)


def fill(message: Message, row: Any) -> Message:
    """``message`` with the fields of ``row`` (a Spark Row, a tuple in the descriptor's order, or a
    dict) set; nulls left unset."""
    fields = message.DESCRIPTOR.fields
    values = row.asDict() if hasattr(row, "asDict") else (row if isinstance(row, dict) else None)
    for i, field in enumerate(fields):
        value = values.get(field.name) if values is not None else row[i]
        if value is None:
            continue
        target = getattr(message, field.name)
        entry = field.message_type
        if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            inner = entry.fields_by_name["value"]
            for key, item in value.items():
                if inner.type == inner.TYPE_MESSAGE:
                    entry_value = target[key]  # a message map's entry exists once read
                    if item is not None:
                        _fill_message(entry_value, item)
                else:
                    target[key] = _set_scalar(inner, item) if item is not None else inner.default_value
        elif field.is_repeated:
            for item in value:
                if field.type == field.TYPE_MESSAGE:
                    element = target.add()
                    if item is not None:
                        _fill_message(element, item)
                else:
                    target.append(_set_scalar(field, item) if item is not None else _zero(field))
        elif field.type == field.TYPE_MESSAGE:
            _fill_message(target, value)
        else:
            setattr(message, field.name, _set_scalar(field, value))
    return message


def encoder(descriptor: str, name: str, schema_id: int) -> Any:
    """The function of one output row: its bytes in the wire format."""
    prefix: bytes | None = None

    def encode(row: Any) -> bytes:
        nonlocal prefix
        cls = message_class(descriptor, name)
        if prefix is None:
            prefix = header(schema_id, core.message_indexes(cls.DESCRIPTOR))
        return prefix + fill(cls(), row).SerializeToString()

    return encode


def encode(value: Column, schema: RegistrySchema, schema_id: int) -> Column:
    """``value`` (a struct of the output columns) as the pinned message behind the wire header."""
    from pyspark.sql import functions as F

    descriptor, name = _pinned(schema, f"protobuf sink subject {schema.subject}")
    return F.udf(encoder(descriptor, name, schema_id), "binary", useArrow=False)(value)

