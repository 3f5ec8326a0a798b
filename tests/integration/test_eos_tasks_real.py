"""Exactly-once output written by the tasks, on real PySpark (local[2]) and a real broker: each
output partition of a batch in its own transaction with its marker; a replayed batch writes nothing
twice, even when only some of its partitions were committed; an older attempt's open transaction is
aborted by the newer one; a driver run fenced by a newer one (a zombie) cannot commit; a replay
whose layout changed is refused. Output is read with ``read_committed``. Nothing skips."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from sluice_runtime import eos_markers as em
from sluice_runtime.eos_tasks import TaskBatch, TaskSink, write_partition, writer_partitions
from sluice_runtime.sink_exactly_once import FencedError

from tests.support.runtime import consume, create_topic, shared_spark, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _checkpoint(tmp_path: Path) -> str:
    (tmp_path / "metadata").write_text(json.dumps({"id": unique("ck")}) + "\n")
    return str(tmp_path)


def _frame(spark: Any, start: int, count: int, partitions: int) -> Any:
    return spark.range(start, start + count, numPartitions=partitions).selectExpr(
        "cast(id % 7 as string) AS key", "concat('v', cast(id as string)) AS value")


def _values(bootstrap: str, topic: str, expect: int | None = None) -> Counter[str]:
    return Counter(v.decode() for _, v, _ in consume(bootstrap, topic, expect=expect, idle=2.0))


def _sink(kafka: str, topic: str, checkpoint: str, query: str) -> TaskSink:
    sink = TaskSink(bootstrap=kafka, topic=topic, query_id=query, checkpoint=checkpoint)
    sink.start()
    return sink


def _marker(kafka: str, group: str, topic: str) -> em.PartitionMarker:
    c = Consumer({"bootstrap.servers": kafka, "group.id": group, "isolation.level": "read_committed"})
    try:
        found = c.committed([TopicPartition(topic, 0)], timeout=30)[0]
        return em.PartitionMarker.parse(found.offset, found.metadata)
    finally:
        c.close()


def test_each_partition_is_written_once_and_a_replayed_batch_writes_nothing(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    topic = unique("eos-tasks")
    create_topic(kafka, topic, partitions=2)
    sink = _sink(kafka, topic, _checkpoint(tmp_path), unique("q"))
    try:
        assert sink.write_batch(_frame(spark, 0, 300, 3), 0) is True
        assert sum(r.rows for r in sink.last_partitions) == 300 and len(sink.last_partitions) == 3
        assert sink.write_batch(_frame(spark, 300, 200, 2), 1) is True
        # Spark replays batch 1 (the driver died before its commit log entry): nothing twice
        assert sink.write_batch(_frame(spark, 300, 200, 2), 1) is False
        assert sink.skipped == [1] and all(r.skipped for r in sink.last_partitions)
        values = _values(kafka, topic, expect=500)
        assert values == Counter(f"v{i}" for i in range(500))
        # each partition's marker: its last batch, that batch's partition count, the driver run
        markers = [_marker(kafka, em.marker_group_of(_marker_group(sink), p), topic) for p in range(3)]
        assert [(m.batch, m.partitions, m.run) for m in markers] == [
            (1, 2, sink.run), (1, 2, sink.run), (0, 3, sink.run)]
    finally:
        sink.close()


def _marker_group(sink: TaskSink) -> str:
    from sluice_runtime.sink_exactly_once import checkpoint_id, marker_group

    return marker_group(sink.query_id, checkpoint_id(sink.checkpoint), sink.consumer_group)


def test_a_batch_replayed_after_some_partitions_committed_writes_only_the_others(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    topic = unique("eos-tasks")
    create_topic(kafka, topic)
    sink = _sink(kafka, topic, _checkpoint(tmp_path), unique("q"))
    try:
        sink.write_batch(_frame(spark, 0, 90, 3), 0)
        # batch 1's partition 1 committed by a task whose driver then died (the same rows Spark
        # computes again for it on the replay: the batch's offsets are in the checkpoint)
        rows = writer_partitions(_frame(spark, 90, 90, 3)).rdd.mapPartitionsWithIndex(
            lambda i, it: [[(r[0], r[1]) for r in it]] if i == 1 else []).collect()[0]
        sink._await_start()
        batch = TaskBatch(client=sink.client, producer=sink.producer, topic=topic,
                          transactional_base=sink.transactional_base, marker_group=_marker_group(sink),
                          fence_group_metadata=sink.member.metadata(), fence_group=sink.member.group,
                          batch=1, partitions=3, run="the-dead-run", transaction_timeout_ms=60000)
        assert rows and [r.rows for r in write_partition(batch, 1, rows)] == [len(rows)]
        # the replay reads the same records, its source partitions in another order (as a Kafka
        # source's come after a driver restart): each task still gets the same rows
        replay = _frame(spark, 90, 90, 3).orderBy("value", ascending=False).repartition(3)
        assert sink.write_batch(replay, 1) is True
        assert [(r.partition, r.skipped) for r in sink.last_partitions] == [
            (0, False), (1, True), (2, False)]
        assert sum(r.rows for r in sink.last_partitions) == 90 - len(rows)
        assert _values(kafka, topic, expect=180) == Counter(f"v{i}" for i in range(180))
        # the same replay with two partitions instead of three: which rows are out cannot be told
        with pytest.raises(Exception, match=r"LayoutChanged|output partitions"):
            _replay_of_batch_2_with_another_layout(spark, sink, kafka, topic)
    finally:
        sink.close()


def _replay_of_batch_2_with_another_layout(spark: Any, sink: TaskSink, kafka: str, topic: str) -> None:
    batch = TaskBatch(client=sink.client, producer=sink.producer, topic=topic,
                      transactional_base=sink.transactional_base, marker_group=_marker_group(sink),
                      fence_group_metadata=sink.member.metadata(), fence_group=sink.member.group,
                      batch=2, partitions=3, run="the-dead-run", transaction_timeout_ms=60000)
    list(write_partition(batch, 0, [("k", "late")]))
    sink.write_batch(_frame(spark, 180, 10, 2), 2)


def test_a_newer_attempt_aborts_what_an_older_one_left_open(spark: Any, kafka: str, tmp_path: Path) -> None:
    topic = unique("eos-tasks")
    create_topic(kafka, topic)
    sink = _sink(kafka, topic, _checkpoint(tmp_path), unique("q"))
    try:
        # an attempt at partition 0 that produced and hangs (a lost executor) with its transaction open
        hung = Producer({"bootstrap.servers": kafka, "transaction.timeout.ms": 600000,
                         "transactional.id": em.task_transactional_id(sink.transactional_base, 0)})
        hung.init_transactions(30)
        hung.begin_transaction()
        for i in range(5):
            hung.produce(topic, value=f"hung{i}".encode())
        hung.flush(10)
        # the retried batch: its partition 0 fences the hung attempt and aborts its records; without
        # that, read_committed readers would wait for the hung transaction's 10 min timeout
        assert sink.write_batch(_frame(spark, 0, 40, 2), 0) is True
        assert _values(kafka, topic, expect=40) == Counter(f"v{i}" for i in range(40))
    finally:
        sink.close()


def test_a_driver_fenced_by_a_newer_one_cannot_commit(spark: Any, kafka: str, tmp_path: Path) -> None:
    topic = unique("eos-tasks")
    create_topic(kafka, topic)
    checkpoint, query = _checkpoint(tmp_path), unique("q")
    zombie = _sink(kafka, topic, checkpoint, query)
    live = None
    try:
        assert zombie.write_batch(_frame(spark, 0, 20, 2), 0) is True
        live = _sink(kafka, topic, checkpoint, query)  # the next driver of the query identity
        assert live.write_batch(_frame(spark, 20, 20, 2), 1) is True
        # the zombie comes back with a batch of its own: its tasks' fence commit is refused
        with pytest.raises(FencedError, match="fenced"):
            zombie.write_batch(_frame(spark, 1000, 20, 2), 2)
        assert zombie.fenced
        assert live.write_batch(_frame(spark, 40, 20, 2), 2) is True
        assert _values(kafka, topic, expect=60) == Counter(f"v{i}" for i in range(60))
    finally:
        zombie.close()
        if live is not None:
            live.close()


def test_a_hand_off_fences_the_previous_version_s_tasks_and_starts_after_its_recorded_batch(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice.core.records import PreviousVersion
    from sluice_runtime.kafka_security import KafkaSecurity
    from sluice_runtime.replace import HandOffError, fence_and_read_marker

    topic, group = unique("eos-tasks"), unique("group")
    create_topic(kafka, topic)
    checkpoint = _checkpoint(tmp_path)
    previous = TaskSink(bootstrap=kafka, topic=topic, query_id=unique("q"), checkpoint=checkpoint,
                        consumer_group=group)
    previous.start()
    try:
        for batch in (0, 1):
            previous.write_batch(_frame(spark, batch * 10, 10, 2), batch)
        (tmp_path / "commits").mkdir()
        (tmp_path / "commits" / "0").write_text("v1\n{}\n")  # Spark recorded batch 0, not yet 1
        record = PreviousVersion(version=1, plan_hash="h", checkpoint=checkpoint, consumer_group=group,
                                 transactional_id="sluice-t", sink_topic=topic, exactly_once=True)
        with pytest.raises(HandOffError, match="batch 1, which its checkpoint does not record"):
            fence_and_read_marker(record, checkpoint, kafka, KafkaSecurity(), writers="tasks")
        (tmp_path / "commits" / "1").write_text("v1\n{}\n")
        assert fence_and_read_marker(record, checkpoint, kafka, KafkaSecurity(), writers="tasks") == 2
        with pytest.raises(FencedError):  # the previous version's driver is fenced for good
            previous.write_batch(_frame(spark, 20, 10, 2), 2)
        assert _values(kafka, topic, expect=20) == Counter(f"v{i}" for i in range(20))
    finally:
        previous.close()


def test_a_switch_from_the_driver_s_writer_skips_what_it_committed_and_fences_it(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice_runtime.sink_exactly_once import TransactionalSink

    topic, query = unique("eos-tasks"), unique("q")
    create_topic(kafka, topic)
    checkpoint = _checkpoint(tmp_path)
    driver = TransactionalSink(bootstrap=kafka, topic=topic, query_id=query, checkpoint=checkpoint)
    driver.start()
    tasks = None
    try:
        for batch in (0, 1):
            assert driver.write_batch(_frame(spark, batch * 10, 10, 2), batch) is True
        tasks = _sink(kafka, topic, checkpoint, query)  # the next driver, with SLUICE_EOS_WRITERS=tasks
        # Spark replays batch 1 (the old driver died before recording it): the driver-side marker has it
        assert tasks.write_batch(_frame(spark, 10, 10, 2), 1) is False and tasks.skipped == [1]
        assert tasks.write_batch(_frame(spark, 20, 10, 2), 2) is True
        with pytest.raises(FencedError):  # the old driver's producer was fenced by the switch
            driver.write_batch(_frame(spark, 500, 10, 2), 2)
        assert _values(kafka, topic, expect=30) == Counter(f"v{i}" for i in range(30))
    finally:
        driver.close()
        if tasks is not None:
            tasks.close()
