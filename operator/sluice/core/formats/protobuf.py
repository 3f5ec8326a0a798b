"""Protobuf schemas as Spark SQL types: what a source of Protobuf records (issue 30) gives the plan.

A Protobuf schema reaches the core compiled: the operator runs ``protoc`` on the registry's
``.proto`` text (:mod:`sluice.operator.protoc`) and the plan pins the resulting
``FileDescriptorSet`` (base64, :attr:`sluice.core.plan.model.RegistrySchema.descriptor`) with the
full name of the message the records carry. Here it is only read (``protobuf``'s descriptor pool,
in memory): :func:`message` finds the message, :func:`columns` maps its fields to the plan's
columns, :func:`index_bytes` gives the message indexes of the Confluent wire format.

=========================================================  ==========================================
Protobuf                                                    Spark SQL
=========================================================  ==========================================
bool, string, bytes                                         boolean, string, binary
int32, sint32, sfixed32                                     int
int64, sint64, sfixed64, uint32, fixed32                    bigint (unsigned 32 bits fit a bigint)
uint64, fixed64                                             decimal(20,0)
float, double                                               float, double
enum                                                        string (the value's name)
message                                                     struct<...> of its fields
repeated T                                                  array<T>
map<K, V>                                                   map<K, V>
google.protobuf.Timestamp                                   timestamp
google.protobuf.{Bool,String,Bytes,Int32,...}Value          the wrapped type (null when unset)
=========================================================  ==========================================

Refused with a :class:`ProtobufTypeError` naming the field's path (``value.address.kind``): a
message that contains itself, ``group`` fields (proto2), and the well-known types with no Spark
type in a plan (``Any``, ``Duration``, ``Struct``, ``Value``, ``ListValue``, ``FieldMask``,
``Empty``).
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from sluice.core.plan.model import FieldSpec
from sluice.core.types import BIGINT, BOOLEAN, DOUBLE, INT, STRING, TIMESTAMP, SparkType, decimal

__all__ = [
    "WRAPPERS",
    "ProtobufTypeError",
    "columns",
    "descriptor_set",
    "index_bytes",
    "message",
    "message_columns",
    "message_indexes",
    "pool",
    "to_spark",
]

FLOAT = SparkType("float")
BINARY = SparkType("binary")
UINT64 = decimal(20, 0)

SCALARS: dict[int, SparkType] = {
    FieldDescriptor.TYPE_BOOL: BOOLEAN,
    FieldDescriptor.TYPE_STRING: STRING,
    FieldDescriptor.TYPE_BYTES: BINARY,
    FieldDescriptor.TYPE_INT32: INT,
    FieldDescriptor.TYPE_SINT32: INT,
    FieldDescriptor.TYPE_SFIXED32: INT,
    FieldDescriptor.TYPE_INT64: BIGINT,
    FieldDescriptor.TYPE_SINT64: BIGINT,
    FieldDescriptor.TYPE_SFIXED64: BIGINT,
    FieldDescriptor.TYPE_UINT32: BIGINT,
    FieldDescriptor.TYPE_FIXED32: BIGINT,
    FieldDescriptor.TYPE_UINT64: UINT64,
    FieldDescriptor.TYPE_FIXED64: UINT64,
    FieldDescriptor.TYPE_FLOAT: FLOAT,
    FieldDescriptor.TYPE_DOUBLE: DOUBLE,
    FieldDescriptor.TYPE_ENUM: STRING,
}

TIMESTAMP_MESSAGE = "google.protobuf.Timestamp"
#: the wrapper messages read as the type they wrap
WRAPPERS: dict[str, SparkType] = {
    "google.protobuf.BoolValue": BOOLEAN,
    "google.protobuf.StringValue": STRING,
    "google.protobuf.BytesValue": BINARY,
    "google.protobuf.Int32Value": INT,
    "google.protobuf.Int64Value": BIGINT,
    "google.protobuf.UInt32Value": BIGINT,
    "google.protobuf.UInt64Value": UINT64,
    "google.protobuf.FloatValue": FLOAT,
    "google.protobuf.DoubleValue": DOUBLE,
}


class ProtobufTypeError(ValueError):
    """A Protobuf schema (or a part of it) that has no Spark SQL type, or a descriptor that cannot be
    used; ``path`` names the part (``value.address.kind``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def descriptor_set(encoded: str, path: str = "value") -> descriptor_pb2.FileDescriptorSet:
    """A pinned descriptor (base64 of a serialized ``FileDescriptorSet``) parsed."""
    out = descriptor_pb2.FileDescriptorSet()
    try:
        out.ParseFromString(base64.b64decode(encoded, validate=True))
    except Exception as exc:  # binascii.Error, protobuf's DecodeError
        raise ProtobufTypeError(path, f"the pinned descriptor is not a FileDescriptorSet: {exc}") from exc
    if not out.file:
        raise ProtobufTypeError(path, "the pinned descriptor holds no file")
    return out


def pool(files: descriptor_pb2.FileDescriptorSet, path: str = "value") -> descriptor_pool.DescriptorPool:
    """A descriptor pool of its own holding ``files`` (dependencies first, as ``protoc
    --include_imports`` writes them)."""
    out = descriptor_pool.DescriptorPool()
    for file in files.file:
        try:
            out.Add(file)
        except Exception as exc:  # TypeError, KeyError: a conflicting or incomplete set
            raise ProtobufTypeError(path, f"file {file.name!r} of the descriptor: {exc}") from exc
    return out


def message(encoded: str, name: str | None = None, path: str = "value") -> Descriptor:
    """The message ``name`` (full name, ``shop.Order``) of a pinned descriptor; None: the first
    message of its main file (the last of the set: ``protoc`` writes dependencies first), as
    Confluent's serializers and deserializers default to."""
    files = descriptor_set(encoded, path)
    found = pool(files, path)
    main = files.file[-1]
    if name is None:
        if not main.message_type:
            raise ProtobufTypeError(path, f"the schema ({main.name}) defines no message")
        name = f"{main.package}.{main.message_type[0].name}" if main.package else main.message_type[0].name
    try:
        return found.FindMessageTypeByName(name)
    except KeyError:
        names = ", ".join(_message_names(main)) or "none"
        raise ProtobufTypeError(path, f"the schema has no message {name!r} (its messages: {names})") from None


def _message_names(file: descriptor_pb2.FileDescriptorProto) -> list[str]:
    prefix = f"{file.package}." if file.package else ""
    out: list[str] = []

    def walk(messages: Any, scope: str) -> None:
        for m in messages:
            out.append(scope + m.name)
            walk(m.nested_type, f"{scope}{m.name}.")

    walk(file.message_type, prefix)
    return out


def message_indexes(found: Descriptor) -> list[int]:
    """The path of indexes of a message in its file: ``[0]`` the first top-level message, ``[1, 0]``
    the first message nested in the second (the Confluent wire format's message indexes)."""
    file = descriptor_pb2.FileDescriptorProto()
    found.file.CopyToProto(file)
    prefix = f"{file.package}." if file.package else ""
    parts = found.full_name[len(prefix):].split(".")
    path: list[int] = []
    messages: Any = file.message_type
    for part in parts:
        names = [m.name for m in messages]
        path.append(names.index(part))
        messages = messages[path[-1]].nested_type
    return path


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def index_bytes(indexes: list[int]) -> bytes:
    """The message indexes as the Confluent wire format writes them after the schema id: ``[0]`` (the
    first message, the common case) as the single byte 0, else the count and each index as zig-zag
    varints."""
    if indexes == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def to_spark(found: Descriptor, path: str = "value") -> SparkType:
    """The Spark SQL struct of a message; :class:`ProtobufTypeError` naming the field's path."""
    return _struct(found, path, ())


def _struct(found: Descriptor, path: str, open_messages: tuple[str, ...]) -> SparkType:
    if found.full_name in open_messages:
        raise ProtobufTypeError(path, f"message {found.full_name} contains itself: a recursive message has "
                                      "no Spark type")
    inner = (*open_messages, found.full_name)
    fields = tuple((f.name, _field(f, f"{path}.{f.name}", inner)) for f in found.fields)
    return SparkType("struct", fields=fields)


def _field(field: FieldDescriptor, path: str, open_messages: tuple[str, ...]) -> SparkType:
    entry = field.message_type
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return SparkType("map", key=_single(key, path + ".key", open_messages),
                         value=_single(value, path + "{}", open_messages))
    single = _single(field, path + ("[]" if field.is_repeated else ""), open_messages)
    return SparkType("array", element=single) if field.is_repeated else single


def _single(field: FieldDescriptor, path: str, open_messages: tuple[str, ...]) -> SparkType:
    if field.type == FieldDescriptor.TYPE_GROUP:
        raise ProtobufTypeError(path, "group fields (proto2) have no Spark type")
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return SCALARS[field.type]
    name = field.message_type.full_name
    if name == TIMESTAMP_MESSAGE:
        return TIMESTAMP
    if name in WRAPPERS:
        return WRAPPERS[name]
    if name.startswith("google.protobuf."):
        raise ProtobufTypeError(path, f"{name} has no Spark type in a plan")
    return _struct(field.message_type, path, open_messages)


def columns(encoded: str, name: str | None = None, path: str = "value") -> list[FieldSpec]:
    """A message's fields as the plan's columns (``schema: [{name, type}]``)."""
    return message_columns(message(encoded, name, path), path)


def message_columns(found: Descriptor, path: str = "value") -> list[FieldSpec]:
    """:func:`columns` of a message already found."""
    mapped = to_spark(found, path)
    if not mapped.fields:
        raise ProtobufTypeError(path, "the message has no fields: a source's columns are its fields")
    return [FieldSpec(name=n, type=t.render()) for n, t in mapped.fields]
