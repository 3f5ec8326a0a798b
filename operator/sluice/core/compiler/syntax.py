"""Token-level syntax the Spark parser enforces but sqlglot does not, and readable parse errors."""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from sluice.core.compiler.casts import unknown_type_message
from sluice.core.compiler.sqltext import SQL_FIELD, SqlFailure, SqlText
from sluice.core.errors import Problem

_KEYWORDS = Dialect.get_or_raise("spark").tokenizer_class.KEYWORDS
# keywords of two words that sqlglot's tokenizer only recognizes when just whitespace separates them
_SPLIT_KEYWORDS = {
    tuple(words.split()): _KEYWORDS[words]
    for words in ("GROUP BY", "ORDER BY", "SORT BY", "CLUSTER BY", "DISTRIBUTE BY", "PARTITION BY")
    if words in _KEYWORDS
}
# tokens after which a list (SELECT list, function arguments, GROUP BY keys) cannot continue
_LIST_END = {
    TokenType.FROM,
    TokenType.WHERE,
    TokenType.GROUP_BY,
    TokenType.HAVING,
    TokenType.ORDER_BY,
    TokenType.LIMIT,
    TokenType.UNION,
    TokenType.INTERSECT,
    TokenType.EXCEPT,
    TokenType.SEMICOLON,
    TokenType.R_PAREN,
}
_SELECT_QUANTIFIERS = {TokenType.DISTINCT, TokenType.ALL}


def join_split_keywords(sql: str, tokens: list[Token]) -> list[Token]:
    """``GROUP /* why */ BY`` -> one GROUP BY token (the comment is kept on it, and dropped later)."""
    out: list[Token] = []
    for tok in tokens:
        prev = out[-1] if out else None
        if prev is not None and _is_word(sql, prev) and _is_word(sql, tok):
            joined = _SPLIT_KEYWORDS.get((prev.text.upper(), tok.text.upper()))
            if joined is not None:
                out[-1] = Token(
                    joined,
                    f"{prev.text} {tok.text}",
                    line=tok.line,
                    col=tok.col,
                    start=prev.start,
                    end=tok.end,
                    comments=[*prev.comments, *tok.comments],
                )
                continue
        out.append(tok)
    return out


def _is_word(sql: str, tok: Token) -> bool:
    """A bare (unquoted) word, as the tokenizer saw it."""
    return sql[tok.start : tok.end + 1].upper() == tok.text.upper() and tok.text.isalpha()


def check_lists(text: SqlText) -> None:
    """Refuse what Spark's parser refuses but sqlglot skips: empty SELECT lists, stray commas,
    an empty GROUP BY, ``* EXCEPT`` without parentheses."""
    tokens = text.tokens
    n = len(tokens)

    def at(i: int) -> Token | None:
        return tokens[i] if 0 <= i < n else None

    for i, tok in enumerate(tokens):
        kind = tok.token_type
        nxt = at(i + 1)
        if kind == TokenType.SELECT:
            j = i + 1
            while j < n and tokens[j].token_type in _SELECT_QUANTIFIERS:
                j += 1
            following = at(j)
            if following is None or following.token_type in _LIST_END:
                where = f"before {following.text.upper()}" if following is not None else "after SELECT"
                raise text.fail(
                    f"the SELECT list is empty: write the columns or expressions to select (or *) {where}",
                    offset=(following or tok).start,
                )
            if following.token_type == TokenType.COMMA:
                raise text.fail("the SELECT list starts with a comma; remove it", offset=following.start)
        elif kind == TokenType.COMMA:
            if nxt is None:
                raise text.fail(
                    "the SQL ends with a comma; remove it or write what should follow it",
                    offset=tok.start,
                )
            if nxt.token_type == TokenType.COMMA:
                raise text.fail(
                    "there are two commas here with nothing between them; remove one",
                    offset=nxt.start,
                )
            if nxt.token_type in _LIST_END:
                word = nxt.text if nxt.token_type == TokenType.R_PAREN else nxt.text.upper()
                raise text.fail(
                    f"this comma is followed by {word!r}, so the list ends with nothing after the comma; "
                    "remove the trailing comma",
                    offset=tok.start,
                )
        elif kind == TokenType.L_PAREN and nxt is not None and nxt.token_type == TokenType.COMMA:
            raise text.fail("a list cannot start with a comma; remove it", offset=nxt.start)
        elif kind == TokenType.GROUP_BY and (nxt is None or nxt.token_type in _LIST_END):
            raise text.fail("GROUP BY needs at least one grouping column or window(...)", offset=tok.start)
        elif kind == TokenType.STAR and nxt is not None and nxt.token_type == TokenType.EXCEPT:
            after = at(i + 2)
            if after is None or after.token_type != TokenType.L_PAREN:
                raise text.fail(
                    "* EXCEPT needs the excluded columns in parentheses: * EXCEPT (col1, col2)",
                    offset=nxt.start,
                )


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+.*?>")
_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>")
_ARITY = re.compile(
    r"The number of provided arguments \((\d+)\) is greater than the maximum number of supported "
    r"arguments \((\d+)\)"
)


def _describe_token(match: re.Match[str]) -> str:
    if match.group(1) == "SENTINEL":
        return "the end of the SQL"
    return repr(match.group(2))


def _error_token(text: SqlText, line: int, col: int) -> tuple[int, Token | None]:
    """The index and token sqlglot reported (it reports the line and the token's last column)."""
    for i, tok in enumerate(text.tokens):
        if tok.line == line and tok.col == col:
            return i, tok
    return -1, None


def _function_name(text: SqlText, index: int) -> Token | None:
    """The name token of the function call whose closing parenthesis is ``text.tokens[index]``."""
    depth = 0
    for i in range(index, -1, -1):
        kind = text.tokens[i].token_type
        if kind == TokenType.R_PAREN:
            depth += 1
        elif kind == TokenType.L_PAREN:
            depth -= 1
            if depth == 0:
                return text.tokens[i - 1] if i > 0 else None
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def parse_error(text: SqlText, exc: ParseError) -> SqlFailure:
    """A located, readable problem for a sqlglot parse error."""
    err = exc.errors[0] if exc.errors else {}
    err_line, err_col = err.get("line"), err.get("col")
    highlight = str(err.get("highlight") or "")
    description = str(err.get("description") or exc).rstrip(".")
    index, token = (-1, None)
    if err_line is not None and err_col is not None:
        index, token = _error_token(text, int(err_line), int(err_col))
    offset: int | None = token.start if token is not None else None
    if offset is None and err_line is not None and err_col is not None:
        offset = _offset_of(text.sql, int(err_line), max(1, int(err_col) - len(highlight) + 1))
    if offset is None:
        offset = text.tokens[-1].start if text.tokens else 0
    near = f" near {highlight!r}" if highlight else ""
    if description.startswith("Expected TYPE after CAST") and highlight:
        return text.fail(unknown_type_message(highlight), offset=offset)
    arity = _ARITY.match(description)
    if arity and token is not None:
        name = _function_name(text, index)
        if name is not None:
            given, most = int(arity.group(1)), int(arity.group(2))
            return text.fail(
                f"function '{name.text}' takes at most {_plural(most, 'argument')}, "
                f"but {given} {'is' if given == 1 else 'are'} given",
                offset=name.start,
            )
    missing = _MISSING.match(description)
    if missing:
        cls = getattr(exp, missing.group(1), None)
        name = _function_name(text, index) if token is not None else None
        if isinstance(cls, type) and issubclass(cls, exp.Func) and name is not None:
            return text.fail(
                f"function '{name.text}' is missing an argument; check the call's arguments",
                offset=name.start,
            )
        if cls is exp.Column:
            description = "a column name is missing"
        else:
            description = f"the {missing.group(1).upper()} clause is incomplete"
    if description.startswith("Invalid expression / Unexpected token"):
        what = f"{highlight!r} is not expected here" if highlight else "something is not expected here"
        return text.fail(f"syntax error: {what}", offset=offset)
    description = _TOKEN_REPR.sub(_describe_token, description)
    description = description.replace("Expected table name", "expected a source name")
    return text.fail(f"syntax error{near}: {description[0].lower()}{description[1:]}", offset=offset)


def _offset_of(sql: str, line: int, column: int) -> int | None:
    pos = 0
    for _ in range(line - 1):
        nl = sql.find("\n", pos)
        if nl < 0:
            return None
        pos = nl + 1
    return pos + column - 1


def empty_sql() -> SqlFailure:
    return SqlFailure(
        Problem(
            "the SQL is empty; write one SELECT statement over the sources",
            field=SQL_FIELD,
            line=1,
            column=1,
        )
    )
