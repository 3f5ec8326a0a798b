"""Orders in Avro for the tests of Avro sources: the record schema (v1, and v2 with a field added
with a default: BACKWARD compatible, a newer writer schema for a v1 reader) and orders one second
apart from ``START``, four customers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any


def order_schema(*extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        *extra,
    ]}


ORDER_V1 = order_schema()
ORDER_V2 = order_schema({"name": "coupon", "type": ["null", "string"], "default": None})
START = datetime(2026, 1, 1, 10, tzinfo=UTC)


def orders(n: int, start: int = 0, coupon: bool = False) -> list[dict[str, Any]]:
    """Orders ``start`` .. ``start + n - 1`` (``coupon``: with the v2 field)."""
    out = []
    for i in range(start, start + n):
        rec: dict[str, Any] = {"order_id": f"o{i}", "customer": f"c{i % 4}", "amount": float(i % 17),
                               "ts": START + timedelta(seconds=i)}
        if coupon:
            rec["coupon"] = f"k{i}"
        out.append(rec)
    return out
