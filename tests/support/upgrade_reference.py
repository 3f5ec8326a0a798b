"""The correct in-place outcome of every upgrade corpus pair, in plain Python (see ``upgrade_harness``
for what "correct" means when the state's meaning changes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tests.support.upgrade_data import BASE, Row, _iso, records

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
