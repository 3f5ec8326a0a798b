"""Input and output of the upgrade ground truth: the deterministic records, and output read as a
multiset or a table (see ``upgrade_harness``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "upgrades"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
N = 24
HALF = N // 2

Row = dict[str, Any]


# -- input -------------------------------------------------------------------------------------


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def order(i: int) -> Row:
    ts = BASE + timedelta(minutes=i % HALF, seconds=30 if i >= HALF else 0)
    return {
        "order_id": f"o{i:02d}",
        "customer": f"c{i % 3}",
        "seller": ("c0", "c1", "c1", "c2")[i % 4],
        "region": f"r{i % 2}",
        "amount": float(i % 5 + 1),
        "qty": i % 4 + 1,
        "ts": _iso(ts),
    }


def payment(i: int) -> Row:
    o = order(i)
    pts = datetime.fromisoformat(o["ts"]) + timedelta(minutes=1)
    return {"order_id": o["order_id"], "customer": o["customer"], "paid": o["amount"], "pts": _iso(pts)}


GENERATORS: dict[str, Callable[[int], Row]] = {"orders": order, "payments": payment}


def records(source: str, half: int, doc: dict[str, Any] | None = None) -> list[Row]:
    explicit = ((doc or {}).get("input") or {}).get("rows")
    if explicit is not None:
        return [dict(r) for r in (explicit.get(source) or {}).get("first" if half == 0 else "second", [])]
    rng = range(0, HALF) if half == 0 else range(HALF, N)
    return [GENERATORS[source](i) for i in rng]


# -- output normalisation ----------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float):
        return round(float(v), 9)
    if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and "T" in v:
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(UTC).isoformat()
        except ValueError:
            return v
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items() if x is not None))
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    return v


def canon(row: Row) -> tuple[Any, ...]:
    """A record as a comparable value; null fields are left out (``to_json`` omits them)."""
    return tuple(sorted((k, _norm(v)) for k, v in row.items() if v is not None))


def multiset(rows: list[Row]) -> Counter[tuple[Any, ...]]:
    return Counter(canon(r) for r in rows)


def _key(row: Row, key: list[str]) -> tuple[Any, ...]:
    return tuple(_norm(row.get(k)) for k in key)


def table(rows: list[Row], key: list[str], base: dict[Any, Row] | None = None) -> dict[Any, Row]:
    """Last value per key (update-mode output read as a table)."""
    out = dict(base or {})
    for r in rows:
        out[_key(r, key)] = dict(canon(r))
    return out
