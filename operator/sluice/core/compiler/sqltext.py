"""The query text with its tokens: turns nodes and offsets into located problems (SqlFailure)."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from sluice.core.errors import Problem

SQL_FIELD = "spec.sql"


class SqlFailure(Exception):
    """Raised inside the compiler to stop at the first SQL problem."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class SqlText:
    """The SQL text with its tokens: turns offsets and nodes into 1-based line/column."""

    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens

    def line_col(self, offset: int) -> tuple[int, int]:
        line = self.sql.count("\n", 0, offset) + 1
        last_nl = self.sql.rfind("\n", 0, offset)
        return line, offset - last_nl

    def node_offset(self, node: exp.Expr | None) -> int | None:
        if node is None:
            return None
        for sub in node.walk():
            start = sub.meta.get("start") if sub.meta else None
            if start is not None:
                return int(start)
        return None

    def located_offset(self, node: exp.Expr | None) -> int | None:
        """The node's position, else where its recorded span starts, else its nearest located parent."""
        current = node
        while current is not None:
            offset = self.node_offset(current)
            if offset is None and current.meta.get("span_start") is not None:
                offset = int(current.meta["span_start"])
            if offset is not None:
                return offset
            current = current.parent
        return None

    def problem(self, message: str, node: exp.Expr | None = None, offset: int | None = None) -> Problem:
        if offset is None:
            offset = self.located_offset(node)
        if offset is None:
            # every SQL problem is located: fall back to the start of the statement
            offset = self.tokens[0].start if self.tokens else 0
        line, column = self.line_col(offset)
        return Problem(message, field=SQL_FIELD, line=line, column=column)

    def fail(self, message: str, node: exp.Expr | None = None, offset: int | None = None) -> SqlFailure:
        return SqlFailure(self.problem(message, node, offset))

    def source_text(self, node: exp.Expr) -> str:
        """The text of the node's own token as the user wrote it (e.g. a function name)."""
        meta = node.meta or {}
        if meta.get("start") is not None and meta.get("end") is not None:
            return self.sql[int(meta["start"]) : int(meta["end"]) + 1]
        return node.sql(dialect="spark")

    def token_offset(self, *types: TokenType, after: int = -1) -> int | None:
        """Offset of the first token of one of ``types`` starting after ``after``."""
        for tok in self.tokens:
            if tok.token_type in types and tok.start > after:
                return tok.start
        return None

    def word_offset(self, word: str, after: int = -1) -> int | None:
        for tok in self.tokens:
            if tok.text.lower() == word and tok.start > after:
                return tok.start
        return None
