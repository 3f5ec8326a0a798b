"""Warming a standby up on its own plan, so that its first micro-batch after a takeover is fast.

The first micro-batch of a freshly started JVM pays for everything loaded or compiled on first use:
the Kafka source and its consumer, the streaming engine, the plan's generated code (Spark caches
compiled classes by their source text, so only the same plan hits the cache), the state store
provider, the ``foreachBatch`` callback server. A generic batch job warms little of that. Here the
standby runs **the plan itself** once, before it waits for the Lease:

* the plan's DataFrames are built a second time with the sources starting at the last
  ``records`` offsets of each partition (:func:`tail_offsets`), nothing before;
* the query runs with ``availableNow`` on a scratch checkpoint in the temporary directory, or
  beside the query's checkpoint when that is in an object store (never the query's checkpoint,
  never its consumer group's offsets: Spark's source commits none);
* its output is read the way the sink reads it, and dropped: nothing is produced, no transaction
  is started, no producer fenced; it runs what the main query runs (dead letters with its
  batches, a stateless plan's batch read once, :mod:`sluice_runtime.main_output`).

Best effort: a warm-up that fails or outlasts ``timeout`` is logged and stopped; the standby is
then as warm as it got (a plan that cannot run fails again, and is reported, when it starts).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sluice_runtime import checkpointstore
from sluice_runtime.frames import build_frames, query_name, source_topics
from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config
from sluice_runtime.main_output import main_output
from sluice_runtime.sink_exactly_once import batch_rows
from sluice_runtime.steps import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: records per source partition the warm-up reads
WARM_RECORDS = 100
WARM_TIMEOUT = 120.0


def starting_offsets(topic: str, watermarks: dict[int, tuple[int, int]], records: int) -> str:
    """Spark's ``startingOffsets`` JSON for the last ``records`` of every partition of ``topic``
    (``watermarks``: partition -> (low, high))."""
    offsets = {str(p): max(low, high - records) for p, (low, high) in sorted(watermarks.items())}
    return json.dumps({topic: offsets})


def tail_offsets(bootstrap: str, security: KafkaSecurity, topics: Iterable[str], records: int = WARM_RECORDS,
                 timeout: float = 10.0) -> dict[str, str]:
    """``startingOffsets`` per topic: the last ``records`` offsets of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**librdkafka_config(bootstrap, security), "group.id": "sluice-warm-up",
                         "enable.auto.commit": False})
    try:
        out: dict[str, str] = {}
        for topic in sorted(set(topics)):
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                continue
            marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                     for p in meta.partitions}
            out[topic] = starting_offsets(topic, marks, records)
        return out
    finally:
        consumer.close()


def scratch_location(checkpoint: str | None) -> str:
    """Where a warm-up keeps its scratch checkpoint: the temporary directory; beside the query's
    checkpoint (``<base>/warm-up/<random>``, never under ``epochs/``) when that is in an object
    store, whose checkpoint file manager refuses a local path."""
    if checkpoint is not None and checkpointstore.is_object_store(checkpoint):
        return checkpointstore.join(checkpoint, "warm-up", uuid.uuid4().hex[:12])
    return tempfile.mkdtemp(prefix="sluice-warm-up-")


def warm_up_plan(ctx: BuildContext, *, timeout: float = WARM_TIMEOUT,
                 cancel: threading.Event | None = None, checkpoint: str | None = None) -> float:
    """Run ``ctx.plan`` once over the tail of its sources on a scratch checkpoint (see the
    module; :func:`scratch_location` of the query's ``checkpoint``); return the seconds it took.
    ``cancel``: stop early when it is set (a standby that warms up late takes over)."""
    spark, plan = ctx.spark, ctx.plan
    started = time.monotonic()
    topics = source_topics(plan)
    scratch = scratch_location(checkpoint)
    queries: list[Any] = []
    try:
        warm_ctx = BuildContext(spark=spark, plan=plan, bootstrap=ctx.bootstrap, query_id=ctx.query_id,
                                security=ctx.security, consumer_group=ctx.consumer_group, avro=ctx.avro,
                                warm_offsets=tail_offsets(ctx.bootstrap, ctx.security, topics))
        frames = build_frames(plan, warm_ctx)
        sink = plan.sink

        def drop(built: DataFrame, partitions: int | None) -> None:
            del partitions
            if sink.delivery == "exactlyOnce":
                for _ in batch_rows(built):  # read as the exactly-once sink reads, then dropped
                    pass
            else:
                built.write.format("noop").mode("overwrite").save()

        # the shape the main query runs (:mod:`sluice_runtime.main_output`): dead letters with its
        # batches, a stateless plan's batch read once
        output = main_output(plan, warm_ctx, frames, list(warm_ctx.dead_letters))

        def consume(frame: DataFrame, batch_id: int) -> None:
            del batch_id
            output.write(frame, drop)

        writer = (output.frame.writeStream.queryName(query_name(ctx.query_id, "-warm-up"))
                  .outputMode(sink.output_mode).option("checkpointLocation", f"{scratch}/main")
                  .foreachBatch(consume).trigger(availableNow=True))
        queries.append(writer.start())
        deadline = started + timeout
        for q in queries:
            while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
                if q.awaitTermination(min(0.5, max(0.1, deadline - time.monotonic()))):
                    break
        for q in queries:
            if q.exception() is not None:
                log.warning("warm-up: query %s failed: %s", q.name, q.exception())
    except Exception as exc:
        log.warning("warm-up on the plan failed (the standby is less warm): %s", exc)
    finally:
        for q in queries:
            try:
                if q.isActive:
                    q.stop()
            except Exception as exc:  # stopping a failed query
                log.debug("warm-up: stop: %s", exc)
        _remove(scratch)
    return time.monotonic() - started


def _remove(scratch: str) -> None:
    if not checkpointstore.is_object_store(scratch):
        shutil.rmtree(scratch, ignore_errors=True)
        return
    try:
        checkpointstore.store_for(scratch).delete_prefix(scratch)
    except Exception as exc:  # scratch left behind: removed with the query's checkpoint
        log.warning("warm-up: cannot remove its scratch checkpoint %s: %s", scratch, exc)
