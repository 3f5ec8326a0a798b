"""Ground truth for the upgrade classifier: what Spark does when a corpus pair is forced in place.

For one pair (tests/corpus/upgrades/NN-name.yaml):
1. the old query runs (available-now) over the first half of a deterministic input and stops;
2. the second half is written, and the NEW query is started on the SAME checkpoint (in place);
3. ``in-place``/``none`` verdicts: its output is compared with an independent plain-Python
   reference (old semantics over the first half, new semantics over the second half);
   ``replace``/``reject`` verdicts: a Spark error is recorded by its error class, or the output is
   compared with the two correct outcomes of a replace, both computed by running the new query on
   a fresh checkpoint: hand-off (second half only) and backfill (whole input). Output that matches
   neither is a silent wrong result. A pair where Spark accepts the change and matches one of them
   is reported as ``accepts-same-as-replace`` (the classifier is stricter than needed there).

Input: by default the deterministic generators below (``order``/``payment``, 24 records split in
two halves). A pair can instead list its records per source and half in ``input.rows`` (``{source:
{first: [...], second: [...]}}``), designed so that the difference the rule is about shows. With
``input.newTopicCopiesOld: true``, a source topic that only the new plan reads is written the whole
input before the in-place restart (a migrated topic that holds the old topic's records plus the new
ones), and only the second half otherwise.

For some ``replace`` pairs a correct in-place outcome can be defined (old rules for records processed
before the upgrade, new rules after); ``in_place_reference`` computes it in plain Python, and the
forced in-place output is compared with it first: equal means Spark carried the change out
correctly (the rule would be stricter than needed: ``accepts``).

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
        return float(v)
    if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and "T" in v:
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(UTC).isoformat()
        except ValueError:
            return v
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    return v


def canon(row: Row) -> tuple[Any, ...]:
    return tuple(sorted((k, _norm(v)) for k, v in row.items()))


def multiset(rows: list[Row]) -> Counter[tuple[Any, ...]]:
    return Counter(canon(r) for r in rows)


def table(rows: list[Row], key: list[str], base: dict[Any, Row] | None = None) -> dict[Any, Row]:
    """Last value per key (update-mode output read as a table)."""
    out = dict(base or {})
    for r in rows:
        out[tuple(_norm(r.get(k)) for k in key)] = dict(canon(r))
    return out


# -- plain-Python references for in-place verdicts ----------------------------------------------


def _rows(rs: list[Row], cond: Callable[[Row], bool], proj: Callable[[Row], Row]) -> list[Row]:
    return [proj(r) for r in rs if cond(r)]


def _counts(
    rs: list[Row], cond: Callable[[Row], bool] = lambda r: True, key: str = "customer"
) -> Counter[str]:
    return Counter(r[key] for r in rs if cond(r))


def _oca(r: Row) -> Row:
    return {"order_id": r["order_id"], "customer": r["customer"], "amount": r["amount"]}


def _count_table(
    first: list[Row],
    second: list[Row],
    name: str = "n",
    c1: Callable[[Row], bool] = lambda r: True,
    c2: Callable[[Row], bool] = lambda r: True,
    h1: int = 0,
    h2: int = 0,
    name1: str = "n",
) -> list[Row]:
    """Update-mode output of ``count(*) GROUP BY customer`` run as two batches (one per half)."""
    out: list[Row] = []
    a = _counts(first, c1)
    out += [{"customer": k, name1: v} for k, v in a.items() if v > h1]
    b = _counts(second, c2)
    total = a + b
    out += [{"customer": k, name: total[k]} for k in b if total[k] > h2]
    return out


def _window_counts(rs: list[Row]) -> list[Row]:
    out: Counter[tuple[str, str]] = Counter()
    for r in rs:
        t = datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
        start = t.replace(minute=t.minute - t.minute % 5, second=0)
        out[(_iso(start), r["customer"])] += 1
    return [
        {
            "w": {
                "start": s,
                "end": _iso(datetime.fromisoformat(s.replace("Z", "+00:00")) + timedelta(minutes=5)),
            },
            "customer": c,
            "n": n,
        }
        for (s, c), n in out.items()
    ]


def _t(r: Row, col: str = "ts") -> datetime:
    return datetime.fromisoformat(str(r[col]).replace("Z", "+00:00"))


def _window_row(start: datetime, size: timedelta, customer: str, n: int) -> Row:
    return {"w": {"start": _iso(start), "end": _iso(start + size)}, "customer": customer, "n": n}


def _window_update_then_append(
    first: list[Row], second: list[Row], size_min: int, delay_min: int
) -> list[Row]:
    """``count(*)`` per tumbling window and customer: update mode over the first run, append mode after.

    Old rules before the upgrade: update mode emits each group's count as it changes (read as a table,
    the count over the first run). New rules after: append mode emits every group once, with its final
    count, when the watermark (max event time - delay) passes the window's end. The input must be
    designed so that no record is late and no window is final after the first run (checked here).
    """
    size, delay = timedelta(minutes=size_min), timedelta(minutes=delay_min)

    def start(r: Row) -> datetime:
        return BASE + ((_t(r) - BASE) // size) * size

    wm1 = max(_t(r) for r in first) - delay
    assert all(start(r) + size > wm1 for r in first), "a window is already final after the first run"
    assert all(_t(r) > wm1 for r in second), "a second-half record is late"
    wm2 = max(_t(r) for r in first + second) - delay
    before = Counter((start(r), r["customer"]) for r in first)
    total = Counter((start(r), r["customer"]) for r in first + second)
    out = [_window_row(w, size, c, n) for (w, c), n in before.items()]
    out += [_window_row(w, size, c, n) for (w, c), n in total.items() if w + size <= wm2]
    return out


def _join_rows(orders: list[Row], payments: list[Row], minutes: int) -> list[Row]:
    """Inner join on order_id with ``p.pts BETWEEN o.ts AND o.ts + minutes``."""
    rng = timedelta(minutes=minutes)
    return [
        {"order_id": o["order_id"], "customer": o["customer"], "paid": p["paid"]}
        for o in orders
        for p in payments
        if o["order_id"] == p["order_id"] and _t(o) <= _t(p, "pts") <= _t(o) + rng
    ]


def in_place_reference(name: str, doc: dict[str, Any]) -> list[Row] | None:
    """For a ``replace`` pair, what a CORRECT in-place restart would emit after the restart (old rules
    for records processed before the upgrade, new rules after), where that is well defined."""
    if name == "join-time-condition":
        # every match with at least one side arriving after the restart, under the NEW range
        of, osec = records("orders", 0, doc), records("orders", 1, doc)
        pf, psec = records("payments", 0, doc), records("payments", 1, doc)
        rng = int((doc.get("input") or {}).get("newRangeMinutes", 10))
        return _join_rows(of + osec, psec, rng) + _join_rows(osec, pf, rng)
    return None


def reference(name: str, doc: dict[str, Any] | None = None) -> tuple[list[Row], list[Row]] | None:
    """Expected output (records of the first run, records of the in-place second run)."""
    f, s = records("orders", 0, doc), records("orders", 1, doc)
    gt2 = lambda r: r["amount"] > 2  # noqa: E731
    refs: dict[str, Callable[[], tuple[list[Row], list[Row]]]] = {
        "none-reformatted": lambda: (_rows(f, gt2, _oca), _rows(s, gt2, _oca)),
        "trigger-interval": lambda: (_rows(f, gt2, _oca), _rows(s, gt2, _oca)),
        "filter-stateless": lambda: (_rows(f, gt2, _oca), _rows(s, lambda r: r["amount"] > 3, _oca)),
        "projection-add": lambda: (
            _rows(f, gt2, _oca),
            _rows(s, gt2, lambda r: {**_oca(r), "region": r["region"]}),
        ),
        "projection-remove": lambda: (
            _rows(f, gt2, _oca),
            _rows(s, gt2, lambda r: {"order_id": r["order_id"], "amount": r["amount"]}),
        ),
        "projection-rename": lambda: (
            _rows(f, gt2, _oca),
            _rows(
                s, gt2, lambda r: {"order_id": r["order_id"], "buyer": r["customer"], "amount": r["amount"]}
            ),
        ),
        "projection-retype": lambda: (
            _rows(f, gt2, _oca),
            _rows(s, gt2, lambda r: {**_oca(r), "amount": int(r["amount"])}),
        ),
        "sink-topic": lambda: (_rows(f, gt2, _oca), _rows(s, gt2, _oca)),
    }
    table_refs: dict[str, Callable[[], list[Row]]] = {
        "rate-limit": lambda: _count_table(f, s),
        "filter-before-aggregate": lambda: _count_table(
            f, s, c1=lambda r: r["amount"] > 1, c2=lambda r: r["amount"] > 3
        ),
        "having-change": lambda: _count_table(f, s, h1=1, h2=2),
        "aggregate-output-rename": lambda: _count_table(f, s, name="orders_count"),
        "sink-key": lambda: _count_table(f, s),
        "source-column-added-unused": lambda: _count_table(f, s),
        "watermark-delay": lambda: _window_counts(f + s),
        # update -> append on a windowed count (5-minute windows, 2-minute watermark delay)
        "output-mode": lambda: _window_update_then_append(f, s, 5, 2),
    }
    if name in refs:
        return refs[name]()
    if name in table_refs:
        return [], table_refs[name]()
    return None


# -- Kafka --------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, rows: list[Row]) -> None:
    from confluent_kafka import Producer
    from sluice_runtime.kafka_admin import ensure_topics

    ensure_topics(bootstrap, [topic])
    p = Producer({"bootstrap.servers": bootstrap})
    for r in rows:
        p.produce(topic, json.dumps(r).encode())
    assert p.flush(30) == 0


def consume_all(bootstrap: str, topic: str) -> list[tuple[str | None, Row]]:
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
        out: list[tuple[str | None, Row]] = []
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
                out.append((key, json.loads(value or b"null")))
        return out
    finally:
        c.close()


# -- running ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    verdict: tuple[str, str]
    spark: str = ""  # accepts | error | silent-wrong-result | accepts-same-as-replace | wrong-result-in-place
    error_class: str | None = None
    error: str | None = None
    detail: str = ""
    seconds: float = 0.0
    backstop: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def consistent(self) -> bool:
        """The ground truth agrees with the verdict."""
        if self.verdict[1] in ("in-place", "none"):
            return self.spark == "accepts"
        return self.spark in ("error", "silent-wrong-result", "silent-setting-ignored")


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
    return [v for _, v in consume_all(bootstrap, plan.sink.topic)]


def run_pair(spark: Any, bootstrap: str, path: Path, work: Path) -> Outcome:
    started = time.time()
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    name = path.stem.split("-", 1)[1]
    prefix = f"gt{uuid.uuid4().hex[:8]}-"
    old_m, new_m = _manifests(doc, prefix)
    old, new = compile_query(old_m.spec), compile_query(new_m.spec)
    verdict = classify(old, new, new_m.upgrade)
    out = Outcome(name=path.stem, verdict=(verdict.category, verdict.decision))
    ckpt = str(work / f"ckpt-{prefix}")
    for src, topic in _topics(old).items():
        produce(bootstrap, topic, records(src, 0, doc))
    try:
        run_plan(spark, old, ckpt, bootstrap, prefix + "q")
    except Exception as exc:
        out.spark = "old-query-fails"
        out.error_class, out.error = _error_class(exc)
        out.seconds = time.time() - started
        return out
    from sluice_runtime import backstop

    backstop.record(ckpt, old)  # what the runtime would do when it first uses a checkpoint
    out.backstop = backstop.verify(ckpt, new)  # what it would check before an in-place restart
    first = [v for _, v in consume_all(bootstrap, old.sink.topic)]
    copies = bool((doc.get("input") or {}).get("newTopicCopiesOld"))
    old_topics = set(_topics(old).values())
    for src, topic in _topics(new).items():
        if copies and topic not in old_topics:
            produce(bootstrap, topic, records(src, 0, doc))  # a migrated topic: old records + new ones
        produce(bootstrap, topic, records(src, 1, doc))
    try:
        run_plan(spark, new, ckpt, bootstrap, prefix + "q")
    except Exception as exc:
        out.spark = "error"
        out.error_class, out.error = _error_class(exc)
        out.seconds = time.time() - started
        return out
    ignored = [p for p in backstop.check(new, backstop.read_facts(ckpt)) if "pins" in p]
    if ignored:
        out.spark = "silent-setting-ignored"
        out.detail = " ".join(ignored)
        out.seconds = time.time() - started
        return out
    after_all = consume_all(bootstrap, new.sink.topic)
    if new.sink.topic == old.sink.topic:
        second_kv = after_all[len(first) :]
    else:
        second_kv = after_all
    second = [v for _, v in second_kv]
    out.extra["keys"] = sorted({k for k, _ in second_kv if k is not None})[:5]
    compare = doc.get("input", {}).get("compare", "rows")
    key = doc.get("input", {}).get("key", [])
    if verdict.decision in ("in-place", "none"):
        ref = reference(name, doc)
        if ref is None:
            out.spark, out.detail = "no-reference", "no plain-Python reference for this pair"
        elif compare == "rows":
            ok = multiset(first) == multiset(ref[0]) and multiset(second) == multiset(ref[1])
            out.spark = "accepts" if ok else "wrong-result-in-place"
            out.detail = (
                ""
                if ok
                else f"got {sorted(multiset(second).items())[:4]} want {sorted(multiset(ref[1]).items())[:4]}"
            )
        else:
            got = table(first + second, key)
            want = table(ref[1], key)
            ok = got == want
            out.spark = "accepts" if ok else "wrong-result-in-place"
            out.detail = "" if ok else f"got {sorted(got.items())[:3]} want {sorted(want.items())[:3]}"
    else:
        correct = in_place_reference(name, doc)
        if correct is not None and multiset(second) == multiset(correct):
            out.spark = "accepts"
            out.detail = "equals the correct in-place result (old rules before the restart, new rules after)"
            out.seconds = time.time() - started
            return out
        hand_off = _fresh(spark, doc, bootstrap, work, (1,))
        backfill = _fresh(spark, doc, bootstrap, work, (0, 1))
        if compare == "rows":
            same = multiset(second) in (multiset(hand_off), multiset(backfill))
        else:
            base = table(first, key)
            got = table(second, key, base)
            same = got in (table(hand_off, key, base), table(backfill, key, base))
        out.spark = "accepts-same-as-replace" if same else "silent-wrong-result"
        if not same:
            out.detail = _difference(compare, key, first, second, hand_off, backfill, correct)
    out.seconds = time.time() - started
    return out


def _short(v: Any) -> Any:
    """A window struct as [HH:MM, HH:MM), other values unchanged."""
    if isinstance(v, tuple) and dict(v).keys() == {"start", "end"}:
        d = dict(v)
        return f"[{str(d['start'])[11:16]}, {str(d['end'])[11:16]})"
    return v


def _show(row: dict[str, Any] | None) -> str:
    if row is None:
        return "absent"
    return ", ".join(f"{k}={_short(v)}" for k, v in row.items())


def _ids(rows: list[Row]) -> str:
    if not rows or not all("order_id" in r for r in rows):
        return "none" if not rows else "..."
    return " ".join(sorted(str(r["order_id"]) for r in rows))


def _difference(
    compare: str,
    key: list[str],
    first: list[Row],
    second: list[Row],
    hand_off: list[Row],
    backfill: list[Row],
    correct: list[Row] | None = None,
) -> str:
    """One short sentence: where the in-place output differs from both replace outcomes."""
    if compare == "rows":
        text = (
            f"in place emitted {len(second)} records after the restart ({_ids(second)}); a replace emits "
            f"{len(hand_off)} (hand-off: {_ids(hand_off)}) or {len(backfill)} (backfill: {_ids(backfill)})"
        )
        if correct is not None:
            text += f"; a correct in-place run would emit {len(correct)} ({_ids(correct)})"
        return text
    base = table(first, key)
    got, ho, bf = table(second, key, base), table(hand_off, key, base), table(backfill, key, base)
    keys = sorted(set(got) | set(ho) | set(bf), key=repr)
    for k in keys:
        g, h, b = got.get(k), ho.get(k), bf.get(k)
        if g != h and g != b:
            return f"in place {_show(g)}; hand-off {_show(h)}; backfill {_show(b)}"
    kh = next((k for k in keys if got.get(k) != ho.get(k)), None)
    kb = next((k for k in keys if got.get(k) != bf.get(k)), None)
    if kh is not None and kb is not None:
        return (
            f"in place {_show(got.get(kh))} where hand-off has {_show(ho.get(kh))}; in place "
            f"{_show(got.get(kb))} where backfill has {_show(bf.get(kb))}"
        )
    return "tables differ from both replace outcomes"


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
