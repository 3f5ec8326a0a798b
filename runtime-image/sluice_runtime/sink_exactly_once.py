"""Exactly-once Kafka sink: ``foreachBatch`` + a transactional confluent-kafka producer.

* ``transactional.id``: the one the operator assigned (``SLUICE_TRANSACTIONAL_ID``), else
  ``sluice-<query id>``. Every driver of the same query identity uses the same id, so a newer
  driver's ``init_transactions()`` aborts whatever an older one left open and bumps the producer
  epoch; the older driver (a zombie) is fenced and can never commit again.
* Each batch is written in one transaction together with a commit marker:
  ``send_offsets_to_transaction`` commits offset ``batch id + 1`` on partition 0 of the sink topic
  for the marker group ``<consumer group>.eos.<checkpoint id>`` (consumer group from
  ``SLUICE_CONSUMER_GROUP``), else ``sluice-eos-<query id>-<checkpoint id>``; the checkpoint id is
  the Spark query id stored in the checkpoint's ``metadata`` file, so a new checkpoint starts a
  new sequence. The marker becomes visible atomically with the records.
* When Spark replays a batch (it crashed after the transaction committed but before
  ``commits/N``), the marker says that batch is already committed, and the batch is skipped.

Output must be read with ``isolation.level=read_committed``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class FencedError(RuntimeError):
    """Another driver with the same query identity took over; this one must not write."""


def default_transactional_id(query_id: str) -> str:
    """The transactional id when the operator did not assign one."""
    return f"sluice-{query_id}"


def marker_group(query_id: str, checkpoint_id: str, consumer_group: str | None = None) -> str:
    """The group holding the commit marker: under the query's consumer group when it has one."""
    if consumer_group:
        return f"{consumer_group}.eos.{checkpoint_id}"
    return f"sluice-eos-{query_id}-{checkpoint_id}"


def checkpoint_id(checkpoint: str | Path) -> str:
    """The Spark query id recorded in the checkpoint (stable across restarts)."""
    from sluice_runtime import checkpointstore as cs

    meta = cs.store_for(checkpoint).read(cs.join(checkpoint, "metadata"))
    if meta is None:
        raise FileNotFoundError(cs.join(checkpoint, "metadata"))
    return str(json.loads(meta.decode("utf-8").splitlines()[0])["id"])


def checkpoint_exists(checkpoint: str | Path) -> bool:
    """Whether Spark started a query on the checkpoint (its ``metadata`` is there)."""
    from sluice_runtime import checkpointstore as cs

    return cs.store_for(checkpoint).exists(cs.join(checkpoint, "metadata"))


def committed_offsets(consumer: Any, partitions: list[Any], attempts: int = 10) -> Any:
    """A group's committed offsets (``read_committed``: pending transactional commits resolved
    first). A group coordinator that is still loading or moving (a broker that just started)
    answers with a retriable error: ask again."""
    from confluent_kafka import KafkaError, KafkaException

    coordinator = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                   KafkaError.COORDINATOR_NOT_AVAILABLE}
    for attempt in range(attempts):
        try:
            return consumer.committed(partitions, timeout=30)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (err.code() in coordinator or err.retriable())
            if not retriable or attempt == attempts - 1:
                raise
            log.info("exactly-once sink: marker group not ready (%s), retrying", exc)
            time.sleep(min(0.2 * 2**attempt, 3.0))
    raise AssertionError("unreachable")


#: the optional columns of an encoded batch besides ``key`` and ``value``: a row's own topic and
#: headers (a dead letter written with its batch, :func:`sluice_runtime.pipeline.with_dead_letters`)
ROUTED = ("topic", "headers")


class OutRecord(NamedTuple):
    """One record to produce: ``topic`` None for the sink's topic, ``headers`` None for none."""

    key: Any
    value: Any
    topic: str | None = None
    headers: list[tuple[str, bytes | None]] | None = None


def is_routed(frame: DataFrame) -> bool:
    """Whether an encoded batch's rows name their own topic (and carry headers)."""
    return "topic" in frame.columns


def out_record(row: Any, routed: bool) -> OutRecord:
    """A Spark row of an encoded batch as the producer takes it (``bytes`` for ``bytearray``)."""
    if not routed:
        return OutRecord(producible(row[0]), producible(row[1]))
    headers = row[3]
    return OutRecord(producible(row[0]), producible(row[1]), row[2],
                     None if headers is None else [(h[0], producible(h[1])) for h in headers])


def produce(producer: Any, topic: str, record: OutRecord) -> None:
    """Produce ``record`` (to ``topic`` unless it names its own), waiting while the queue is full."""
    extra = {} if record.headers is None else {"headers": record.headers}
    while True:
        try:
            producer.produce(record.topic or topic, value=record.value, key=record.key, **extra)
            return
        except BufferError:
            producer.poll(0.05)


def batch_rows(frame: DataFrame) -> Iterator[OutRecord]:
    """An encoded batch's records, one partition at a time (a batch may be larger than the
    driver's memory), the next one computed while this one is consumed. Binary columns (an Avro
    value) come as ``bytearray``, which the producer refuses: they are given as ``bytes``."""
    routed = is_routed(frame)
    columns = ["key", "value", *ROUTED] if routed else ["key", "value"]
    return (out_record(r, routed) for r in frame.select(*columns).toLocalIterator(prefetchPartitions=True))


def producible(data: Any) -> Any:
    """What the producer accepts: ``bytes`` for a binary column's ``bytearray``."""
    return bytes(data) if isinstance(data, bytearray) else data


class TransactionalSink:
    """Writes each micro-batch in one Kafka transaction; skips batches already committed."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        query_id: str,
        checkpoint: str,
        security: KafkaSecurity | None = None,
        transactional_id: str | None = None,
        consumer_group: str | None = None,
        transaction_timeout_ms: int = 60000,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.query_id = query_id
        self.checkpoint = checkpoint
        self.security = security or KafkaSecurity()
        self.transactional_id = transactional_id or default_transactional_id(query_id)
        self.consumer_group = consumer_group
        self.transaction_timeout_ms = transaction_timeout_ms
        self._producer: Any = None
        self._consumer: Any = None
        self._group: str | None = None
        self.last_committed: int | None = None
        self.fenced = False
        self.skipped: list[int] = []
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        #: seconds the last batch took in all (``batch``: Spark's job, producing, committing),
        #: waiting for the producer's start (``init``: a takeover's first batch) and committing its
        #: transaction (``commit``)
        self.last_timings: dict[str, float] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def init(self) -> None:
        """Initialise transactions (fences any older driver of this query identity)."""
        from confluent_kafka import Producer

        conf: dict[str, Any] = {
            "linger.ms": 20,
            "compression.type": "lz4",
            # the cluster's producer settings (librdkafka names) replace the defaults above
            **librdkafka_config(self.bootstrap, self.security, "producer"),
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "enable.idempotence": True,
        }
        self._producer = Producer(conf)
        self._producer.init_transactions(30)
        log.info("exactly-once sink: initialised transactional.id %s", conf["transactional.id"])

    def fence(self) -> int | None:
        """:meth:`init`, then read the batch marker: the last batch committed under this
        transactional id and checkpoint (final now that every older producer is fenced)."""
        self.init()
        self._ensure_marker()
        return self.last_committed

    def start(self) -> None:
        """:meth:`init` (and the marker read, when the checkpoint exists) in the background, while
        the query starts; the first write waits for it. Nothing is written before it is done, so
        an older driver is fenced before this one's first transaction, as with :meth:`init`."""
        def run() -> None:
            try:
                self.init()
                if checkpoint_exists(self.checkpoint):
                    self._ensure_marker()
            except BaseException as exc:  # re-raised by the first write
                self._start_error = exc

        self._starting = threading.Thread(target=run, name="eos-sink-start", daemon=True)
        self._starting.start()

    def _await_start(self) -> None:
        if self._starting is None:
            return
        self._starting.join()
        self._starting = None
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            self._producer = self._consumer = None
            raise error

    def _ensure_marker(self) -> None:
        if self._consumer is not None:
            return
        from confluent_kafka import Consumer, TopicPartition

        self._group = marker_group(self.query_id, checkpoint_id(self.checkpoint), self.consumer_group)
        self._consumer = Consumer(
            {
                **librdkafka_config(self.bootstrap, self.security),
                "group.id": self._group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        committed = committed_offsets(self._consumer, [TopicPartition(self.topic, 0)])
        offset = committed[0].offset if committed else -1
        self.last_committed = offset - 1 if offset is not None and offset > 0 else None
        log.info("exactly-once sink: group %s, last committed batch %s", self._group, self.last_committed)

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            if not self.fenced:
                try:
                    self._producer.flush(10)
                except Exception as exc:  # fenced or broker gone: nothing left to deliver
                    log.info("exactly-once sink: close: %s", exc)
            self._producer = None

    # -- writing ---------------------------------------------------------------------------
    def write_batch(self, frame: DataFrame, batch_id: int) -> bool:
        """Write an encoded (key, value[, topic, headers]) frame; False when the batch was already
        committed."""
        started = time.monotonic()
        self.last_timings = {}
        written = self.write_rows(batch_rows(frame), batch_id)
        self.last_timings["batch"] = time.monotonic() - started
        return written

    def write_rows(self, rows: Any, batch_id: int) -> bool:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if self.fenced:
            raise FencedError(f"query {self.query_id}: producer fenced by a newer driver")
        waiting = time.monotonic()
        self._await_start()
        self.last_timings["init"] = time.monotonic() - waiting
        if self._producer is None:
            self.init()
        self._ensure_marker()
        if self.last_committed is not None and batch_id <= self.last_committed:
            log.info("exactly-once sink: batch %s already committed, skipped", batch_id)
            self.skipped.append(batch_id)
            return False
        producer = self._producer
        try:
            producer.begin_transaction()
            for record in rows:  # OutRecords, or plain (key, value) pairs
                produce(producer, self.topic, record if type(record) is OutRecord else OutRecord(*record))
                producer.poll(0)
            committing = time.monotonic()
            marker = [TopicPartition(self.topic, 0, batch_id + 1)]
            producer.send_offsets_to_transaction(marker, self._consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
            self.last_timings["commit"] = time.monotonic() - committing
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            # a producer fenced between two transactions learns it when it next produces: the
            # error then is the local _FATAL ("Unable to produce message"), not flagged fatal
            fatal = bool(err is not None and hasattr(err, "fatal") and (
                err.fatal() or err.code() == KafkaError._FATAL))
            if fatal or "fenced" in str(exc).lower():
                self.fenced = True
                raise FencedError(
                    f"query {self.query_id}: transactional producer fenced (a newer driver took over): {exc}"
                ) from exc
            try:
                producer.abort_transaction(30)
            except KafkaException:
                log.exception("exactly-once sink: abort failed")
            raise
        except Exception:
            # the batch itself failed while its rows were read (a record that fails the query, an
            # avro source's unknown schema id): nothing of it may stay in an open transaction
            try:
                producer.abort_transaction(30)
            except KafkaException:
                log.exception("exactly-once sink: abort failed")
            raise
        self.last_committed = batch_id
        return True
