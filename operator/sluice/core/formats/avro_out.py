"""Spark SQL types as Avro schemas: the schema an avro sink writes (issue 30), derived from the plan's
output schema. The inverse of :mod:`sluice.core.formats.avro` for the types it reads:

==========================  ===============================================================
Spark SQL                   Avro
==========================  ===============================================================
boolean                     boolean
tinyint, smallint, int      int (tinyint and smallint read back as int)
bigint                      long
float, double               float, double
string                      string
binary                      bytes
date                        int + date
timestamp                   long + timestamp-micros
timestamp_ntz               long + local-timestamp-micros
decimal(p,s)                bytes + decimal(p, s)
struct<...>                 record (named after its column, in its parent's namespace)
array<T>                    array of T
map<string,T>               map of T (Avro's keys are strings: other key types are refused)
==========================  ===============================================================

Every field, array element and map value is nullable (``["null", T]``, a field with ``"default":
null``): the plan's DDL text carries no nullability and Spark's columns are nullable unless proven
otherwise, so the schema admits every row Spark can produce, and a reader's new field with a default
stays BACKWARD compatible. The top-level record is named after the sink topic (:func:`record_name`:
characters outside ``[A-Za-z0-9_]`` become ``_``, a leading digit gets a ``_`` before it), in the
namespace :data:`NAMESPACE`; a struct column's record is named after the column, in the namespace of
the record holding it (``sluice.orders_totals.address``), so no two records share a full name.

Refused with an :class:`~sluice.core.formats.avro.AvroTypeError` naming the column's path: a column
name that is not an Avro name (``count(1)``: give it an alias), the types with no Avro counterpart
(``void``, the type of a bare NULL; ``interval``), a map whose keys are not strings, and a decimal
of more than 38 digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sluice.core.formats.avro import MAX_PRECISION, AvroTypeError
from sluice.core.plan.model import FieldSpec
from sluice.core.types import NULL, SparkType, TypeParseError, parse_type

__all__ = ["NAMESPACE", "record_name", "schema_of", "schema_text"]

#: the namespace of every sink record schema
NAMESPACE = "sluice"

PRIMITIVES: dict[str, Any] = {
    "boolean": "boolean",
    "tinyint": "int",
    "smallint": "int",
    "int": "int",
    "bigint": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


def record_name(topic: str) -> str:
    """The Avro name of a topic's record: ``orders.totals-v2`` -> ``orders_totals_v2``."""
    name = _NOT_NAME_CHAR.sub("_", topic) or "_"
    return f"_{name}" if name[0].isdigit() else name


def schema_of(columns: Sequence[FieldSpec], topic: str, path: str = "value") -> dict[str, Any]:
    """The Avro record schema of an output with ``columns``, named after ``topic``."""
    fields = [(c.name, _parse(c.type, f"{path}.{c.name}")) for c in columns]
    return _record(record_name(topic), NAMESPACE, fields, path)


def schema_text(schema: dict[str, Any]) -> str:
    """A schema's JSON text as registered and pinned: compact, keys in the order built."""
    return json.dumps(schema, separators=(",", ":"))


def _parse(text: str, path: str) -> SparkType:
    if text.strip().lower() == NULL.name:  # the type of a bare NULL, which DDL has no word for
        return NULL
    try:
        return parse_type(text)
    except TypeParseError as exc:
        raise AvroTypeError(path, f"not a Spark SQL type: {exc}") from None


def _nullable(schema: Any) -> list[Any]:
    return ["null", schema]


def _record(name: str, namespace: str, fields: Sequence[tuple[str, SparkType]], path: str) -> dict[str, Any]:
    if not fields:
        raise AvroTypeError(path, "an empty struct has no Avro record (a record needs a field)")
    inner = f"{namespace}.{name}"
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for field_name, field_type in fields:
        where = f"{path}.{field_name}"
        if not _NAME.match(field_name):
            raise AvroTypeError(
                where, f"{field_name!r} is not an Avro field name (letters, digits and _, not first a "
                "digit): give the column an alias"
            )
        if field_name in seen:
            raise AvroTypeError(where, f"the column {field_name} appears twice")
        seen.add(field_name)
        out.append({"name": field_name, "type": _nullable(_convert(field_type, where, field_name, inner)),
                    "default": None})
    return {"type": "record", "name": name, "namespace": namespace, "fields": out}


def _convert(spark: SparkType, path: str, name: str, namespace: str) -> Any:
    """The Avro schema of one Spark type (``name``: the record name a struct takes)."""
    if spark.name in PRIMITIVES:
        return PRIMITIVES[spark.name]
    if spark.name == "decimal":
        if spark.precision > MAX_PRECISION:
            raise AvroTypeError(path, f"decimal({spark.precision},{spark.scale}) has more than "
                                f"{MAX_PRECISION} digits")
        return {"type": "bytes", "logicalType": "decimal", "precision": spark.precision, "scale": spark.scale}
    if spark.name == "array":
        assert spark.element is not None
        return {"type": "array", "items": _nullable(_convert(spark.element, f"{path}[]", name, namespace))}
    if spark.name == "map":
        assert spark.key is not None and spark.value is not None
        if spark.key.name != "string":
            raise AvroTypeError(path, f"{spark.render()}: Avro map keys are strings, this map's are "
                                f"{spark.key.render()} (cast them to string)")
        return {"type": "map", "values": _nullable(_convert(spark.value, f"{path}{{}}", name, namespace))}
    if spark.name == "struct":
        return _record(name, namespace, spark.fields, path)
    what = "the type of a bare NULL (cast it)" if spark.name == "void" else spark.render()
    raise AvroTypeError(path, f"{what} has no Avro type")
