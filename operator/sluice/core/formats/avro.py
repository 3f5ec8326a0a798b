"""Avro schemas as Spark SQL types: what a source of Avro records (issue 30) gives the plan.

:func:`to_spark` maps a parsed Avro schema (the JSON of a schema registry's ``schema`` string,
already decoded) to a :class:`SqlType`: the :class:`sluice.core.types.SparkType` the plan renders
into its ``schema: [{name, type}]`` (normalized DDL text, as for JSON sources), together with the
nullability at every level, which Spark's DDL text does not carry. :func:`columns` gives a record
schema's fields as the plan's :class:`sluice.core.plan.model.FieldSpec` columns.

The mapping is Spark's own (``from_avro``'s ``SchemaConverters``) where this module accepts a type:

=========================================  ==================================================
Avro                                        Spark SQL
=========================================  ==================================================
boolean, int, long, float, double           boolean, int, bigint, float, double
bytes, string                               binary, string
int + date                                  date
long + timestamp-millis / -micros           timestamp
long + local-timestamp-millis / -micros     timestamp_ntz
bytes or fixed + decimal(p, s)              decimal(p,s) (p at most 38)
record                                      struct<...> of its fields
array                                       array<items>
map (keys are always strings)               map<string,values>
enum                                        string
fixed                                       binary
union of null and one type                  that type, nullable
=========================================  ==================================================

Any other logical type is its underlying type (the Avro specification: a reader ignores a logical
type it does not know): ``uuid`` is a string, ``time-millis`` an int, ``time-micros`` and
``timestamp-nanos`` a bigint, ``duration`` binary. What has no Spark type is refused with an
:class:`AvroTypeError` naming the field's path (``value.address.kind``; ``[]`` is an array's
element, ``{}`` a map's value): ``null`` outside a union, a union of two types or more besides
null (Spark's ``from_avro`` would widen int and long, or make a struct of ``member0``,
``member1``...; a plan does not guess), a record that contains itself, an empty record, a decimal
Spark cannot hold, and whatever is not a valid Avro schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from sluice.core.plan.model import FieldSpec
from sluice.core.types import BIGINT, BOOLEAN, DATE, DOUBLE, INT, STRING, TIMESTAMP, SparkType

#: a parsed Avro schema: a type name, a union (list) or a schema object (dict)
AvroSchema = str | list[Any] | dict[str, Any]

FLOAT = SparkType("float")
BINARY = SparkType("binary")
TIMESTAMP_NTZ = SparkType("timestamp_ntz")
#: Spark's largest decimal precision
MAX_PRECISION = 38

PRIMITIVES: dict[str, SparkType] = {
    "boolean": BOOLEAN,
    "int": INT,
    "long": BIGINT,
    "float": FLOAT,
    "double": DOUBLE,
    "bytes": BINARY,
    "string": STRING,
}

#: (underlying type, logical type) -> Spark type; decimal is handled apart (it has parameters)
LOGICAL: dict[tuple[str, str], SparkType] = {
    ("int", "date"): DATE,
    ("long", "timestamp-millis"): TIMESTAMP,
    ("long", "timestamp-micros"): TIMESTAMP,
    ("long", "local-timestamp-millis"): TIMESTAMP_NTZ,
    ("long", "local-timestamp-micros"): TIMESTAMP_NTZ,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class AvroTypeError(ValueError):
    """An Avro schema (or a part of it) that has no Spark SQL type; ``path`` names the part
    (``value.address.kind``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class SqlField:
    """A field of a struct: its name and type."""

    name: str
    type: SqlType


@dataclass(frozen=True)
class SqlType:
    """A Spark SQL type with its nullability, as Spark reads the Avro type: ``spark`` is the type
    (what the plan renders, :attr:`ddl`); ``element`` (array), ``value`` (map) and ``fields``
    (struct) give the nullability of the parts."""

    spark: SparkType
    nullable: bool = False
    element: SqlType | None = None
    value: SqlType | None = None
    fields: tuple[SqlField, ...] = ()

    @property
    def ddl(self) -> str:
        """The normalized Spark DDL text (``struct<id:bigint,tags:array<string>>``)."""
        return self.spark.render()


def to_spark(schema: AvroSchema, path: str = "value") -> SqlType:
    """The Spark SQL type of a parsed Avro schema; :class:`AvroTypeError` naming the field's path
    (``path`` is the root's name) if it has none."""
    return _Converter().convert(schema, path, "")


def fields(schema: AvroSchema, path: str = "value") -> tuple[SqlField, ...]:
    """The fields of a record schema (nullable or not): a source's columns."""
    mapped = to_spark(schema, path)
    if mapped.spark.name != "struct":
        raise AvroTypeError(
            path, f"the schema is {mapped.ddl}, not a record: a source's columns are a record's fields"
        )
    return mapped.fields


def columns(schema: AvroSchema, path: str = "value") -> list[FieldSpec]:
    """A record schema's fields as the plan's columns (``schema: [{name, type}]``)."""
    return [FieldSpec(name=field.name, type=field.type.ddl) for field in fields(schema, path)]


def parse(text: str, path: str = "value") -> AvroSchema:
    """A schema's JSON text (as a registry returns it) parsed; :class:`AvroTypeError` if it is not
    JSON or not the shape of a schema."""
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise AvroTypeError(path, f"the schema is not JSON: {exc}") from exc
    if not isinstance(parsed, (str, list, dict)):
        raise AvroTypeError(path, f"not an Avro schema: {text.strip()[:60]}")
    return parsed


def max_fixed_precision(size: int) -> int:
    """The most decimal digits a fixed of ``size`` bytes holds (two's complement):
    floor(log10(2^(8 size - 1) - 1)), as the Avro specification gives it."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1 if size >= 1 else 0


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _describe(schema: Any) -> str:
    """A union branch, briefly, for messages: ``int``, ``record Address``, ``array``."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
            return f"{kind} {schema['name']}"
        if isinstance(kind, str):
            logical = schema.get("logicalType")
            return f"{kind} ({logical})" if isinstance(logical, str) else kind
    if isinstance(schema, list):
        return "a union"
    return json.dumps(schema)


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _is_null(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


class _Converter:
    """One schema's walk: the named types defined so far (a later reference reuses them) and the
    records being defined (a reference to one of them is a recursion)."""

    def __init__(self) -> None:
        self.defined: dict[str, SqlType] = {}
        self.open: set[str] = set()

    def convert(self, schema: Any, path: str, namespace: str) -> SqlType:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return SqlType(PRIMITIVES[schema])
            if schema == "null":
                raise AvroTypeError(path, "null has no Spark type outside a union with another type")
            return self.reference(schema, path, namespace)
        if isinstance(schema, list):
            return self.union(schema, path, namespace)
        if isinstance(schema, dict):
            return self.complex(schema, path, namespace)
        raise AvroTypeError(path, f"not an Avro schema: {json.dumps(schema)}")

    def reference(self, name: str, path: str, namespace: str) -> SqlType:
        for candidate in dict.fromkeys((_fullname(name, namespace), name)):
            if candidate in self.open:
                raise AvroTypeError(
                    path, f"record {candidate} contains itself: a recursive record has no Spark type"
                )
            if candidate in self.defined:
                return self.defined[candidate]
        raise AvroTypeError(path, f"unknown type {name!r} (not a primitive, nor a type defined before it)")

    def union(self, branches: list[Any], path: str, namespace: str) -> SqlType:
        if any(isinstance(branch, list) for branch in branches):
            raise AvroTypeError(path, "a union directly inside a union is not Avro")
        nulls = [branch for branch in branches if _is_null(branch)]
        others = [branch for branch in branches if not _is_null(branch)]
        if len(nulls) > 1:
            raise AvroTypeError(path, "a union lists null more than once")
        if not others:
            what = "an empty union" if not nulls else "a union of null alone"
            raise AvroTypeError(path, f"{what} has no Spark type")
        if len(others) > 1:
            names = [_describe(branch) for branch in others]
            raise AvroTypeError(path, f"a union of {_listing(names)} has no Spark type")
        mapped = self.convert(others[0], path, namespace)
        return replace(mapped, nullable=True) if nulls else mapped

    def complex(self, schema: dict[str, Any], path: str, namespace: str) -> SqlType:
        kind = schema.get("type")
        if kind is None:
            raise AvroTypeError(path, "a schema object needs a type")
        if isinstance(kind, (list, dict)):  # {"type": {...}}: the inner schema
            return self.convert(kind, path, namespace)
        if not isinstance(kind, str):
            raise AvroTypeError(path, f"not an Avro type: {json.dumps(kind)}")
        if kind in ("record", "error"):
            return self.record(schema, path, namespace)
        if kind == "enum":
            symbols = schema.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise AvroTypeError(path, "an enum needs a list of symbols")
            return self.define(schema, path, namespace, SqlType(STRING))
        if kind == "fixed":
            size = schema.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise AvroTypeError(path, "a fixed needs a size (a number of bytes)")
            mapped = self.decimal(schema, path, size) if schema.get("logicalType") == "decimal" else None
            return self.define(schema, path, namespace, mapped or SqlType(BINARY))
        if kind == "array":
            if "items" not in schema:
                raise AvroTypeError(path, "an array needs items")
            element = self.convert(schema["items"], f"{path}[]", namespace)
            return SqlType(SparkType("array", element=element.spark), element=element)
        if kind == "map":
            if "values" not in schema:
                raise AvroTypeError(path, "a map needs values")
            value = self.convert(schema["values"], f"{path}{{}}", namespace)
            return SqlType(SparkType("map", key=STRING, value=value.spark), value=value)
        if kind in PRIMITIVES:
            logical = schema.get("logicalType")
            if kind == "bytes" and logical == "decimal":
                return self.decimal(schema, path, None)
            return SqlType(LOGICAL.get((kind, str(logical)), PRIMITIVES[kind]))
        return self.convert(kind, path, namespace)  # "null", or a named type's name

    def decimal(self, schema: dict[str, Any], path: str, size: int | None) -> SqlType:
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not isinstance(precision, int) or isinstance(precision, bool) or precision < 1:
            raise AvroTypeError(path, "a decimal needs a precision (a positive integer)")
        if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= precision:
            raise AvroTypeError(path, f"decimal({precision},{scale}): the scale must be 0 to the precision")
        if precision > MAX_PRECISION:
            raise AvroTypeError(
                path, f"decimal({precision},{scale}) has no Spark type (precision {MAX_PRECISION} at most)"
            )
        if size is not None and precision > max_fixed_precision(size):
            raise AvroTypeError(path, f"decimal({precision},{scale}) does not fit a fixed of {size} bytes")
        return SqlType(SparkType("decimal", precision=precision, scale=scale))

    def define(self, schema: dict[str, Any], path: str, namespace: str, mapped: SqlType) -> SqlType:
        """Record a named type (enum, fixed; a record once its fields are mapped)."""
        self.defined[self.fullname(schema, path, namespace)] = mapped
        return mapped

    def fullname(self, schema: dict[str, Any], path: str, namespace: str) -> str:
        name = schema.get("name")
        if not isinstance(name, str) or not all(_NAME.match(part) for part in name.split(".")):
            raise AvroTypeError(path, f"a {schema.get('type')} needs a valid name, not {json.dumps(name)}")
        own = schema.get("namespace")
        full = _fullname(name, own if isinstance(own, str) else namespace)
        if full in self.defined or full in self.open:
            raise AvroTypeError(path, f"the type {full} is defined twice")
        return full

    def record(self, schema: dict[str, Any], path: str, namespace: str) -> SqlType:
        full = self.fullname(schema, path, namespace)
        declared = schema.get("fields")
        if not isinstance(declared, list):
            raise AvroTypeError(path, f"record {full} needs a list of fields")
        if not declared:
            raise AvroTypeError(path, f"record {full} has no fields: an empty struct has no Spark type")
        self.open.add(full)
        inner = full.rpartition(".")[0]
        mapped: list[SqlField] = []
        seen: dict[str, str] = {}
        for index, field in enumerate(declared):
            name = field.get("name") if isinstance(field, dict) else None
            if not isinstance(name, str) or not _NAME.match(name):
                raise AvroTypeError(
                    f"{path}.fields[{index}]", f"a field needs a valid name, not {json.dumps(name)}"
                )
            if name.lower() in seen:
                raise AvroTypeError(
                    f"{path}.{name}", f"record {full} has fields {seen[name.lower()]} and {name}, one column "
                    "to Spark SQL (names are case-insensitive)",
                )
            seen[name.lower()] = name
            if "type" not in field:
                raise AvroTypeError(f"{path}.{name}", "a field needs a type")
            mapped.append(SqlField(name, self.convert(field["type"], f"{path}.{name}", inner)))
        self.open.discard(full)
        result = SqlType(SparkType("struct", fields=tuple((f.name, f.type.spark) for f in mapped)),
                         fields=tuple(mapped))
        self.defined[full] = result
        return result
