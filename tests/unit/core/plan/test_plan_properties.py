"""Properties of compiled plans (hypothesis): JSON round-trip is the identity; the hash ignores
formatting, comments and keyword case, and changes under every semantic change.

Generated queries come in three shapes: a SELECT over one source (a projection, or an aggregation
with or without an event-time window), a stream-stream join and a UNION ALL."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.core.compiler import compile_query
from sluice.core.plan.model import Plan
from sluice.core.spec import QuerySpec

PAYMENTS = {
    "name": "payments",
    "topic": "payments",
    "schema": [
        {"name": "order_id", "type": "string"},
        {"name": "method", "type": "string"},
        {"name": "pts", "type": "timestamp"},
    ],
    "eventTime": {"column": "pts", "watermark": "2 minutes"},
}
KEYWORDS = {
    "select",
    "from",
    "where",
    "and",
    "group",
    "by",
    "having",
    "as",
    "window",
    "join",
    "left",
    "on",
    "between",
    "interval",
    "minutes",
    "union",
    "all",
}
NUMERIC = ["amount", "fee"]
STRINGS = ["order_id", "customer_id", "status"]
FUNCTIONS = ["sum", "max", "min", "avg"]
IDENTIFIERS = set(STRINGS + NUMERIC + FUNCTIONS) | {"ts", "orders", "count", "o", "p", "payments", "pts"}
SHAPES = ["select", "join", "union"]


def orders(delay: int) -> dict[str, Any]:
    return {
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
        "eventTime": {"column": "ts", "watermark": f"{delay} minutes"},
    }


@dataclass(frozen=True)
class Query:
    """The semantic content of a generated query (fields a shape does not use are ignored)."""

    shape: str
    columns: tuple[str, ...]
    factor: int
    threshold: int
    status: str
    numeric: str
    aggregate: str | None  # None: plain projection
    windowed: bool
    size: int  # window size in minutes
    slide: int | None  # window slide in minutes, < size
    keys: tuple[str, ...]  # grouping keys
    having: int | None
    bound: int  # join: minutes of the event-time range
    left: bool  # join: LEFT OUTER instead of INNER
    delay: int  # watermark delay of orders, in minutes
    topic: str
    keyed: bool  # the sink is keyed by the first key column
    mode_index: int

    def modes(self) -> list[str]:
        if self.shape == "join":
            return ["append"]
        if self.shape == "union" or self.aggregate is None:
            return ["append", "update"]
        return ["append", "update", "complete"] if self.windowed else ["update", "complete"]

    @property
    def mode(self) -> str:
        modes = self.modes()
        return modes[self.mode_index % len(modes)]

    def key_column(self) -> str:
        if self.shape == "select":
            return self.columns[0] if self.aggregate is None else self.keys[0]
        return "order_id"

    def window(self) -> list[str]:
        toks = ["window", "(", "ts", ",", f"'{self.size} minutes'"]
        if self.slide is not None:
            toks += [",", f"'{self.slide} minutes'"]
        return [*toks, ")"]

    def filters(self, prefix: str = "") -> list[str]:
        return [
            "where",
            prefix + self.numeric,
            ">",
            str(self.threshold),
            "and",
            prefix + "status",
            "=",
            f"'{self.status}'",
        ]

    def tokens(self) -> list[str]:
        if self.shape == "join":
            return self.join_tokens()
        if self.shape == "union":
            return self.union_tokens()
        toks = ["select"]
        if self.aggregate is None:
            for c in self.columns:
                toks += [c, ","]
            toks += [self.numeric, "*", str(self.factor), "as", "scaled"]
        else:
            if self.windowed:
                toks += [*self.window(), "as", "w", ","]
            for k in self.keys:
                toks += [k, ","]
            toks += [self.aggregate, "(", self.numeric, ")", "as", "total"]
        toks += ["from", "orders", *self.filters()]
        if self.aggregate is not None:
            toks += ["group", "by"]
            if self.windowed:
                toks += [*self.window(), ","]
            for i, k in enumerate(self.keys):
                toks += ([","] if i else []) + [k]
            if self.having is not None:
                toks += ["having", "count", "(", "*", ")", ">", str(self.having)]
        return toks

    def join_tokens(self) -> list[str]:
        join = ["left", "join"] if self.left else ["join"]
        return [
            *["select", "o.order_id", ",", f"o.{self.numeric}", "*", str(self.factor), "as", "scaled", ","],
            *["p.method", "from", "orders", "o", *join, "payments", "p"],
            *["on", "o.order_id", "=", "p.order_id", "and", "p.pts", "between", "o.ts", "and", "o.ts"],
            *["+", "interval", str(self.bound), "minutes"],
            *self.filters("o."),
        ]

    def union_tokens(self) -> list[str]:
        other = NUMERIC[1 - NUMERIC.index(self.numeric)]
        toks = ["select", "order_id", ",", self.numeric, "as", "v", "from", "orders", *self.filters()]
        toks += ["union", "all", "select", "order_id", ",", other, "*", str(self.factor), "as", "v"]
        return [*toks, "from", "orders", "where", "status", "=", f"'{self.status}'"]

    def spec(self, sql: str) -> QuerySpec:
        sources = [orders(self.delay)] + ([PAYMENTS] if self.shape == "join" else [])
        sink: dict[str, Any] = {"topic": self.topic, "outputMode": self.mode}
        if self.keyed:
            sink["key"] = [self.key_column()]
        return QuerySpec.model_validate({"sources": sources, "sql": sql, "sink": sink})


@st.composite
def queries(draw: st.DrawFn) -> Query:
    size = draw(st.integers(2, 10))
    return Query(
        shape=draw(st.sampled_from(SHAPES)),
        columns=tuple(draw(st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3, unique=True))),
        factor=draw(st.integers(1, 1000)),
        threshold=draw(st.integers(0, 10_000)),
        status=draw(st.sampled_from(["paid", "open", "shipped"])),
        numeric=draw(st.sampled_from(NUMERIC)),
        aggregate=draw(st.one_of(st.none(), st.sampled_from(FUNCTIONS))),
        windowed=draw(st.booleans()),
        size=size,
        slide=draw(st.one_of(st.none(), st.integers(1, size - 1))),
        keys=tuple(draw(st.lists(st.sampled_from(STRINGS), min_size=1, max_size=2, unique=True))),
        having=draw(st.one_of(st.none(), st.integers(1, 50))),
        bound=draw(st.integers(1, 60)),
        left=draw(st.booleans()),
        delay=draw(st.integers(1, 10)),
        topic=draw(st.sampled_from(["out", "revenue", "orders.enriched"])),
        keyed=draw(st.booleans()),
        mode_index=draw(st.integers(0, 2)),
    )


SEPARATORS = [" ", "  ", "\n", "\n    ", "\t", " /* note */ ", " -- comment\n"]
ENDINGS = ["", ";", " ;\n", "; -- the end", "\n-- bye\n"]


def plain(query: Query) -> str:
    return " ".join(query.tokens())


@st.composite
def reformatted(draw: st.DrawFn, query: Query) -> str:
    out = []
    for tok in query.tokens():
        if tok.lower() in KEYWORDS or any(part in IDENTIFIERS for part in tok.split(".")):
            tok = "".join(draw(st.sampled_from([c.lower(), c.upper()])) for c in tok)
        out.append(tok)
        out.append(draw(st.sampled_from(SEPARATORS)))  # also between GROUP and BY
    return "".join(out) + draw(st.sampled_from(ENDINGS))


def compile_sql(query: Query, sql: str) -> Plan:
    return compile_query(query.spec(sql))


@settings(max_examples=60, deadline=None)
@given(queries())
def test_json_round_trip_is_identity(query: Query) -> None:
    plan = compile_sql(query, plain(query))
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    assert again.compute_hash() == plan.hash


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_hash_ignores_formatting_comments_and_case(data: st.DataObject) -> None:
    query = data.draw(queries())
    sql = data.draw(reformatted(query))
    assert compile_sql(query, sql).hash == compile_sql(query, plain(query)).hash


def _sink_changes(query: Query) -> list[Query]:
    changes = [
        replace(query, topic=query.topic + "-v2"),
        replace(query, keyed=not query.keyed),
        replace(query, delay=query.delay + 1),
    ]
    if len(query.modes()) > 1:
        changes.append(replace(query, mode_index=query.modes().index(query.mode) + 1))
    return changes


def _changes(query: Query) -> list[Query]:
    other_numeric = NUMERIC[1 - NUMERIC.index(query.numeric)]
    changes = [
        replace(query, threshold=query.threshold + 1),
        replace(query, status=query.status + "x"),
        replace(query, numeric=other_numeric),
        *_sink_changes(query),
    ]
    if query.shape == "join":
        changes += [
            replace(query, factor=query.factor + 1),
            replace(query, bound=query.bound + 1),
            replace(query, left=not query.left),
        ]
    elif query.shape == "union":
        changes.append(replace(query, factor=query.factor + 1))
    elif query.aggregate is None:
        changes.append(replace(query, factor=query.factor + 1))
        extra = [c for c in STRINGS if c not in query.columns]
        if extra:
            changes.append(replace(query, columns=(*query.columns, extra[0])))
    else:
        changes.append(replace(query, aggregate=FUNCTIONS[(FUNCTIONS.index(query.aggregate) + 1) % 4]))
        changes.append(replace(query, having=(query.having or 0) + 1))
        extra = [c for c in STRINGS if c not in query.keys]
        changes.append(replace(query, keys=(*query.keys, extra[0]) if extra else query.keys[:1]))
        if query.windowed:
            changes.append(replace(query, size=query.size + 1))
            changes.append(replace(query, slide=1 if query.slide is None else None))
    return changes


@settings(max_examples=40, deadline=None)
@given(queries())
def test_hash_changes_under_semantic_changes(query: Query) -> None:
    base = compile_sql(query, plain(query)).hash
    for changed in _changes(query):
        assert compile_sql(changed, plain(changed)).hash != base, changed
