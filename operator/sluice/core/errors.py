"""Errors of the pure core: every problem names a field and, for SQL, a line and column."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest or its SQL.

    ``field`` is a path into the manifest (``spec.sql``, ``spec.sources[0].schema[1].type``);
    ``line``/``column`` are 1-based positions within the SQL text when the problem is in the SQL
    (or within the manifest file when the problem is a YAML syntax error).
    """

    message: str
    field: str | None = None
    line: int | None = None
    column: int | None = None

    def render(self, file: str | None = None) -> str:
        """``FILE: line L, column C: message`` (parts that are unknown are left out)."""
        parts: list[str] = []
        if file:
            parts.append(file)
        if self.line is not None:
            where = f"line {self.line}"
            if self.column is not None:
                where += f", column {self.column}"
            parts.append(where)
        elif self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class SluiceError(ValueError):
    """Base class of user-facing errors carrying one or more problems."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.render() for p in problems))


class ManifestError(SluiceError):
    """The manifest is not a valid StreamingQuery (YAML, apiVersion/kind, spec fields)."""


class CompileError(SluiceError):
    """The SQL (or the query spec around it) does not compile into a plan."""
