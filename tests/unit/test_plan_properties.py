"""Properties of compiled plans (hypothesis): JSON round-trip is the identity; the hash ignores
formatting, comments and keyword case, and changes under every semantic change."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.core.compiler import compile_query
from sluice.core.plan.model import Plan
from sluice.core.spec import QuerySpec

SOURCES = [
    {
        "name": "orders",
        "topic": "orders",
        "schema": [
            {"name": "order_id", "type": "string"},
            {"name": "customer_id", "type": "string"},
            {"name": "status", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "fee", "type": "double"},
            {"name": "quantity", "type": "int"},
            {"name": "ts", "type": "timestamp"},
        ],
        "eventTime": {"column": "ts", "watermark": "1 minute"},
    }
]
KEYWORDS = {"select", "from", "where", "and", "group", "by", "having", "as", "window"}
NUMERIC = ["amount", "fee"]
STRINGS = ["order_id", "customer_id", "status"]
FUNCTIONS = ["sum", "max", "min", "avg"]


@dataclass(frozen=True)
class Query:
    """The semantic content of a generated query."""

    columns: tuple[str, ...]
    factor: int
    threshold: int
    status: str
    numeric: str
    aggregate: str | None  # None: plain projection
    windowed: bool
    having: int | None

    def tokens(self) -> list[str]:
        toks = ["select"]
        if self.aggregate is None:
            for c in self.columns:
                toks += [c, ","]
            toks += [self.numeric, "*", str(self.factor), "as", "scaled"]
        else:
            if self.windowed:
                toks += ["window", "(", "ts", ",", "'5 minutes'", ")", "as", "w", ","]
            toks += ["customer_id", ",", self.aggregate, "(", self.numeric, ")", "as", "total"]
        toks += [
            "from",
            "orders",
            "where",
            self.numeric,
            ">",
            str(self.threshold),
            "and",
            "status",
            "=",
            f"'{self.status}'",
        ]
        if self.aggregate is not None:
            toks += ["group", "by"]
            if self.windowed:
                toks += ["window", "(", "ts", ",", "'5 minutes'", ")", ","]
            toks += ["customer_id"]
            if self.having is not None:
                toks += ["having", "count", "(", "*", ")", ">", str(self.having)]
        return toks

    def spec(self, sql: str) -> QuerySpec:
        mode = "append" if self.windowed or self.aggregate is None else "update"
        return QuerySpec.model_validate(
            {"sources": SOURCES, "sql": sql, "sink": {"topic": "out", "outputMode": mode}}
        )


queries = st.builds(
    Query,
    columns=st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3, unique=True).map(tuple),
    factor=st.integers(1, 1000),
    threshold=st.integers(0, 10_000),
    status=st.sampled_from(["paid", "open", "shipped"]),
    numeric=st.sampled_from(NUMERIC),
    aggregate=st.one_of(st.none(), st.sampled_from(FUNCTIONS)),
    windowed=st.booleans(),
    having=st.one_of(st.none(), st.integers(1, 50)),
)

SEPARATORS = [" ", "  ", "\n", "\n    ", "\t", " /* note */ ", " -- comment\n"]


def plain(query: Query) -> str:
    return " ".join(query.tokens())


@st.composite
def reformatted(draw: st.DrawFn, query: Query) -> str:
    out = []
    for tok in query.tokens():
        if tok.lower() in KEYWORDS or (tok in STRINGS + NUMERIC + FUNCTIONS + ["ts", "orders", "count"]):
            tok = "".join(draw(st.sampled_from([c.lower(), c.upper()])) for c in tok)
        out.append(tok)
        # sqlglot reads GROUP BY as one token: a comment between the two words is not supported
        choices = SEPARATORS[:5] if tok.lower() == "group" else SEPARATORS
        out.append(draw(st.sampled_from(choices)))
    return "".join(out)


def compile_sql(query: Query, sql: str) -> Plan:
    return compile_query(query.spec(sql))


@settings(max_examples=60, deadline=None)
@given(queries)
def test_json_round_trip_is_identity(query: Query) -> None:
    plan = compile_sql(query, plain(query))
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    assert again.compute_hash() == plan.hash


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hash_ignores_formatting_comments_and_case(data: st.DataObject) -> None:
    query = data.draw(queries)
    sql = data.draw(reformatted(query))
    assert compile_sql(query, sql).hash == compile_sql(query, plain(query)).hash


def _changes(query: Query) -> list[Query]:
    other_numeric = NUMERIC[1 - NUMERIC.index(query.numeric)]
    changes = [
        replace(query, threshold=query.threshold + 1),
        replace(query, status=query.status + "x"),
        replace(query, numeric=other_numeric),
    ]
    if query.aggregate is None:
        changes.append(replace(query, factor=query.factor + 1))
        extra = [c for c in STRINGS if c not in query.columns]
        if extra:
            changes.append(replace(query, columns=(*query.columns, extra[0])))
    else:
        changes.append(replace(query, aggregate=FUNCTIONS[(FUNCTIONS.index(query.aggregate) + 1) % 4]))
        changes.append(replace(query, having=(query.having or 0) + 1))
    return changes


@settings(max_examples=40, deadline=None)
@given(queries)
def test_hash_changes_under_semantic_changes(query: Query) -> None:
    base = compile_sql(query, plain(query)).hash
    for changed in _changes(query):
        assert compile_sql(changed, plain(changed)).hash != base, changed
