"""Hand-built plans for classifier unit tests (independent of the compiler)."""

from __future__ import annotations

from typing import Any

from sluice.core.plan.model import Plan

ORDERS = [
    {"name": "order_id", "type": "string"},
    {"name": "customer", "type": "string"},
    {"name": "region", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "ts", "type": "timestamp"},
]


def source(
    name: str = "orders", topic: str = "orders", columns: list[dict[str, str]] | None = None, **kw: Any
) -> dict[str, Any]:
    cols = columns or ORDERS
    return {
        "type": "kafkaSourceV1",
        "id": f"source-{name}",
        "inputs": [],
        "schema": cols,
        "source": name,
        "topic": topic,
        "columns": cols,
        **kw,
    }


def sink(inp: str, schema: list[dict[str, str]], topic: str = "out", **kw: Any) -> dict[str, Any]:
    return {"type": "kafkaSinkV1", "id": "sink", "inputs": [inp], "schema": schema, "topic": topic, **kw}


def plan(steps: list[dict[str, Any]], settings: dict[str, Any] | None = None, **kw: Any) -> Plan:
    data = {"steps": steps, "outputSchema": steps[-1]["schema"], "settings": settings or {}, **kw}
    return Plan.from_dict(data).with_hash()


def agg_plan(
    group: str = "customer",
    fn: str = "count",
    arg: str = "*",
    extra: list[dict[str, Any]] | None = None,
    mode: str = "update",
    where: str | None = None,
    having: str | None = None,
    **sink_kw: Any,
) -> Plan:
    aggs = [{"name": "v", "function": fn, "args": [arg] if arg else [], "expr": f"{fn}({arg})"}]
    aggs += extra or []
    vtype = {"count": "bigint", "sum": "double", "avg": "double", "min": "double", "max": "double"}
    schema = [{"name": group, "type": "string"}] + [
        {"name": a["name"], "type": vtype[a["function"]]} for a in aggs
    ]
    steps: list[dict[str, Any]] = [source()]
    prev = "source-orders"
    if where:
        steps.append(
            {"type": "filterV1", "id": "filter-1", "inputs": [prev], "schema": ORDERS, "condition": where}
        )
        prev = "filter-1"
    steps.append(
        {
            "type": "aggregateV1",
            "id": "aggregate-1",
            "inputs": [prev],
            "schema": schema,
            "keys": [{"name": group, "expr": group}],
            "aggregates": aggs,
        }
    )
    prev = "aggregate-1"
    if having:
        steps.append(
            {"type": "filterV1", "id": "filter-2", "inputs": [prev], "schema": schema, "condition": having}
        )
        prev = "filter-2"
    steps.append(sink(prev, schema, outputMode=mode, **sink_kw))
    return plan(steps)


def stateless_plan(
    exprs: list[tuple[str, str, str]] | None = None, where: str = "amount > 10", **sink_kw: Any
) -> Plan:
    exprs = exprs or [("order_id", "order_id", "string"), ("amount", "amount", "double")]
    schema = [{"name": n, "type": t} for n, _, t in exprs]
    return plan(
        [
            source(),
            {
                "type": "filterV1",
                "id": "filter-1",
                "inputs": ["source-orders"],
                "schema": ORDERS,
                "condition": where,
            },
            {
                "type": "projectV1",
                "id": "project-1",
                "inputs": ["filter-1"],
                "schema": schema,
                "expressions": [{"name": n, "expr": e} for n, e, _ in exprs],
            },
            sink("project-1", schema, **sink_kw),
        ]
    )


def join_plan(join_type: str = "inner", left_key: str = "o.customer", right_key: str = "p.customer") -> Plan:
    pay = [
        {"name": "customer", "type": "string"},
        {"name": "paid", "type": "double"},
        {"name": "pts", "type": "timestamp"},
        {"name": "order_id", "type": "string"},
    ]
    joined = [{**f, "qualifier": "o"} for f in ORDERS] + [{**f, "qualifier": "p"} for f in pay]
    out = [{"name": "order_id", "type": "string"}, {"name": "paid", "type": "double"}]
    return plan(
        [
            source(),
            source("payments", "payments", pay),
            {
                "type": "watermarkV1",
                "id": "watermark-orders",
                "inputs": ["source-orders"],
                "schema": ORDERS,
                "column": "ts",
                "delay": "1 minute",
            },
            {
                "type": "watermarkV1",
                "id": "watermark-payments",
                "inputs": ["source-payments"],
                "schema": pay,
                "column": "pts",
                "delay": "1 minute",
            },
            {
                "type": "streamStreamJoinV1",
                "id": "join-1",
                "inputs": ["watermark-orders", "watermark-payments"],
                "schema": joined,
                "joinType": join_type,
                "leftAlias": "o",
                "rightAlias": "p",
                "keys": [{"left": left_key, "right": right_key}],
                "timeCondition": "p.pts BETWEEN o.ts AND o.ts + INTERVAL 10 MINUTES",
                "condition": f"{left_key} = {right_key} AND "
                "p.pts BETWEEN o.ts AND o.ts + INTERVAL 10 MINUTES",
            },
            {
                "type": "projectV1",
                "id": "project-1",
                "inputs": ["join-1"],
                "schema": out,
                "expressions": [
                    {"name": "order_id", "expr": "o.order_id"},
                    {"name": "paid", "expr": "p.paid"},
                ],
            },
            sink("project-1", out, outputMode="append"),
        ]
    )
