"""Ground truth for the upgrade classifier: what Spark does when a corpus pair is forced in place.

For one pair (tests/corpus/upgrades/NN-name.yaml):
1. the old query runs (available-now) over the first half of a deterministic input and stops; its
   output must equal the plain-Python reference of the old query over the first half (exactly, as
   a multiset of records, whatever the output mode);
2. the second half is written, and the NEW query is started on the SAME checkpoint (in place);
3. its output is compared with the **correct in-place outcome**, computed in plain Python for every
   pair (``in_place_reference``): old rules for the records processed before the restart, new rules
   after, the state carried over *with its meaning* (see below), the watermark carried over.
   - ``in-place``/``none`` verdicts must give exactly that (``accepts``); anything else is a
     classifier bug (under-strict: ``wrong-result-in-place``).
   - ``replace``/``reject`` verdicts are justified only when Spark fails at the restart (``error``),
     keeps a pinned setting the plan changed (``silent-setting-ignored``), or produces something
     else than the correct in-place outcome (``silent-wrong-result``). Output equal to the correct
     in-place outcome means the change could have been applied in place: a classifier bug
     (over-strict), reported as ``accepts`` with ``Outcome.classifier_bug == "over-strict"``.
   With ``replace_outcomes=True`` (the evidence table) the two correct outcomes of a replace are
   also computed by running the new query on a fresh checkpoint, hand-off (second half only) and
   backfill (whole input), to say in the detail which one, if any, Spark's output equals.

The correct in-place outcome carries the state **in the new query's meaning**: what the new query's
state would hold if it had been fed the records the old query accepted before the restart (its
filters decided which), minus what the old rules already emitted and evicted. So a filter, a HAVING
or an output mode switches at the restart while every stateful operator keeps counting (``count``
per customer continues), but where the state's meaning changes (the grouping key, an aggregate
function, a window, a session gap, a join key or join type, the deduplicated columns, the source
topic) a correct in-place run would have to convert the state, and Spark, which reuses the state
rows as they are, cannot: that is what a replace verdict claims and what this harness checks.

Output compared: rows mode (``input.compare: rows``, append-only output): the multiset of records
after the restart. Table mode (``input.compare: table`` with ``input.key``): the output read as a
table (last value per key, the first run's table as the base) and the set of keys the second run
emitted, because a rate limit may split the second run into several micro-batches.

Input: by default the deterministic generators below (``order``/``payment``, 24 records split in
two halves). A pair can instead list its records per source and half in ``input.rows`` (``{source:
{first: [...], second: [...]}}``), designed so that the difference its rule is about shows. With
``input.newTopicCopiesOld: true``, a source topic that only the new plan reads is written the whole
input before the in-place restart (a migrated topic that holds the old topic's records plus the new
ones), and only the second half otherwise.

Harness-only tweak: every source's malformed policy is set to ``skip`` (no dead-letter query runs
alongside; the input has no malformed record).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from sluice.core.classify import classify
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan

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


# -- the correct in-place outcome, in plain Python ------------------------------------------------
#
# Every pair gets the output of the first run (old query over the first half) and the output a
# correct in-place restart gives after the restart (see the module docstring for what "correct"
# means when the state's meaning changes). Times: the generated input spans 00:00-00:11:30; designed
# inputs (``input.rows``) are chosen so that the watermark carried over by the checkpoint matters in
# a way that can be read off (comments per pair).

Ref = tuple[list[Row], list[Row]]
Pred = Callable[[Row], bool]


def _all(r: Row) -> bool:
    return True


def _t(r: Row, col: str = "ts") -> datetime:
    return datetime.fromisoformat(str(r[col]).replace("Z", "+00:00"))


def _oca(r: Row) -> Row:
    return {"order_id": r["order_id"], "customer": r["customer"], "amount": r["amount"]}


def _rows(rs: list[Row], cond: Pred, proj: Callable[[Row], Row]) -> list[Row]:
    return [proj(r) for r in rs if cond(r)]


def _stateless(
    f: list[Row],
    s: list[Row],
    old: tuple[Pred, Callable[[Row], Row]],
    new: tuple[Pred, Callable[[Row], Row]] | None = None,
) -> Ref:
    """A query without state: old rules on the first half, new rules on the second."""
    new = new or old
    return _rows(f, *old), _rows(s, *new)


@dataclass
class Agg:
    """``SELECT key AS key_name, <values> FROM orders WHERE where GROUP BY key HAVING having``."""

    key: Callable[[Row], Any] = lambda r: r["customer"]
    values: dict[str, Callable[[list[Row]], Any]] = field(default_factory=lambda: {"n": len})
    key_name: str = "customer"
    where: Pred = _all
    having: Callable[[Row], bool] = lambda out: True

    def row(self, k: Any, rs: list[Row]) -> Row:
        return {self.key_name: k, **{n: fn(rs) for n, fn in self.values.items()}}


def _update_agg(f: list[Row], s: list[Row], old: Agg, new: Agg | None = None) -> Ref:
    """An aggregation in update mode, one micro-batch per run.

    First run: every group of the first half (old WHERE, key, aggregates, HAVING). After the restart:
    every group (in the new meaning) that a second-half record passing the new WHERE updates, with its
    value over all records that entered the query: the first half under the old WHERE, the second
    under the new one (the state carried over in the new meaning), and the new HAVING.
    """
    new = new or old
    entered1 = [r for r in f if old.where(r)]
    entered2 = [r for r in s if new.where(r)]
    first = [
        old.row(k, [r for r in entered1 if old.key(r) == k]) for k in dict.fromkeys(map(old.key, entered1))
    ]
    second = [
        new.row(k, [r for r in entered1 + entered2 if new.key(r) == k])
        for k in dict.fromkeys(map(new.key, entered2))
    ]
    return [r for r in first if old.having(r)], [r for r in second if new.having(r)]


def _sum(col: str) -> Callable[[list[Row]], Any]:
    return lambda rs: sum(float(r[col]) for r in rs)


def _avg(col: str) -> Callable[[list[Row]], Any]:
    return lambda rs: sum(float(r[col]) for r in rs) / len(rs)


def _window(start: datetime, size: timedelta) -> dict[str, str]:
    return {"start": _iso(start), "end": _iso(start + size)}


def _tumbling(t: datetime, size: timedelta) -> datetime:
    return BASE + ((t - BASE) // size) * size


def _sliding(t: datetime, size: timedelta, slide: timedelta) -> list[datetime]:
    last = _tumbling(t, slide)
    return [last - i * slide for i in range(size // slide) if last - i * slide + size > t]


def _windows_update(
    f: list[Row], s: list[Row], size_min: int, slide_old: int, slide_new: int, per_customer: bool
) -> Ref:
    """Count per window (and customer) in update mode, no record late, no window evicted.

    After the restart: every window of the new slide that a second-half record falls in, counted over
    both halves (the state in the new meaning holds the first half's records in the new windows).
    """
    size = timedelta(minutes=size_min)

    def counts(rs: list[Row], slide: int, only: set[Any] | None = None) -> list[Row]:
        c: Counter[tuple[datetime, str]] = Counter()
        for r in rs:
            for w in _sliding(_t(r), size, timedelta(minutes=slide)):
                c[(w, r["customer"] if per_customer else "")] += 1
        return [
            {"w": _window(w, size), **({"customer": k} if per_customer else {}), "n": n}
            for (w, k), n in c.items()
            if only is None or (w, k) in only
        ]

    touched = {
        (w, r["customer"] if per_customer else "")
        for r in s
        for w in _sliding(_t(r), size, timedelta(minutes=slide_new))
    }
    return counts(f, slide_old), counts(f + s, slide_new, touched)


def _window_update_then_append(f: list[Row], s: list[Row], size_min: int, delay_min: int) -> Ref:
    """``count(*)`` per tumbling window and customer: update mode over the first run, append after.

    Old rules before the restart: update mode emits each group's count as it changes. New rules after:
    append mode emits every group once, with its final count, when the watermark (max event time -
    delay) passes the window's end. The input must be designed so that no record is late and no
    window is final after the first run (checked here).
    """
    size, delay = timedelta(minutes=size_min), timedelta(minutes=delay_min)
    wm1 = max(_t(r) for r in f) - delay
    assert all(_tumbling(_t(r), size) + size > wm1 for r in f), (
        "a window is already final after the first run"
    )
    assert all(_t(r) > wm1 for r in s), "a second-half record is late"
    wm2 = max(_t(r) for r in f + s) - delay
    before = Counter((_tumbling(_t(r), size), r["customer"]) for r in f)
    total = Counter((_tumbling(_t(r), size), r["customer"]) for r in f + s)
    first = [{"w": _window(w, size), "customer": c, "n": n} for (w, c), n in before.items()]
    second = [
        {"w": _window(w, size), "customer": c, "n": n} for (w, c), n in total.items() if w + size <= wm2
    ]
    return first, second


def _window_append_then_update(f: list[Row], s: list[Row], size_min: int, delay_min: int) -> Ref:
    """``count(*)`` per tumbling window and customer: append mode over the first run, update after.

    Old rules: append mode emits a window once, when final, so windows waiting in the state at the
    restart have not been emitted. New rules: update mode emits every group a record updates. A correct
    switch keeps the old rules' promise for the waiting windows: each is emitted with its final value
    when the watermark passes its end (no record is late and no window final after the first run:
    checked here).
    """
    size, delay = timedelta(minutes=size_min), timedelta(minutes=delay_min)
    wm1 = max(_t(r) for r in f) - delay
    assert all(_tumbling(_t(r), size) + size > wm1 for r in f), (
        "a window is already final after the first run"
    )
    assert all(_t(r) > wm1 for r in s), "a second-half record is late"
    wm2 = max(_t(r) for r in f + s) - delay
    total = Counter((_tumbling(_t(r), size), r["customer"]) for r in f + s)
    updated = {(_tumbling(_t(r), size), r["customer"]) for r in s}
    waiting = {(_tumbling(_t(r), size), r["customer"]) for r in f} - updated
    second = [
        {"w": _window(w, size), "customer": c, "n": n}
        for (w, c), n in total.items()
        if (w, c) in updated or ((w, c) in waiting and w + size <= wm2)
    ]
    return [], second


def _window_size_append(f: list[Row], s: list[Row], old_min: int, new_min: int, delay_min: int) -> Ref:
    """``count(*)`` per tumbling window and customer in append mode, window size old -> new.

    First run: the old windows the watermark closed. After the restart, in the new meaning: every new
    window the final watermark closes, counted over the records the state still holds (first-half
    records whose old window was not emitted yet) and the second half; a record whose old window was
    already emitted and whose new window is final too was emitted under the old rules. The input is
    designed so that no second-half record is late (checked).
    """
    old, new, delay = timedelta(minutes=old_min), timedelta(minutes=new_min), timedelta(minutes=delay_min)
    wm1 = max(_t(r) for r in f) - delay
    assert all(_t(r) >= wm1 for r in s), "a second-half record is late"
    wm2 = max(_t(r) for r in f + s) - delay
    emitted = [r for r in f if _tumbling(_t(r), old) + old <= wm1]
    first_counts = Counter((_tumbling(_t(r), old), r["customer"]) for r in emitted)
    held = [r for r in f if r not in emitted]
    assert all(_tumbling(_t(r), new) + new <= wm1 for r in emitted), "an emitted record's new window is open"
    total = Counter((_tumbling(_t(r), new), r["customer"]) for r in held + s)
    first = [{"w": _window(w, old), "customer": c, "n": n} for (w, c), n in first_counts.items()]
    second = [{"w": _window(w, new), "customer": c, "n": n} for (w, c), n in total.items() if w + new <= wm2]
    return first, second


def _sessions(rs: list[Row], gap: timedelta) -> list[tuple[str, datetime, datetime, int]]:
    out: list[tuple[str, datetime, datetime, int]] = []
    for c in sorted({r["customer"] for r in rs}):
        times = sorted(_t(r) for r in rs if r["customer"] == c)
        start, end, n = times[0], times[0] + gap, 1
        for t in times[1:]:
            if t < end:
                end, n = max(end, t + gap), n + 1
            else:
                out.append((c, start, end, n))
                start, end, n = t, t + gap, 1
        out.append((c, start, end, n))
    return out


def _session_gap_append(f: list[Row], s: list[Row], old_min: int, new_min: int, delay_min: int) -> Ref:
    """``count(*)`` per session window and customer in append mode, gap old -> new.

    The input is designed so that no session is final after the first run and no second-half record
    is late (checked): a correct in-place run re-sessionizes the state's records with the new gap and
    emits every session the final watermark closes.
    """
    delay = timedelta(minutes=delay_min)
    wm1 = max(_t(r) for r in f) - delay
    assert all(end > wm1 for _, _, end, _ in _sessions(f, timedelta(minutes=old_min))), "a session is final"
    assert all(end > wm1 for _, _, end, _ in _sessions(f, timedelta(minutes=new_min))), "a session is final"
    assert all(_t(r) >= wm1 for r in s), "a second-half record is late"
    wm2 = max(_t(r) for r in f + s) - delay
    second = [
        {"s": {"start": _iso(a), "end": _iso(b)}, "customer": c, "n": n}
        for c, a, b, n in _sessions(f + s, timedelta(minutes=new_min))
        if b <= wm2
    ]
    return [], second


def _join(
    orders: list[Row],
    payments: list[Row],
    minutes: int,
    on: Callable[[Row, Row], bool],
    proj: Callable[[Row, Row | None], Row],
) -> list[Row]:
    """Inner join with ``p.pts BETWEEN o.ts AND o.ts + minutes``."""
    rng = timedelta(minutes=minutes)
    return [proj(o, p) for o in orders for p in payments if on(o, p) and _t(o) <= _t(p, "pts") <= _t(o) + rng]


def _after_restart(
    of: list[Row],
    os_: list[Row],
    pf: list[Row],
    ps: list[Row],
    minutes: int,
    on: Callable[[Row, Row], bool],
    proj: Callable[[Row, Row | None], Row],
) -> list[Row]:
    """Matches with at least one side arriving after the restart, every buffered row kept."""
    return _join(of + os_, ps, minutes, on, proj) + _join(os_, pf, minutes, on, proj)


def _ocp(o: Row, p: Row | None) -> Row:
    return {"order_id": o["order_id"], "customer": o["customer"], "paid": p["paid"] if p else None}


def _by_order(o: Row, p: Row) -> bool:
    return bool(o["order_id"] == p["order_id"])


def _halves(doc: dict[str, Any]) -> tuple[list[Row], list[Row], list[Row], list[Row]]:
    return (
        records("orders", 0, doc),
        records("orders", 1, doc),
        records("payments", 0, doc),
        records("payments", 1, doc),
    )


def _join_key(doc: dict[str, Any]) -> Ref:
    # 17: ON o.customer = p.customer -> ON o.seller = p.customer (watermark 1 hour: nothing evicted)
    of, os_, pf, ps = _halves(doc)

    def proj(o: Row, p: Row | None) -> Row:
        return {
            "order_id": o["order_id"],
            "customer": o["customer"],
            "seller": o["seller"],
            "paid": p["paid"] if p else None,
        }

    def old(o: Row, p: Row) -> bool:
        return bool(o["customer"] == p["customer"])

    def new(o: Row, p: Row) -> bool:
        return bool(o["seller"] == p["customer"])

    return _join(of, pf, 10, old, proj), _after_restart(of, os_, pf, ps, 10, new, proj)


def _join_time_condition(doc: dict[str, Any]) -> Ref:
    # 19: range 2 -> 10 minutes; every buffered order is kept under the new range (see the pair)
    of, os_, pf, ps = _halves(doc)
    rng = int((doc.get("input") or {}).get("newRangeMinutes", 10))
    return _join(of, pf, 2, _by_order, _ocp), _after_restart(of, os_, pf, ps, rng, _by_order, _ocp)


def _join_left_outer(doc: dict[str, Any]) -> Ref:
    """18: inner -> left outer (range 10 minutes, watermark 1 minute on both sides).

    After the restart: the inner matches with a side after the restart, and every order of either half
    that never matched, null-extended, once the final watermark (the smaller of both sides') has passed
    ``ts + 10 minutes`` (the join can no longer match it). The input is designed for it: an order
    without payment before the restart, and a late pair after it that moves the watermark.
    """
    of, os_, pf, ps = _halves(doc)
    delay = timedelta(minutes=1)
    wm = min(max(_t(r) for r in of + os_), max(_t(r, "pts") for r in pf + ps)) - delay
    matched = _after_restart(of, os_, pf, ps, 10, _by_order, _ocp)
    every = _join(of + os_, pf + ps, 10, _by_order, _ocp)
    unmatched = [
        _ocp(o, None)
        for o in of + os_
        if not any(r["order_id"] == o["order_id"] for r in every) and _t(o) + timedelta(minutes=10) < wm
    ]
    return _join(of, pf, 10, _by_order, _ocp), matched + unmatched


def _dedup_swap(doc: dict[str, Any]) -> Ref:
    """28: DISTINCT customer, seller -> DISTINCT seller AS customer, customer AS seller.

    In the new meaning the state remembers the (customer, seller) combinations seen before the
    restart; after it, a record is new if its combination is, and is emitted with the columns swapped.
    """
    f, s = records("orders", 0, doc), records("orders", 1, doc)
    seen: set[tuple[str, str]] = set()
    first: list[Row] = []
    for r in f:
        if (r["customer"], r["seller"]) not in seen:
            seen.add((r["customer"], r["seller"]))
            first.append({"customer": r["customer"], "seller": r["seller"]})
    second: list[Row] = []
    for r in s:
        if (r["customer"], r["seller"]) not in seen:
            seen.add((r["customer"], r["seller"]))
            second.append({"customer": r["seller"], "seller": r["customer"]})
    return first, second


def _add_source(doc: dict[str, Any]) -> Ref:
    # 27: ... UNION ALL SELECT order_id, customer FROM payments (the payments topic is new: it holds
    # the second half only, read from its starting offsets)
    f, s, _, ps = _halves(doc)

    def oc(r: Row) -> Row:
        return {"order_id": r["order_id"], "customer": r["customer"]}

    return [oc(r) for r in f], [oc(r) for r in s + ps]


def in_place_reference(name: str, doc: dict[str, Any] | None = None) -> Ref | None:
    """(output of the first run, output of a correct in-place restart) for pair ``name``."""
    doc = doc or {}
    f, s = records("orders", 0, doc), records("orders", 1, doc)
    gt2: Pred = lambda r: r["amount"] > 2  # noqa: E731
    seller = Agg(key=lambda r: r["seller"])
    stateless: dict[str, Callable[[], Ref]] = {
        "none-reformatted": lambda: _stateless(f, s, (gt2, _oca)),
        "trigger-interval": lambda: _stateless(f, s, (gt2, _oca)),
        "filter-stateless": lambda: _stateless(f, s, (gt2, _oca), (lambda r: r["amount"] > 3, _oca)),
        "projection-add": lambda: _stateless(
            f, s, (gt2, _oca), (gt2, lambda r: {**_oca(r), "region": r["region"]})
        ),
        "projection-remove": lambda: _stateless(
            f, s, (gt2, _oca), (gt2, lambda r: {"order_id": r["order_id"], "amount": r["amount"]})
        ),
        "projection-rename": lambda: _stateless(
            f,
            s,
            (gt2, _oca),
            (gt2, lambda r: {"order_id": r["order_id"], "buyer": r["customer"], "amount": r["amount"]}),
        ),
        "projection-retype": lambda: _stateless(
            f, s, (gt2, _oca), (gt2, lambda r: {**_oca(r), "amount": int(r["amount"])})
        ),
        "sink-topic": lambda: _stateless(f, s, (gt2, _oca)),
    }
    stateful: dict[str, Callable[[], Ref]] = {
        # the state keeps its meaning: counting continues under the new rules
        "rate-limit": lambda: _update_agg(f, s, Agg()),
        "filter-before-aggregate": lambda: _update_agg(
            f, s, Agg(where=lambda r: r["amount"] > 1), Agg(where=lambda r: r["amount"] > 3)
        ),
        "having-change": lambda: _update_agg(
            f, s, Agg(having=lambda o: o["n"] > 1), Agg(having=lambda o: o["n"] > 2)
        ),
        "aggregate-output-rename": lambda: _update_agg(f, s, Agg(), Agg(values={"orders_count": len})),
        "sink-key": lambda: _update_agg(f, s, Agg()),
        "source-column-added-unused": lambda: _update_agg(f, s, Agg()),
        "shuffle-partitions": lambda: _update_agg(f, s, Agg()),
        "watermark-delay": lambda: _windows_update(f, s, 5, 5, 5, per_customer=True),
        "output-mode": lambda: _window_update_then_append(f, s, 5, 2),
        # the state's meaning changes: a correct in-place run would hold it in the new meaning
        "group-by-same-type": lambda: _update_agg(f, s, Agg(), seller),
        "group-by-upstream-expression": lambda: _update_agg(
            f, s, Agg(key_name="c"), Agg(key=lambda r: r["seller"], key_name="c")
        ),
        "allow-replace-false": lambda: _update_agg(f, s, Agg(), seller),
        "several-changes": lambda: _update_agg(
            f, s, Agg(where=lambda r: r["amount"] > 1), Agg(key=lambda r: r["seller"], where=gt2)
        ),
        "count-to-sum": lambda: _update_agg(f, s, Agg(), Agg(values={"n": _sum("qty")})),
        "avg-to-sum": lambda: _update_agg(
            f, s, Agg(values={"v": _avg("amount")}), Agg(values={"v": _sum("amount")})
        ),
        "add-aggregate": lambda: _update_agg(f, s, Agg(), Agg(values={"n": len, "total": _sum("amount")})),
        "remove-aggregate": lambda: _update_agg(f, s, Agg(values={"n": len, "total": _sum("amount")}), Agg()),
        "source-column-retype-under-aggregate": lambda: _update_agg(f, s, Agg(values={"q": _sum("qty")})),
        # each order counted once: the migrated topic's copies of the first half are already counted
        "source-topic": lambda: _update_agg(f, s, Agg()),
        "add-stateful-operator": lambda: (
            [{"customer": r["customer"], "amount": r["amount"]} for r in f],
            _update_agg(f, s, Agg())[1],
        ),
        "window-size": lambda: _window_size_append(f, s, 5, 10, 1),
        "window-slide": lambda: _windows_update(f, s, 10, 5, 2, per_customer=False),
        "session-gap": lambda: _session_gap_append(f, s, 5, 2, 1),
        "output-mode-append-to-update": lambda: _window_append_then_update(f, s, 5, 2),
        "join-key-same-type": lambda: _join_key(doc),
        "join-inner-to-left-outer": lambda: _join_left_outer(doc),
        "join-time-condition": lambda: _join_time_condition(doc),
        "dedup-columns": lambda: _dedup_swap(doc),
        "add-source": lambda: _add_source(doc),
    }
    fn = stateless.get(name) or stateful.get(name)
    return fn() if fn is not None else None


# -- Kafka --------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, rows: list[Row]) -> None:
    from confluent_kafka import Producer
    from sluice_runtime.kafka_admin import ensure_topics

    ensure_topics(bootstrap, [topic])
    p = Producer({"bootstrap.servers": bootstrap})
    for r in rows:
        p.produce(topic, json.dumps(r).encode())
    assert p.flush(30) == 0


@dataclass
class Message:
    partition: int
    offset: int
    key: str | None
    value: Row


def consume_all(bootstrap: str, topic: str) -> list[Message]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gt-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = c.list_topics(topic, timeout=30)
        if topic not in md.topics or md.topics[topic].error is not None:
            return []
        out: list[Message] = []
        for p in md.topics[topic].partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi <= lo:
                continue
            c.assign([TopicPartition(topic, p, lo)])
            got = 0
            deadline = time.time() + 30
            while got < hi - lo and time.time() < deadline:
                m = c.poll(1.0)
                if m is None or m.error():
                    continue
                got += 1
                raw_key, value = m.key(), m.value()
                key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
                out.append(Message(p, int(m.offset() or 0), key, json.loads(value or b"null")))
        return out
    finally:
        c.close()


# -- running ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    verdict: tuple[str, str]
    # accepts | error | silent-setting-ignored | silent-wrong-result | wrong-result-in-place
    # | first-run-differs | old-query-fails | no-reference
    spark: str = ""
    error_class: str | None = None
    error: str | None = None
    detail: str = ""
    seconds: float = 0.0
    backstop: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    spark_version: str = ""

    @property
    def in_place_verdict(self) -> bool:
        return self.verdict[1] in ("in-place", "none")

    @property
    def consistent(self) -> bool:
        """The ground truth agrees with the verdict."""
        if self.in_place_verdict:
            return self.spark == "accepts"
        return self.spark in ("error", "silent-wrong-result", "silent-setting-ignored")

    @property
    def classifier_bug(self) -> str | None:
        """``over-strict``: a replace/reject where Spark carried the change out correctly in place;
        ``under-strict``: an in-place verdict where Spark's result is wrong."""
        if not self.in_place_verdict and self.spark == "accepts":
            return "over-strict"
        if self.in_place_verdict and self.spark == "wrong-result-in-place":
            return "under-strict"
        return None


def _manifests(doc: dict[str, Any], prefix: str) -> tuple[Any, Any]:
    out = []
    for side in ("old", "new"):
        m = json.loads(json.dumps(doc[side]))
        for s in m["spec"]["sources"]:
            s["topic"] = prefix + s["topic"]
            s["malformed"] = {"policy": "skip"}
        m["spec"]["sink"]["topic"] = prefix + m["spec"]["sink"]["topic"]
        out.append(parse_manifest(yaml.safe_dump(m)))
    return out[0], out[1]


def _topics(plan: Plan) -> dict[str, str]:
    return {s.source: s.topic for s in plan.steps if s.type == "kafkaSourceV1"}  # type: ignore[union-attr]


def _error_class(exc: BaseException) -> tuple[str, str]:
    text = str(exc)
    cond = None
    for getter in ("getCondition", "getErrorClass"):
        fn = getattr(exc, getter, None)
        if fn is not None:
            try:
                cond = fn()
            except Exception:
                cond = None
            if cond:
                break
    import re

    found = [c for c in re.findall(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)?)\]", text) if c != "STREAM_FAILED"]
    if found:
        cond = found[0]  # the cause, not Spark's STREAM_FAILED wrapper
    elif not cond or cond == "STREAM_FAILED":
        java = re.findall(r"\b((?:java|org\.apache)\.[\w.]+(?:Exception|Error))\b", text)
        cond = java[0] if java else type(exc).__name__
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return cond, first[:300]


def run_plan(spark: Any, plan: Plan, checkpoint: str, bootstrap: str, query_id: str) -> None:
    from sluice_runtime.pipeline import build_pipeline

    for k, v in plan.settings.spark_conf().items():
        spark.conf.set(k, v)
    pipe = build_pipeline(
        spark, plan, checkpoint=checkpoint, bootstrap=bootstrap, query_id=query_id, available_now=True
    )
    try:
        for q in pipe.all_queries():
            q.awaitTermination(300)
            exc = q.exception()
            if exc is not None:
                raise exc
    finally:
        for q in pipe.all_queries():
            if q.isActive:
                q.stop()


def _fresh(spark: Any, doc: dict[str, Any], bootstrap: str, work: Path, halves: tuple[int, ...]) -> list[Row]:
    """The new query on a fresh checkpoint over the given halves of the input (a replace)."""
    prefix = f"gt{uuid.uuid4().hex[:8]}-"
    _, new = _manifests(doc, prefix)
    plan = compile_query(new.spec)
    for src, topic in _topics(plan).items():
        for h in halves:
            produce(bootstrap, topic, records(src, h, doc))
    run_plan(spark, plan, str(work / f"fresh-{prefix}"), bootstrap, prefix + "q")
    return [m.value for m in consume_all(bootstrap, plan.sink.topic)]


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def run_pair(spark: Any, bootstrap: str, path: Path, work: Path, replace_outcomes: bool = False) -> Outcome:
    """Force one corpus pair in place and judge the verdict (see the module docstring).

    ``replace_outcomes``: also run the new query on fresh checkpoints (hand-off and backfill) for a
    replace/reject verdict whose in-place result is wrong, to say which outcome, if any, it equals.
    """
    started = time.time()
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    name = path.stem.split("-", 1)[1]
    prefix = f"gt{uuid.uuid4().hex[:8]}-"
    old_m, new_m = _manifests(doc, prefix)
    old, new = compile_query(old_m.spec), compile_query(new_m.spec)
    verdict = classify(old, new, new_m.upgrade)
    out = Outcome(name=path.stem, verdict=(verdict.category, verdict.decision), spark_version=spark_version())

    def done(spark_result: str, detail: str = "") -> Outcome:
        out.spark, out.detail = spark_result, detail
        out.seconds = time.time() - started
        return out

    ref = in_place_reference(name, doc)
    if ref is None:
        return done("no-reference", "no plain-Python reference for this pair")
    compare = doc.get("input", {}).get("compare", "rows")
    key = doc.get("input", {}).get("key", [])
    ckpt = str(work / f"ckpt-{prefix}")
    for src, topic in _topics(old).items():
        produce(bootstrap, topic, records(src, 0, doc))
    try:
        run_plan(spark, old, ckpt, bootstrap, prefix + "q")
    except Exception as exc:
        out.error_class, out.error = _error_class(exc)
        return done("old-query-fails")
    from sluice_runtime import backstop

    backstop.record(ckpt, old)  # what the runtime would do when it first uses a checkpoint
    out.backstop = backstop.verify(ckpt, new)  # what it would check before an in-place restart
    first_msgs = consume_all(bootstrap, old.sink.topic)
    first = [m.value for m in first_msgs]
    if multiset(first) != multiset(ref[0]):
        return done(
            "first-run-differs", f"old query over the first half: got {_brief(first)}; want {_brief(ref[0])}"
        )
    copies = bool((doc.get("input") or {}).get("newTopicCopiesOld"))
    old_topics = set(_topics(old).values())
    for src, topic in _topics(new).items():
        if copies and topic not in old_topics:
            produce(bootstrap, topic, records(src, 0, doc))  # a migrated topic: old records + new ones
        produce(bootstrap, topic, records(src, 1, doc))
    try:
        run_plan(spark, new, ckpt, bootstrap, prefix + "q")
    except Exception as exc:
        out.error_class, out.error = _error_class(exc)
        return done("error")
    ignored = [p for p in backstop.check(new, backstop.read_facts(ckpt)) if "pins" in p]
    if ignored:
        return done("silent-setting-ignored", " ".join(ignored))
    seen = {(m.partition, m.offset) for m in first_msgs} if new.sink.topic == old.sink.topic else set()
    second_msgs = [m for m in consume_all(bootstrap, new.sink.topic) if (m.partition, m.offset) not in seen]
    second = [m.value for m in second_msgs]
    out.extra["keys"] = sorted({m.key for m in second_msgs if m.key is not None})[:5]
    if _same(compare, key, first, second, ref[1]):
        if out.in_place_verdict:
            return done("accepts")
        return done(
            "accepts",
            "equals the correct in-place result (old rules before the restart, new rules after): the "
            "classifier is stricter than needed (over-strict)",
        )
    detail = _difference(compare, key, first, second, ref[1])
    if out.in_place_verdict:
        return done("wrong-result-in-place", detail)
    if replace_outcomes:
        hand_off = _fresh(spark, doc, bootstrap, work, (1,))
        backfill = _fresh(spark, doc, bootstrap, work, (0, 1))
        detail += _replace_note(compare, key, first, second, ref[1], hand_off, backfill)
    return done("silent-wrong-result", detail)


def _same(compare: str, key: list[str], first: list[Row], second: list[Row], want: list[Row]) -> bool:
    """The second run's output equals ``want``: as records (rows), or as a table plus the keys emitted."""
    if compare == "rows":
        return multiset(second) == multiset(want)
    base = table(first, key)
    emitted = {_key(r, key) for r in second} == {_key(r, key) for r in want}
    return emitted and table(second, key, base) == table(want, key, base)


def _short(v: Any) -> Any:
    """A window struct as [HH:MM, HH:MM), other values unchanged."""
    if isinstance(v, tuple) and dict(v).keys() == {"start", "end"}:
        d = dict(v)
        return f"[{str(d['start'])[11:19].removesuffix(':00')}, {str(d['end'])[11:19].removesuffix(':00')})"
    return v


def _show(row: dict[str, Any] | None) -> str:
    if row is None:
        return "absent"
    return ", ".join(f"{k}={_short(v)}" for k, v in row.items())


def _brief(rows: list[Row], limit: int = 4) -> str:
    """Records in a few words: their order ids, or the first few records."""
    if not rows:
        return "nothing"
    if len(rows) > 2 * limit:
        return str(len(rows))
    if all("order_id" in r for r in rows):
        return f"{len(rows)} ({' '.join(sorted(str(r['order_id']) for r in rows))})"
    shown = sorted(_show(dict(canon(r))) for r in rows)
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return f"{len(rows)} ({'; '.join(shown[:limit])}{more})"


def _first_difference(key: list[str], first: list[Row], second: list[Row], correct: list[Row]) -> Any:
    """The first table key where the in-place output differs from the correct one (table mode)."""
    base = table(first, key)
    got, want = table(second, key, base), table(correct, key, base)
    return next((k for k in sorted(set(got) | set(want), key=repr) if got.get(k) != want.get(k)), None)


def _difference(compare: str, key: list[str], first: list[Row], second: list[Row], correct: list[Row]) -> str:
    """One short sentence: where the in-place output differs from the correct in-place result."""
    if compare == "rows":
        text = (
            f"in place emitted {_brief(second)} after the restart; a correct in-place run emits "
            f"{_brief(correct)}"
        )
        if len(second) + len(correct) > 8:
            extra, missing = multiset(second) - multiset(correct), multiset(correct) - multiset(second)
            text += f" ({sum(extra.values())} records too many, {sum(missing.values())} missing"
            if extra:
                text += f", e.g. {_show(dict(next(iter(extra))))}"
            text += ")"
        return text
    base = table(first, key)
    got, want = table(second, key, base), table(correct, key, base)
    diff = [k for k in sorted(set(got) | set(want), key=repr) if got.get(k) != want.get(k)]
    if diff:
        return "; ".join(
            f"in place {_show(got.get(k))}, correct in place {_show(want.get(k))}" for k in diff[:2]
        )
    odd = {_key(r, key) for r in second} ^ {_key(r, key) for r in correct}
    return f"in place the groups emitted after the restart differ: {sorted(odd, key=repr)[:3]}"


def _replace_note(
    compare: str,
    key: list[str],
    first: list[Row],
    second: list[Row],
    correct: list[Row],
    hand_off: list[Row],
    backfill: list[Row],
) -> str:
    """What the two outcomes of a replace give, and whether the in-place output equals one of them."""
    if compare == "rows":
        same = [
            n
            for n, rs in (("hand-off", hand_off), ("backfill", backfill))
            if multiset(rs) == multiset(second)
        ]
        text = f"; a replace emits {_brief(hand_off)} (hand-off) or {_brief(backfill)} (backfill)"
    else:
        base = table(first, key)
        got = table(second, key, base)
        same = [
            n for n, rs in (("hand-off", hand_off), ("backfill", backfill)) if table(rs, key, base) == got
        ]
        k = _first_difference(key, first, second, correct)
        ho, bf = table(hand_off, key, base).get(k), table(backfill, key, base).get(k)
        text = f"; hand-off {_show(ho)}; backfill {_show(bf)}"
    if same:
        text += f" (in place equals the {same[0]} result)"
    return text


def create_session(jars: list[Path]) -> Any:
    from sluice_runtime.session import create_spark

    first = compile_query(
        parse_manifest(
            yaml.safe_dump(yaml.safe_load(sorted(CORPUS.glob("[0-9][0-9]-*.yaml"))[0].read_text())["old"])
        ).spec
    )
    return create_spark(
        first,
        master="local[2]",
        jars=jars,
        conf={
            "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
            "spark.ui.showConsoleProgress": "false",
        },
    )
