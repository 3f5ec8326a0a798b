"""Parsing the query text with sqlglot (Spark dialect), keeping positions for error messages."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokens import TokenType

from sluice.core.compiler.sqltext import SqlText
from sluice.core.compiler.syntax import check_lists, empty_sql, join_split_keywords, parse_error

_DIALECT = Dialect.get_or_raise("spark")


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


class _SpanParser(SparkParser):
    """Spark's sqlglot parser that also records where data types and intervals start: sqlglot keeps
    no position for them (``meta["span_start"]``/``["span_end"]``, offsets into the SQL)."""

    def _parse_types(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
        start = self._index
        return self._spanned(start, super()._parse_types(*args, **kwargs))

    def _parse_interval(self, *args: Any, **kwargs: Any) -> Any:
        start = self._index
        return self._spanned(start, super()._parse_interval(*args, **kwargs))

    def _spanned(self, start: int, node: Any) -> Any:
        if isinstance(node, exp.Expr) and start < self._index <= len(self._tokens):
            first = self._tokens[start]
            # tokens the tokenizer made up (the BIGINT of the literal 2L) do not spell the SQL text
            if self.sql[first.start : first.end + 1].lower() == first.text.lower():
                node.meta.setdefault("span_start", first.start)
                node.meta.setdefault("span_end", self._tokens[self._index - 1].end)
        return node


class _QuietSqlglot(logging.Filter):
    """Drops sqlglot's warnings (e.g. "Falling back to parsing as a 'Command'") while we parse:
    every problem is reported as a located error instead."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "active", False) or record.levelno > logging.WARNING


_QUIET = _QuietSqlglot()


@contextmanager
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("sqlglot")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
    previous = getattr(_QUIET.local, "active", False)
    _QUIET.local.active = True
    try:
        yield
    finally:
        _QUIET.local.active = previous


def parse_sql(sql: str) -> tuple[exp.Expr, SqlText]:
    """Parse exactly one statement; raise SqlFailure for empty, unparseable or several statements."""
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as exc:
        opener = _unterminated(sql)
        if opener is not None:
            kind = {"'": "string", '"': "string", "`": "quoted identifier", "/": "comment"}[sql[opener]]
            raise SqlText(sql, []).fail(f"this {kind} is never closed", offset=opener) from exc
        reason = str(exc).split(". Line", 1)[0].rstrip(".")
        raise SqlText(sql, []).fail(f"the SQL cannot be read: {reason}", offset=0) from exc
    if not [t for t in tokens if t.token_type != TokenType.SEMICOLON]:
        raise empty_sql()
    tokens = join_split_keywords(sql, tokens)
    text = SqlText(sql, tokens)
    # Spark's window(...) function collides with the WINDOW clause keyword: a WINDOW token that is
    # directly followed by '(' is a function call.
    for i, tok in enumerate(tokens[:-1]):
        if tok.token_type == TokenType.WINDOW and tokens[i + 1].token_type == TokenType.L_PAREN:
            tok.token_type = TokenType.VAR
    try:
        with _quiet():
            statements = _SpanParser(dialect=_DIALECT).parse(tokens, sql)
    except ParseError as exc:
        raise parse_error(text, exc) from exc
    check_lists(text)
    # a comment after the last ';' comes back as a Semicolon "statement": it is not one
    found = [s for s in statements if s is not None and not isinstance(s, exp.Semicolon)]
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
            offset=offset if offset is not None else first_semi,
        )
    if not found:
        raise empty_sql()
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
