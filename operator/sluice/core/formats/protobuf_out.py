"""Spark SQL types as a Protobuf schema: what a protobuf sink writes (issue 30), derived from the
plan's output schema. The inverse of :mod:`sluice.core.formats.protobuf` for the types it reads:

==========================  ===============================================================
Spark SQL                   Protobuf (proto3)
==========================  ===============================================================
boolean                     optional bool
tinyint, smallint, int      optional int32 (tinyint and smallint read back as int)
bigint                      optional int64
float, double               optional float, optional double
string                      optional string
binary                      optional bytes
timestamp                   google.protobuf.Timestamp
struct<...>                 a message nested in the one holding it (named after its column)
array<T>                    repeated T (T not an array or a map)
map<K,V>                    map<K, V> (K string, int, bigint or boolean; V not an array or a map)
==========================  ===============================================================

Scalar fields are proto3 ``optional`` so that a null column reads back as null, not as the type's
zero value; message fields have presence anyway. Protobuf has no null inside a repeated field or a
map: a null element or map value is written as its type's zero value (an empty message). Fields are
numbered from 1 in the order of the columns. The message is named after the sink topic
(:func:`sluice.core.formats.avro_out.record_name`) in the package :data:`PACKAGE`.

Both the ``.proto`` text (what the operator registers) and the compiled ``FileDescriptorSet`` (what
the plan pins and the runtime encodes with) are built here from the same fields; a unit test compiles
the text with ``protoc`` and compares. Refused with a
:class:`~sluice.core.formats.protobuf.ProtobufTypeError` naming the column's path: a column name that
is not a Protobuf field name, the types with no Protobuf counterpart here (``void``, ``interval``,
``date``, ``timestamp_ntz``, ``decimal``: cast them), an array of arrays or maps, and a map of
arrays or maps.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, timestamp_pb2
from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto

from sluice.core.formats.avro_out import record_name
from sluice.core.formats.protobuf import ProtobufTypeError
from sluice.core.plan.model import FieldSpec
from sluice.core.types import NULL, SparkType, TypeParseError, parse_type

__all__ = ["PACKAGE", "SinkProto", "schema_of"]

PACKAGE = "sluice"
TIMESTAMP_FILE = "google/protobuf/timestamp.proto"

_F: Any = descriptor_pb2.FieldDescriptorProto
#: Spark type -> (Protobuf field type, its name in .proto text)
SCALARS: dict[str, tuple[int, str]] = {
    "boolean": (_F.TYPE_BOOL, "bool"),
    "tinyint": (_F.TYPE_INT32, "int32"),
    "smallint": (_F.TYPE_INT32, "int32"),
    "int": (_F.TYPE_INT32, "int32"),
    "bigint": (_F.TYPE_INT64, "int64"),
    "float": (_F.TYPE_FLOAT, "float"),
    "double": (_F.TYPE_DOUBLE, "double"),
    "string": (_F.TYPE_STRING, "string"),
    "binary": (_F.TYPE_BYTES, "bytes"),
}
MAP_KEYS = ("string", "int", "bigint", "boolean")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class SinkProto:
    """A protobuf sink's schema: the ``.proto`` text, the compiled ``FileDescriptorSet`` (base64)
    and the full name of the message written."""

    text: str
    descriptor: str
    message: str


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Field"


def _json_name(name: str) -> str:
    """protoc's JSON name of a field: underscores dropped, the letter after each upper-cased."""
    out, upper = [], False
    for char in name:
        if char == "_":
            upper = True
        else:
            out.append(char.upper() if upper else char)
            upper = False
    return "".join(out)


class _Builder:
    """One sink schema: the descriptor and the text of each message, built together."""

    def __init__(self) -> None:
        self.uses_timestamp = False

    def message(self, name: str, fields: Sequence[tuple[str, SparkType]], path: str, scope: str,
                indent: str) -> tuple[descriptor_pb2.DescriptorProto, list[str]]:
        if not fields:
            raise ProtobufTypeError(path, "an empty struct has no Protobuf message (a message needs a field)")
        proto = descriptor_pb2.DescriptorProto(name=name)
        full = f"{scope}.{name}"
        lines = [f"{indent}message {name} {{"]
        seen: set[str] = set()
        taken = {n for n, _ in fields}
        for number, (field_name, spark) in enumerate(fields, start=1):
            where = f"{path}.{field_name}"
            if not _NAME.match(field_name):
                raise ProtobufTypeError(where, f"{field_name!r} is not a Protobuf field name (letters, "
                                               "digits and _, not first a digit): give the column an alias")
            if field_name in seen:
                raise ProtobufTypeError(where, f"the column {field_name} appears twice")
            seen.add(field_name)
            field = _F(name=field_name, number=number, json_name=_json_name(field_name))
            text = self.field(field, spark, where, proto, full, indent + "  ", taken, lines)
            proto.field.append(field)
            lines.append(f"{indent}  {text} = {number};")
        for field in proto.field:  # synthetic oneofs of proto3 optional fields come after the real ones
            if field.proto3_optional:
                field.oneof_index = len(proto.oneof_decl)
                proto.oneof_decl.append(descriptor_pb2.OneofDescriptorProto(name=f"_{field.name}"))
        lines.append(f"{indent}}}")
        return proto, lines

    def nested(self, name: str, spark: SparkType, path: str, parent: DescriptorProto,
               scope: str, indent: str, taken: set[str], lines: list[str]) -> str:
        """A struct's message nested in ``parent``: its name, unique among the parent's fields and
        nested messages."""
        type_name = _camel(name)
        while type_name in taken or any(m.name == type_name for m in parent.nested_type):
            type_name += "_"
        proto, text = self.message(type_name, spark.fields, path, scope, indent)
        parent.nested_type.append(proto)
        lines.extend(text)
        return type_name

    def single(self, field: FieldDescriptorProto, spark: SparkType, path: str, parent: DescriptorProto,
               scope: str, indent: str, taken: set[str], lines: list[str], name: str) -> str:
        """``field`` typed as one value of ``spark``: its type's text."""
        if spark.name in SCALARS:
            field.type, text = SCALARS[spark.name]
            return text
        if spark.name == "timestamp":
            self.uses_timestamp = True
            field.type, field.type_name = _F.TYPE_MESSAGE, ".google.protobuf.Timestamp"
            return "google.protobuf.Timestamp"
        if spark.name == "struct":
            type_name = self.nested(name, spark, path, parent, scope, indent, taken, lines)
            field.type, field.type_name = _F.TYPE_MESSAGE, f".{scope}.{type_name}"
            return type_name
        what = {"void": "the type of a bare NULL (cast it)",
                "date": "date (cast it to timestamp or string)",
                "timestamp_ntz": "timestamp_ntz (cast it to timestamp)",
                "decimal": f"{spark.render()} (cast it to double or string)"}.get(spark.name, spark.render())
        if spark.name in ("array", "map"):
            what = f"{spark.render()} inside an array or a map"
        raise ProtobufTypeError(path, f"{what} has no Protobuf type here")

    def field(self, field: FieldDescriptorProto, spark: SparkType, path: str, parent: DescriptorProto,
              scope: str, indent: str, taken: set[str], lines: list[str]) -> str:
        """``field`` of a column of type ``spark``: its declaration's text (without the number)."""
        if spark.name == "array":
            assert spark.element is not None
            field.label = _F.LABEL_REPEATED
            text = self.single(field, spark.element, f"{path}[]", parent, scope, indent, taken, lines,
                               field.name)
            return f"repeated {text} {field.name}"
        if spark.name == "map":
            assert spark.key is not None and spark.value is not None
            return self.map(field, spark, path, parent, scope, indent, taken, lines)
        field.label = _F.LABEL_OPTIONAL
        text = self.single(field, spark, path, parent, scope, indent, taken, lines, field.name)
        if spark.name in SCALARS:
            field.proto3_optional = True
            return f"optional {text} {field.name}"
        return f"{text} {field.name}"

    def map(self, field: FieldDescriptorProto, spark: SparkType, path: str, parent: DescriptorProto,
            scope: str, indent: str, taken: set[str], lines: list[str]) -> str:
        assert spark.key is not None and spark.value is not None
        if spark.key.name not in MAP_KEYS:
            raise ProtobufTypeError(path, f"{spark.render()}: Protobuf map keys are strings, integers or "
                                          f"booleans, this map's are {spark.key.render()} (cast them)")
        entry_name = _camel(field.name) + "Entry"
        entry = descriptor_pb2.DescriptorProto(name=entry_name)
        entry.options.map_entry = True
        key = _F(name="key", number=1, json_name="key", label=_F.LABEL_OPTIONAL)
        key_text = self.single(key, spark.key, f"{path}.key", entry, scope, indent, set(), [], "key")
        value = _F(name="value", number=2, json_name="value", label=_F.LABEL_OPTIONAL)
        value_text = self.single(value, spark.value, f"{path}{{}}", parent, scope, indent, taken, lines,
                                 field.name)
        entry.field.extend([key, value])
        parent.nested_type.append(entry)
        field.label, field.type = _F.LABEL_REPEATED, _F.TYPE_MESSAGE
        field.type_name = f".{scope}.{entry_name}"
        return f"map<{key_text}, {value_text}> {field.name}"


def schema_of(columns: Sequence[FieldSpec], topic: str, path: str = "value") -> SinkProto:
    """The Protobuf schema of an output with ``columns``, its message named after ``topic``."""
    fields = [(c.name, _parse(c.type, f"{path}.{c.name}")) for c in columns]
    name = record_name(topic)
    builder = _Builder()
    message, lines = builder.message(name, fields, path, PACKAGE, "")
    file = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", package=PACKAGE, syntax="proto3")
    header = ['syntax = "proto3";', "", f"package {PACKAGE};", ""]
    files = descriptor_pb2.FileDescriptorSet()
    if builder.uses_timestamp:
        file.dependency.append(TIMESTAMP_FILE)
        header[3:3] = ["", f'import "{TIMESTAMP_FILE}";']
        timestamp = descriptor_pb2.FileDescriptorProto()
        timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
        files.file.append(timestamp)
    file.message_type.append(message)
    files.file.append(file)
    text = "\n".join([*header, *lines]) + "\n"
    descriptor = base64.b64encode(files.SerializeToString(deterministic=True)).decode()
    return SinkProto(text=text, descriptor=descriptor, message=f"{PACKAGE}.{name}")


def _parse(text: str, path: str) -> SparkType:
    if text.strip().lower() == NULL.name:
        return NULL
    try:
        return parse_type(text)
    except TypeParseError as exc:
        raise ProtobufTypeError(path, f"not a Spark SQL type: {exc}") from None
