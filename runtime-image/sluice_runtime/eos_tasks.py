"""Exactly-once Kafka output written by the tasks: no output record passes through the driver.

The protocol (docs/exactly-once.md says what guarantees what):

* **Each task writes its partition of a batch in a transaction of its own**, with the
  transactional id ``<base>-p<partition>`` (:func:`~sluice_runtime.eos_markers.task_transactional_id`),
  the same for every batch and every driver run: a newer attempt's ``init_transactions()`` (a
  task retried by Spark, a speculative copy, the next driver's task) aborts what an older attempt
  left open and fences it.
* **A partition marker is committed in the same transaction** (offset ``batch + 1`` for the group
  ``<marker group>.p<partition>``, :mod:`sluice_runtime.eos_markers`). After ``init_transactions()``
  the marker is final; a partition whose marker already holds the batch is skipped, so a replayed
  batch writes only what is not out yet.
* **Driver runs are fenced through a consumer group of their own.** The active driver is the one
  static member (``group.instance.id``) of ``<marker group base>.writers``; a newer driver joining
  under the same instance id fences the older member at once. Every task transaction commits an
  offset for that group with the driver's member metadata (Kafka's KIP-447 check): a task of a
  fenced driver (a zombie) fails with ``FENCED_INSTANCE_ID`` and its transaction is aborted.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice_runtime import eos_markers as em
from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config
from sluice_runtime.sink_exactly_once import (
    ROUTED,
    FencedError,
    OutRecord,
    TransactionalSink,
    checkpoint_exists,
    checkpoint_id,
    committed_offsets,
    default_transactional_id,
    is_routed,
    marker_group,
    out_record,
    produce,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: the static member id of the active driver in its fence group
FENCE_INSTANCE = "active-driver"


def fence_group(query_id: str, consumer_group: str | None = None) -> str:
    """The consumer group whose single static member is the active driver of the query identity."""
    return f"{consumer_group}.eos.writers" if consumer_group else f"sluice-eos-{query_id}.writers"


@dataclass(frozen=True)
class TaskBatch:
    """What each task of a batch needs (shipped to the executors with the task)."""

    client: dict[str, Any]
    producer: dict[str, Any]
    topic: str
    transactional_base: str
    marker_group: str
    fence_group_metadata: bytes
    fence_group: str
    batch: int
    partitions: int
    run: str
    transaction_timeout_ms: int
    #: whether the rows name their own topic and carry headers (dead letters written with the batch)
    routed: bool = False


@dataclass(frozen=True)
class PartitionResult:
    partition: int
    rows: int
    skipped: bool


def read_marker(batch: TaskBatch, partition: int) -> tuple[em.PartitionMarker, bytes]:
    """Output partition ``partition``'s marker (``read_committed``), and the metadata its group's
    offsets are committed with."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**batch.client, "group.id": em.marker_group_of(batch.marker_group, partition),
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        found = committed_offsets(consumer, [TopicPartition(batch.topic, 0)])
        marker = em.PartitionMarker.parse(found[0].offset, found[0].metadata) if found else None
        return marker or em.PartitionMarker(None), bytes(consumer.consumer_group_metadata())
    finally:
        consumer.close()


def write_partition(batch: TaskBatch, partition: int, rows: Iterable[Any]) -> Iterator[PartitionResult]:
    """Write one output partition of a batch (runs in the task): its rows are :class:`OutRecord`
    or plain (key, value) pairs; yields what it did."""
    from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

    pending = iter(rows)
    first = next(pending, None)
    if first is None:  # nothing to write: no transaction, no marker (a replay finds it empty again)
        yield PartitionResult(partition, 0, skipped=False)
        return
    producer = Producer({
        "linger.ms": 20, "compression.type": "lz4", **batch.producer,
        "transactional.id": em.task_transactional_id(batch.transactional_base, partition),
        "transaction.timeout.ms": batch.transaction_timeout_ms, "enable.idempotence": True,
    })
    producer.init_transactions(60)  # fences every older attempt at this partition
    marker, marker_meta = read_marker(batch, partition)
    if em.decide(marker, batch.batch, batch.partitions, partition) is em.Decision.SKIP:
        yield PartitionResult(partition, 0, skipped=True)
        return
    committed = em.PartitionMarker(batch.batch, batch.partitions, batch.run)
    count = 0
    producer.begin_transaction()
    try:
        # the driver run's fence first: a zombie's task learns it before it writes anything
        producer.send_offsets_to_transaction(
            [TopicPartition(batch.topic, 0, batch.batch + 1)], batch.fence_group_metadata, 30)
        for record in itertools.chain([first], pending):
            produce(producer, batch.topic, record if type(record) is OutRecord else OutRecord(*record))
            count += 1
            producer.poll(0)
        producer.send_offsets_to_transaction(
            [TopicPartition(batch.topic, 0, batch.batch + 1, committed.metadata())], marker_meta, 30)
        producer.commit_transaction(120)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() in (KafkaError.FENCED_INSTANCE_ID,
                                                          KafkaError.UNKNOWN_MEMBER_ID):
            _abort(producer)
            raise RuntimeError(f"{em.FENCED_TEXT}: batch {batch.batch} partition {partition}: the "
                               f"driver run {batch.run} was fenced by a newer driver ({exc})") from exc
        if not (isinstance(err, KafkaError) and err.fatal()):
            _abort(producer)
        raise
    except BaseException:
        _abort(producer)
        raise
    yield PartitionResult(partition, count, skipped=False)


def _abort(producer: Any) -> None:
    from confluent_kafka import KafkaException

    try:
        producer.abort_transaction(30)
    except KafkaException as exc:  # fenced meanwhile: a newer attempt aborts it for us
        log.info("exactly-once tasks: abort: %s", exc)


def _run_partition(batch: TaskBatch, partition: int, rows: Iterable[Any]) -> Iterator[PartitionResult]:
    return write_partition(batch, partition, (out_record(r, batch.routed) for r in rows))


class FenceMember:
    """The active driver's membership of its fence group (joined when the term starts; a newer
    driver's join fences it). Once joined, only a thread of its own touches the consumer (a
    confluent-kafka consumer is not used from two threads at once): it polls the paused consumer so
    the membership stays alive, and keeps the member metadata the tasks commit with up to date."""

    def __init__(self, client: dict[str, Any], group: str, topic: str) -> None:
        self.client, self.group, self.topic = client, group, topic
        self.fenced = threading.Event()
        self._consumer: Any = None
        self._metadata: bytes | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def consumer(self) -> Any:
        return self._consumer

    def join(self, timeout: float = 60.0, keep: bool = True) -> None:
        """Join as the static member (fences the older one at once); ``keep``: keep the membership
        alive from a thread of its own until :meth:`close`."""
        from confluent_kafka import Consumer

        self._consumer = Consumer({
            **self.client, "group.id": self.group, "group.instance.id": FENCE_INSTANCE,
            "enable.auto.commit": False, "session.timeout.ms": 30000,
        })
        self._consumer.subscribe([self.topic])
        deadline = time.monotonic() + timeout
        while not self._consumer.assignment():
            if time.monotonic() > deadline:
                raise TimeoutError(f"exactly-once tasks: no assignment in {self.group} after {timeout:.0f}s")
            self._poll(0.1)
        self._consumer.pause(self._consumer.assignment())
        self._metadata = bytes(self._consumer.consumer_group_metadata())
        if keep:
            self._thread = threading.Thread(target=self._keep, name="eos-fence-member", daemon=True)
            self._thread.start()
        log.info("exactly-once tasks: joined %s as %s", self.group, FENCE_INSTANCE)

    def _poll(self, timeout: float) -> None:
        from confluent_kafka import KafkaException

        try:
            msg = self._consumer.poll(timeout)
        except KafkaException as exc:
            log.warning("exactly-once tasks: fenced by a newer driver: %s", exc)
            self.fenced.set()
            return
        if msg is not None and msg.error() is not None and msg.error().fatal():
            log.warning("exactly-once tasks: fenced by a newer driver: %s", msg.error())
            self.fenced.set()

    def _keep(self) -> None:
        while not self._stop.is_set() and not self.fenced.is_set():
            self._poll(0.5)
            if not self.fenced.is_set():
                self._metadata = bytes(self._consumer.consumer_group_metadata())

    def metadata(self) -> bytes:
        if self._metadata is None:
            raise RuntimeError(f"exactly-once tasks: not a member of {self.group}")
        return self._metadata

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._consumer is not None:
            self._consumer.close()  # a static member does not leave: the next driver replaces it
            self._consumer = None


def writer_partitions(frame: DataFrame, partitions: int | None = None) -> DataFrame:
    """The encoded (key, value[, topic, headers]) rows of a batch as its tasks write them: a
    replayed batch must give each task the same rows again, and the partitions of a Kafka source
    come in an order that changes across driver restarts, so the rows are hash-partitioned by their
    key (by their value when they have none: keyless rows spread too), into as many partitions as
    the batch has (``partitions`` when given). A key's rows stay together and in order."""
    from pyspark.sql import functions as F

    encoded = frame.select("key", "value", *(ROUTED if is_routed(frame) else ()))
    have = encoded.rdd.getNumPartitions()
    partitions = partitions or have
    if partitions <= 1:
        return encoded if have <= 1 else encoded.coalesce(1)
    by = F.coalesce(F.col("key").cast("binary"), F.col("value").cast("binary"))
    return encoded.repartition(partitions, by)


def fence_and_read_last_batch(client: dict[str, Any], group: str, topic: str) -> int | None:
    """Join ``group`` as its active driver (fences every task of the version that used it) and read
    the last batch any of its tasks committed (None: none)."""
    from confluent_kafka import TopicPartition

    member = FenceMember(client, group, topic)
    member.join(keep=False)
    try:
        found = committed_offsets(member.consumer, [TopicPartition(topic, 0)])
        offset = found[0].offset if found else None
        return offset - 1 if offset is not None and offset > 0 else None
    finally:
        member.close()


class TaskSink:
    """Exactly-once output written by the tasks (the driver only coordinates); the interface of
    :class:`~sluice_runtime.sink_exactly_once.TransactionalSink`."""

    def __init__(self, *, bootstrap: str, topic: str, query_id: str, checkpoint: str,
                 security: KafkaSecurity | None = None, transactional_id: str | None = None,
                 consumer_group: str | None = None, transaction_timeout_ms: int = 120000) -> None:
        self.topic, self.query_id, self.checkpoint = topic, query_id, checkpoint
        self.consumer_group = consumer_group
        self.transactional_base = transactional_id or default_transactional_id(query_id)
        self.transaction_timeout_ms = transaction_timeout_ms
        security = security or KafkaSecurity()
        self.client = librdkafka_config(bootstrap, security)
        self.producer = librdkafka_config(bootstrap, security, "producer")
        self.run = uuid.uuid4().hex[:12]
        self.member = FenceMember(self.client, fence_group(query_id, consumer_group), topic)
        #: the driver-side sink of the same query identity (a driver before a switch of writers):
        #: fenced at start, and its marker read, so a batch it committed is not written again
        self._driver_sink: TransactionalSink | None = TransactionalSink(
            bootstrap=bootstrap, topic=topic, query_id=query_id, checkpoint=checkpoint, security=security,
            transactional_id=self.transactional_base, consumer_group=consumer_group)
        self.driver_marker: int | None = None
        self._fenced = False
        self.last_committed: int | None = None
        self.skipped: list[int] = []
        self.last_timings: dict[str, float] = {}
        self.last_partitions: list[PartitionResult] = []
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None

    @property
    def fenced(self) -> bool:
        return self._fenced or self.member.fenced.is_set()

    def start(self) -> None:
        """Join the fence group in the background while the query starts (fences older drivers'
        tasks before this one's first write), and fence the driver-side producer of the query
        identity (a driver that wrote before the writers were switched)."""
        def run() -> None:
            try:
                assert self._driver_sink is not None
                self._driver_sink.init()
                if checkpoint_exists(self.checkpoint):
                    self._read_driver_marker()
                self.member.join()
            except BaseException as exc:  # re-raised by the first write
                self._start_error = exc

        self._starting = threading.Thread(target=run, name="eos-tasks-start", daemon=True)
        self._starting.start()

    def _await_start(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

    def _read_driver_marker(self) -> None:
        """The last batch the driver-side sink committed on this checkpoint (then it is closed)."""
        if self._driver_sink is None:
            return
        self._driver_sink._ensure_marker()
        self.driver_marker = self._driver_sink.last_committed
        self._driver_sink.close()
        self._driver_sink = None
        if self.driver_marker is not None:
            log.info("exactly-once tasks: the driver-side sink committed up to batch %s", self.driver_marker)

    def write_batch(self, frame: DataFrame, batch_id: int, partitions: int | None = None) -> bool:
        """Write an encoded (key, value[, topic, headers]) frame from its tasks, in ``partitions``
        writer partitions (the frame's own by default); False when every partition of it was
        already committed (by tasks, or by the driver-side sink before a switch)."""
        started = time.monotonic()
        self.last_timings = {}
        self._await_start()
        self._read_driver_marker()
        self.last_timings["init"] = time.monotonic() - started
        if self.fenced:
            raise FencedError(f"query {self.query_id}: a newer driver joined the fence group")
        if self.driver_marker is not None and batch_id <= self.driver_marker:
            log.info("exactly-once tasks: batch %s committed by the driver-side sink, skipped", batch_id)
            self.skipped.append(batch_id)
            return False
        routed = is_routed(frame)
        rdd = writer_partitions(frame, partitions).rdd
        batch = TaskBatch(
            client=self.client, producer=self.producer, topic=self.topic,
            transactional_base=self.transactional_base,
            marker_group=marker_group(self.query_id, checkpoint_id(self.checkpoint), self.consumer_group),
            fence_group_metadata=self.member.metadata(), fence_group=self.member.group, batch=batch_id,
            partitions=rdd.getNumPartitions(), run=self.run,
            transaction_timeout_ms=self.transaction_timeout_ms, routed=routed)
        try:
            results: list[PartitionResult] = rdd.mapPartitionsWithIndex(
                functools.partial(_run_partition, batch)).collect()
        except Exception as exc:
            if em.is_fenced_failure(str(exc)):
                self._fenced = True
                raise FencedError(f"query {self.query_id}: batch {batch_id}: a newer driver fenced this "
                                  "one's tasks") from exc
            raise
        self.last_partitions = sorted(results, key=lambda r: r.partition)
        self.last_timings["batch"] = time.monotonic() - started
        self.last_committed = batch_id
        written = [r for r in results if not r.skipped and r.rows]
        if results and not written and any(r.skipped for r in results):
            log.info("exactly-once tasks: batch %s already committed, skipped", batch_id)
            self.skipped.append(batch_id)
            return False
        return True

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._driver_sink is not None:
            self._driver_sink.close()
            self._driver_sink = None
        self.member.close()
