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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sluice.core.classify import classify
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan

from tests.support.upgrade_data import CORPUS, Row, _key, canon, multiset, records, table
from tests.support.upgrade_reference import in_place_reference

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
