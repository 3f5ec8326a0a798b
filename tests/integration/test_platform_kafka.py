"""The local platform's Kafka broker is a real broker: topics, produce/consume, transactions."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sluice_dev.platform import kafka as kafka_platform
from sluice_dev.platform.common import PlatformError, pid_alive

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)


def read_to_end(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 30.0
) -> list[tuple[str | None, str]]:
    """(key, value) of every record of a one-partition topic, up to its end for ``isolation``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("test"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    records: list[tuple[str | None, str]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message: Message | None = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                raise AssertionError(f"consumer error: {error}")
            key = message.key()
            value = message.value()
            assert value is not None
            records.append((key.decode() if key is not None else None, value.decode()))
        raise AssertionError(f"did not reach the end of {topic} within {timeout}s; read {records}")
    finally:
        consumer.close()


def test_create_produce_consume(kafka: str) -> None:
    topic = unique("plain")
    create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "acks": "all"})
    sent = [(f"k{i}", f"value-{i}") for i in range(5)]
    delivered: list[str] = []
    for key, value in sent:
        producer.produce(
            topic,
            key=key,
            value=value,
            on_delivery=lambda err, msg: delivered.append("ok" if err is None else str(err)),
        )
    assert producer.flush(30) == 0
    assert delivered == ["ok"] * len(sent)

    assert read_to_end(kafka, topic) == sent
    metadata = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 1


def test_transactions_commit_and_abort(kafka: str) -> None:
    topic = unique("txn")
    create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("txn-producer")})
    producer.init_transactions(30)

    producer.begin_transaction()
    producer.produce(topic, key="a", value="committed-1")
    producer.produce(topic, key="b", value="committed-2")
    producer.commit_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key="x", value="aborted")
    producer.flush(30)  # the aborted record really reaches the log
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key="c", value="committed-3")
    producer.commit_transaction(30)

    assert read_to_end(kafka, topic, isolation="read_committed") == [
        ("a", "committed-1"),
        ("b", "committed-2"),
        ("c", "committed-3"),
    ]
    # Without isolation the aborted record is there: the broker did filter it above.
    assert ("x", "aborted") in read_to_end(kafka, topic, isolation="read_uncommitted")


def test_open_transaction_is_invisible_to_read_committed(kafka: str) -> None:
    topic = unique("open-txn")
    create_topic(kafka, topic)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("txn-producer")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key="p", value="pending")
    producer.flush(30)
    try:
        assert read_to_end(kafka, topic, isolation="read_committed") == []
    finally:
        producer.abort_transaction(30)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_start_on_busy_port_fails_naming_kafka_and_its_log(tmp_path: Path, busy_port: int) -> None:
    with pytest.raises(PlatformError) as caught:
        kafka_platform.start(tmp_path, port=busy_port)
    error = caught.value
    log_path = tmp_path / "kafka" / "kafka.log"
    assert error.component == "kafka"
    assert error.log_path == log_path
    assert str(error).startswith("kafka: ")
    assert str(log_path) in str(error)
    assert str(busy_port) in log_path.read_text()
    kafka_platform.stop(tmp_path)


def test_start_without_java_fails_naming_kafka(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(PlatformError, match=r"^kafka: java not found") as caught:
        kafka_platform.start(tmp_path)
    assert caught.value.component == "kafka"


def test_broker_that_exits_fails_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_platform, "BROKER_JVM_OPTS", ("-XX:+NoSuchSluiceOption",))
    with pytest.raises(PlatformError, match="process exited with code") as caught:
        kafka_platform.start(tmp_path)
    log_path = tmp_path / "kafka" / "kafka.log"
    assert caught.value.component == "kafka"
    assert caught.value.log_path == log_path
    assert "NoSuchSluiceOption" in str(caught.value)  # the log's tail is part of the message
    assert not (tmp_path / "kafka" / "kafka.pid").exists()


def test_start_recovers_after_a_crash(tmp_path: Path) -> None:
    first = kafka_platform.start(tmp_path)
    try:
        pid = int(first.info["pid"])
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)

        second = kafka_platform.start(tmp_path)
        assert second.info["pid"] != first.info["pid"]
        bootstrap = second.env["SLUICE_KAFKA_BOOTSTRAP"]
        topic = unique("after-crash")
        create_topic(bootstrap, topic)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, key="k", value="v")
        assert producer.flush(30) == 0
        del producer  # disconnect before the broker stops
        assert read_to_end(bootstrap, topic) == [("k", "v")]
    finally:
        kafka_platform.stop(tmp_path)
    kafka_platform.stop(tmp_path)  # idempotent
    assert not (tmp_path / "kafka" / "kafka.pid").exists()
