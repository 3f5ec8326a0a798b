"""Relations the compiler plans over: their columns, qualifiers, watermarks; column resolution."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from sluice.core.types import SparkType

_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_simple_identifier(name: str) -> bool:
    return bool(_SIMPLE.match(name))


@dataclass(frozen=True)
class Field:
    name: str
    type: SparkType
    qualifier: str | None = None

    def key(self) -> tuple[str | None, str]:
        return (self.qualifier.lower() if self.qualifier else None, self.name.lower())

    def display(self) -> str:
        return f"{self.qualifier}.{self.name}" if self.qualifier else self.name


@dataclass
class Relation:
    """The output of a step as the SQL above it sees it."""

    step_id: str
    fields: list[Field]
    alias: str | None = None
    #: keys (qualifier, name) of columns that carry an event-time watermark
    watermarks: set[tuple[str | None, str]] = field(default_factory=set)
    aggregated: bool = False
    joined: bool = False
    deduplicated: bool = False
    describe: str = ""

    @property
    def qualifiers(self) -> list[str]:
        quals = [f.qualifier for f in self.fields if f.qualifier]
        return list(dict.fromkeys(quals))

    def has_qualifier(self, name: str) -> bool:
        low = name.lower()
        if self.alias and self.alias.lower() == low and not self.qualifiers:
            return True
        return any(q.lower() == low for q in self.qualifiers)

    def fields_of(self, qualifier: str) -> list[Field]:
        if not self.qualifiers:
            return list(self.fields)
        return [f for f in self.fields if f.qualifier and f.qualifier.lower() == qualifier.lower()]

    def lookup(self, name: str, qualifier: str | None = None) -> list[Field]:
        pool = self.fields_of(qualifier) if qualifier is not None else self.fields
        return [f for f in pool if f.name.lower() == name.lower()]

    def is_watermarked(self, f: Field) -> bool:
        return f.key() in self.watermarks

    def label(self) -> str:
        return self.describe or (f"'{self.alias}'" if self.alias else "the input")


def ambiguity_hint(matches: list[Field]) -> str:
    """Where an ambiguous column exists, and how to qualify it."""
    quals = [m.qualifier or "?" for m in matches]
    return (
        "it exists in " + " and ".join(f"'{q}'" for q in quals)
        + f"; qualify it, e.g. '{quals[0]}.{matches[0].name}'"
    )


def did_you_mean(name: str, candidates: list[str]) -> str:
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{lowered[close[0]]}'?"
    if candidates and len(candidates) <= 12:
        return "; available: " + ", ".join(candidates)
    return ""
