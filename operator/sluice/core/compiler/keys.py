"""Record keys in the compiler (``keyFormat``, issue 30): the key's columns of a source, and the format
a sink writes its key columns in.

A source whose key is read (any ``keyFormat`` but ``string``, or a ``string`` key with ``keySchema``)
has the key's columns before the value's: ``SELECT *`` gives them first, as ksqlDB's key columns. A key
column and a value column of the same name in SQL (compared without case, as Spark SQL does) are
refused, naming the key column: the columns of one source share one namespace. ``keyPrefix`` puts a
prefix before the key columns' names in SQL (Flink's ``key.fields-prefix``); the plan's ``keyColumns``
keep the key's own field names. A ``string`` key without
``keySchema`` is not read, and its plan is what it was before the field existed.

A sink's key columns are written as before for ``string`` (one column as text, several as a JSON
object; the plan carries no ``keyFormat``), as a JSON object for ``json``, an Avro record for ``avro``
or a Protobuf message for ``protobuf`` (its schema derived from the key columns as a value schema is,
pinned in the sink step's ``keySchema`` under the subject ``<topic>-key`` unless ``keySubject``), and
with Kafka's own serializers for ``kafka:<type>`` (one column, of a type that fits).
"""

from __future__ import annotations

from sluice.core.compiler.registry import derived_schema, schema_kind
from sluice.core.errors import Problem
from sluice.core.plan.model import FieldSpec, KeyFormat, RegistrySchema
from sluice.core.spec import PRIMITIVE_KEY_TYPES, QuerySpec, Source
from sluice.core.types import TypeParseError, normalize_type

__all__ = ["SINK_KEY_TYPES", "key_problems", "plan_key_format", "sink_key_problems", "sink_key_schema"]

#: the Spark SQL types a sink's ``kafka:<type>`` key column may have (written as that type)
SINK_KEY_TYPES: dict[str, tuple[str, ...]] = {
    "kafka:long": ("bigint", "int", "smallint", "tinyint"),
    "kafka:int": ("int", "smallint", "tinyint"),
    "kafka:short": ("smallint", "tinyint"),
    "kafka:double": ("double", "float"),
    "kafka:float": ("float",),
    "kafka:bytes": ("binary",),
    "kafka:uuid": ("string",),
}


def plan_key_format(source: Source) -> KeyFormat | None:
    """The source step's ``keyFormat``: None when the key is not read (the plan as before the field)."""
    return source.key_format if source.reads_key else None


def _normalized(text: str) -> str | None:
    try:
        return normalize_type(text)
    except TypeParseError:
        return None


def key_problems(source: Source, where: str) -> list[Problem]:
    """A source's key columns: types that parse, each name once, none a value column's name, and the
    one column of a primitive key of the format's type."""
    if not source.reads_key:
        return []
    problems: list[Problem] = []
    values = {c.name.lower() for c in source.columns}
    seen: set[str] = set()
    wanted = PRIMITIVE_KEY_TYPES.get(source.key_format)
    for j, column in enumerate(source.key_columns):
        at = f"{where}.keySchema[{j}]"
        name = column.name.lower()
        if name in seen:
            problems.append(Problem(
                f"key column '{column.name}' is declared twice in source '{source.name}'",
                field=f"{at}.name"))
        seen.add(name)
        in_sql = source.key_sql_name(column.name)
        if in_sql.lower() in values:
            named = f"'{column.name}'" if in_sql == column.name else f"'{column.name}' ('{in_sql}' in SQL)"
            problems.append(Problem(
                f"source '{source.name}': key column {named} has the name of a value column; the key's "
                "and the value's columns share one namespace in SQL (set keyPrefix, e.g. 'key_', to "
                "prefix the key's column names, or declare the value's columns without it)",
                field=f"{at}.name"))
        declared = _normalized(column.type)
        if declared is None:
            problems.append(Problem(f"key column '{column.name}': {column.type!r} is not a Spark SQL type",
                                    field=f"{at}.type"))
        elif wanted is not None and declared != wanted:
            problems.append(Problem(
                f"source '{source.name}': a {source.key_format} key is a {wanted} column, but key column "
                f"'{column.name}' is declared as {declared}", field=f"{at}.type"))
    return problems


def sink_key_problems(spec: QuerySpec, key: list[str], out: list[FieldSpec]) -> list[Problem]:
    """A ``kafka:<type>`` sink key column of a type the serializer cannot write."""
    allowed = SINK_KEY_TYPES.get(spec.sink.key_format)
    if allowed is None or len(key) != 1:
        return []
    found = next((f for f in out if f.name == key[0]), None)
    if found is None or found.type in allowed:
        return []
    return [Problem(f"a {spec.sink.key_format} key is written from a column of type {' or '.join(allowed)}, "
                    f"but the key column '{found.name}' is {found.type} (cast it)",
                    field="spec.sink.keyFormat")]


def sink_key_schema(spec: QuerySpec, key: list[str], out: list[FieldSpec]
                    ) -> tuple[RegistrySchema | None, list[Problem]]:
    """An avro or protobuf sink key's schema, derived from the key columns (a record, a message named
    ``<topic>_key``; None for any other key format)."""
    subject = spec.sink.key_registry_subject
    if subject is None:
        return None, []
    by_name = {f.name: f for f in out}
    columns = [by_name[k] for k in key if k in by_name]
    schema, why = derived_schema(columns, f"{spec.sink.topic}_key", subject, spec.sink.key_format, path="key")
    if why is not None:
        return None, [Problem(f"the key columns have no {schema_kind(spec.sink.key_format)} schema for sink "
                              f"topic '{spec.sink.topic}': {why}", field="spec.sink.keyFormat")]
    return schema, []
