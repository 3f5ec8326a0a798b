"""Parsing the query text with sqlglot (Spark dialect), keeping positions for error messages."""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from sluice.core.errors import Problem

SQL_FIELD = "spec.sql"
_DIALECT = Dialect.get_or_raise("spark")


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

    def problem(self, message: str, node: exp.Expr | None = None, offset: int | None = None) -> Problem:
        if offset is None:
            offset = self.node_offset(node)
        if offset is None:
            return Problem(message, field=SQL_FIELD)
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


def _unterminated(sql: str) -> int | None:
    """Offset of the opening quote (or comment) that is never closed, if any."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                return i
            i = end + 2
        elif ch in "'\"`":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" and ch != "`" else 1
            if j >= n:
                return i
            i = j + 1
        else:
            i += 1
    return None


def parse_sql(sql: str) -> tuple[exp.Expr, SqlText]:
    """Parse exactly one statement; raise SqlFailure for empty, unparseable or several statements."""
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as exc:
        opener = _unterminated(sql)
        if opener is not None:
            kind = {"'": "string", '"': "string", "`": "quoted identifier", "/": "comment"}[sql[opener]]
            line, column = SqlText(sql, []).line_col(opener)
            raise SqlFailure(
                Problem(f"this {kind} is never closed", field=SQL_FIELD, line=line, column=column)
            ) from exc
        raise SqlFailure(Problem(f"the SQL cannot be read: {exc}", field=SQL_FIELD)) from exc
    text = SqlText(sql, tokens)
    if not [t for t in tokens if t.token_type != TokenType.SEMICOLON]:
        raise SqlFailure(
            Problem("the SQL is empty; write one SELECT statement over the sources", field=SQL_FIELD)
        )
    # Spark's window(...) function collides with the WINDOW clause keyword: a WINDOW token that is
    # directly followed by '(' is a function call.
    for i, tok in enumerate(tokens[:-1]):
        if tok.token_type == TokenType.WINDOW and tokens[i + 1].token_type == TokenType.L_PAREN:
            tok.token_type = TokenType.VAR
    try:
        statements = _DIALECT.parser().parse(tokens, sql)
    except ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        err_line, err_col = err.get("line"), err.get("col")
        highlight = err.get("highlight") or ""
        description = str(err.get("description") or exc).rstrip(".")
        missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)
        if missing:
            description = f"the {missing.group(1).upper()} clause is incomplete"
        if err_line is not None and err_col is not None:
            col = max(1, int(err_col) - len(highlight) + 1)
            near = f" near {highlight!r}" if highlight else ""
            raise SqlFailure(
                Problem(
                    f"syntax error{near}: {description[0].lower()}{description[1:]}",
                    field=SQL_FIELD,
                    line=int(err_line),
                    column=col,
                )
            ) from exc
        raise SqlFailure(Problem(f"syntax error: {description}", field=SQL_FIELD)) from exc
    found = [s for s in statements if s is not None]
    if len(found) > 1:
        # position: the first token of the second statement
        first_semi = text.token_offset(TokenType.SEMICOLON)
        offset = None
        if first_semi is not None:
            for tok in tokens:
                if tok.start > first_semi and tok.token_type != TokenType.SEMICOLON:
                    offset = tok.start
                    break
        raise text.fail(
            f"the SQL holds {len(found)} statements; a StreamingQuery runs exactly one SELECT",
            offset=offset,
        )
    if not found:
        raise SqlFailure(
            Problem("the SQL is empty; write one SELECT statement over the sources", field=SQL_FIELD)
        )
    root = found[0]
    if not isinstance(root, exp.Select | exp.SetOperation | exp.Subquery):
        kind = tokens[0].text.upper()
        article = "an" if kind[:1] in "AEIOU" else "a"
        raise text.fail(
            f"only SELECT queries are supported, but the SQL is {article} {kind} statement; "
            "the sink is declared in spec.sink",
            offset=tokens[0].start,
        )
    return root, text
