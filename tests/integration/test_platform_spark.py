"""PySpark runs a structured streaming query from Kafka to Kafka through the cached connector."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sluice_dev.platform import sparkjars

pytestmark = pytest.mark.integration

SCHEMA = "id INT, item STRING, qty INT"


def run_streaming_query(jars: list[str], bootstrap: str, source: str, sink: str, workdir: str) -> float:
    """Run the Kafka-to-Kafka query to completion in a fresh Spark driver; return its duration.

    Called in a spawned process: a driver JVM's class path is fixed when the first session of the
    Python process starts it, so another test's earlier session must not decide whether the
    connector jars are on it.
    """
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-platform-test")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", f"{workdir}/warehouse")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    try:
        started = time.monotonic()
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
        )
        parsed = stream.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o"))
        output = parsed.where("o.qty > 0").select(
            F.col("o.id").cast("string").alias("key"),
            F.to_json(F.struct(F.upper("o.item").alias("item"), (F.col("o.qty") * 10).alias("total"))).alias(
                "value"
            ),
        )
        query = (
            output.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", f"{workdir}/checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(300):
            query.stop()
            raise RuntimeError("the availableNow query did not finish within 300s")
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(f"the query failed: {failure}")
        return time.monotonic() - started
    except Exception as exc:
        # Py4J errors do not pickle; hand the parent their text.
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
    finally:
        spark.stop()


def test_spark_conf_points_at_cached_local_jars(spark_jars: list[Path]) -> None:
    conf = sparkjars.spark_conf()
    assert set(conf) == {"spark.jars"}
    assert conf["spark.jars"].split(",") == [str(path) for path in spark_jars]
    names = [path.name for path in spark_jars]
    assert any(name.startswith("spark-sql-kafka-0-10_2.13-") for name in names)
    assert any(name.startswith("kafka-clients-") for name in names)
    shipped = {path.name for path in sparkjars.pyspark_jars_dir().glob("*.jar")}
    assert not shipped & set(names)
    assert all(path.is_file() and path.is_relative_to(sparkjars.cache_path()) for path in spark_jars)


def test_streaming_query_reads_one_topic_and_writes_another(
    spark_jars: list[Path], kafka: str, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"spark-in-{suffix}", f"spark-out-{suffix}"
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (source, sink)]).values():
        future.result(timeout=30)

    producer = Producer({"bootstrap.servers": kafka})
    orders = [{"id": i, "item": item, "qty": i * 2} for i, item in enumerate(["apple", "pear", "fig"], 1)]
    for order in orders:
        producer.produce(source, key=str(order["id"]), value=json.dumps(order))
    producer.produce(source, key="bad", value=json.dumps({"id": 99, "item": "skip", "qty": 0}))
    assert producer.flush(30) == 0

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        job = pool.submit(
            run_streaming_query, [str(p) for p in spark_jars], kafka, source, sink, str(tmp_path)
        )
        took = job.result(timeout=600)
    print(f"streaming query (availableNow) took {took:.1f}s")

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"check-{suffix}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    received: list[tuple[str, dict[str, object]]] = []
    try:
        consumer.subscribe([sink])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                break
            assert error is None, error
            key, value = message.key(), message.value()
            assert key is not None and value is not None
            received.append((key.decode(), json.loads(value)))
    finally:
        consumer.close()

    assert received == [
        ("1", {"item": "APPLE", "total": 20}),
        ("2", {"item": "PEAR", "total": 40}),
        ("3", {"item": "FIG", "total": 60}),
    ]


def spark_defaults(keys: list[str], checkpoint: str) -> tuple[dict[str, str], list[str]]:
    """The values a fresh SparkSession of the installed PySpark has for ``keys``, and the settings Spark
    writes into a checkpoint's offset log (a counting query over the rate source, run once); in a
    spawned process: no earlier session's settings."""
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        values = {key: str(spark.conf.get(key)) for key in keys}
        rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        counts = rate.groupBy((rate.value % 3).alias("k")).count()
        query = (counts.writeStream.outputMode("update").format("memory").queryName("pinned")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        first = sorted((Path(checkpoint) / "offsets").glob("[0-9]*"))[0]
        metadata = json.loads(first.read_text(encoding="utf-8").splitlines()[1])
        return values, sorted(metadata["conf"])
    finally:
        spark.stop()


def test_the_settings_a_plan_pins_are_the_installed_sparks_defaults_and_kinds(tmp_path: Path) -> None:
    """``sluice.core.plan.meaning``: the defaults for the installed Spark line are Spark's own (the
    session time zone aside: Sluice pins UTC instead of the JVM's zone), and the settings it calls
    ``checkpoint`` settings are exactly those Spark keeps in a checkpoint (besides the typed ones)."""
    import pyspark
    from sluice.core import sparkversion
    from sluice.core.plan import meaning

    pinned = meaning.DEFAULTS[sparkversion.line(pyspark.__version__)]
    keys = sorted(k for k in pinned if k != "spark.sql.session.timeZone")
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        actual, in_checkpoint = pool.submit(spark_defaults, keys, str(tmp_path / "cp")).result(timeout=300)
    assert actual == {k: pinned[k] for k in keys}
    assert pinned["spark.sql.session.timeZone"] == "UTC"
    checkpoint_kind = {m.key for m in meaning.MEANINGS if m.kind == "checkpoint"}
    typed = set(meaning.TYPED)
    kept = set(in_checkpoint)
    assert checkpoint_kind <= kept, checkpoint_kind - kept
    # every setting Spark keeps in a checkpoint is pinned (typed or in settings.conf), but three that
    # concern nothing a plan of Sluice's does (protobuf function extensions, the pruning of streaming
    # subplans by filters, source evolution: a changed source is a replace, never a restart)
    unpinned = kept - checkpoint_kind - typed
    assert unpinned == {"spark.sql.function.protobufExtensions.enabled",
                        "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
                        "spark.sql.streaming.queryEvolution.enableSourceEvolution"}, unpinned
    assert not {m.key for m in meaning.MEANINGS if m.kind == "result"} & kept
