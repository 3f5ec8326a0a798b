"""Expanding ``*`` and ``alias.*`` in a SELECT list, with Spark's ``* EXCEPT (columns)``."""

from __future__ import annotations

from sqlglot import exp

from sluice.core.compiler.scope import Field, Relation, ambiguity_hint, did_you_mean
from sluice.core.compiler.sqltext import SqlText


def star_fields(text: SqlText, star: exp.Star, rel: Relation, fields: list[Field]) -> list[Field]:
    """The columns a star selects: ``fields`` minus the columns its EXCEPT list names."""
    for key, word in (("replace", "REPLACE"), ("rename", "RENAME"), ("ilike", "ILIKE")):
        if star.args.get(key):
            raise text.fail(
                f"* {word} is not Spark SQL; Spark only supports * EXCEPT (columns)",
                star.args[key][0] if isinstance(star.args[key], list) else star.args[key],
                text.word_offset(word.lower()),
            )
    dropped: list[Field] = []
    for column in star.args.get("except_") or []:
        found = _excluded(text, column, rel, fields)
        if found in dropped:
            raise text.fail(
                f"column '{found.display()}' is listed twice in * EXCEPT (...); list each column once",
                column,
            )
        dropped.append(found)
    return [f for f in fields if f not in dropped]


def _excluded(text: SqlText, column: exp.Expr, rel: Relation, fields: list[Field]) -> Field:
    parts = (
        [p for p in column.parts if isinstance(p, exp.Identifier)] if isinstance(column, exp.Column) else []
    )
    if not parts:
        raise text.fail("* EXCEPT (...) lists column names only", column)
    qualifier: str | None = None
    if len(parts) >= 2 and rel.has_qualifier(parts[0].name):
        qualifier, parts = parts[0].name, parts[1:]
    name = parts[0]
    pool = [
        f
        for f in fields
        if f.name.lower() == name.name.lower()
        and (qualifier is None or f.qualifier is None or f.qualifier.lower() == qualifier.lower())
    ]
    if not pool:
        raise text.fail(
            f"column '{name.name}' in * EXCEPT (...) is not one of the columns the star selects"
            + did_you_mean(name.name, list(dict.fromkeys(f.name for f in fields))),
            name,
        )
    if len(pool) > 1:
        raise text.fail(f"column '{name.name}' in * EXCEPT (...) is ambiguous: {ambiguity_hint(pool)}", name)
    if len(parts) > 1:
        raise text.fail(
            f"excluding a struct field ('{'.'.join(p.name for p in parts)}') with * EXCEPT is not "
            f"supported yet; exclude the whole column '{pool[0].name}' and select the fields you need",
            parts[1],
        )
    return pool[0]
