"""The platform's object store (s3proxy) for real: conditional writes, and a stateful PySpark query
whose checkpoint (offsets, commits, RocksDB state) lives in it through ``s3a://``, stopped and
resumed on the same checkpoint. Nothing skips: a store that cannot start fails the tests."""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sluice_dev.platform import objectstore as component
from sluice_runtime import pairing

from tests.integration.conftest import ObjectStore

pytestmark = pytest.mark.integration

KEYS = ("a", "b", "c")
PER_RUN = 300  # records per run, spread evenly over KEYS
PER_BATCH = 60  # maxOffsetsPerTrigger: five batches per run
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_the_store_is_the_platforms_and_refuses_bad_credentials(objectstore: ObjectStore) -> None:
    assert objectstore.endpoint.startswith("http://127.0.0.1:")
    assert objectstore.bucket == component.BUCKET
    assert set(objectstore.env) == {"SLUICE_S3_ENDPOINT", "SLUICE_S3_BUCKET", "SLUICE_S3_ACCESS_KEY",
                                    "SLUICE_S3_SECRET_KEY"}
    assert objectstore.client.head_bucket(objectstore.bucket)
    stranger = component.S3(objectstore.endpoint, objectstore.access_key, "not-the-secret")
    assert stranger.put(objectstore.bucket, "intruder", b"x").status == 403


def test_a_conditional_put_of_an_existing_key_is_refused(objectstore: ObjectStore) -> None:
    s3, bucket = objectstore.client, objectstore.bucket
    key = f"conditional/{uuid.uuid4().hex}/0.json"
    created = s3.put(bucket, key, b'{"v": 1}', if_none_match=True)
    assert created.status == 200, created.body
    refused = s3.put(bucket, key, b'{"v": 2}', if_none_match=True)
    assert refused.status == 412, refused.body
    assert b"PreconditionFailed" in refused.body
    assert s3.get(bucket, key).body == b'{"v": 1}'  # the first write stands
    overwritten = s3.put(bucket, key, b'{"v": 3}')  # unconditional: S3 overwrites
    assert overwritten.status == 200
    assert s3.get(bucket, key).body == b'{"v": 3}'
    assert list(s3.keys(bucket, key.rpartition("/")[0] + "/")) == [key]


def count_by_key(
    jars: list[str], bootstrap: str, topic: str, checkpoint: str, s3a: dict[str, str], workdir: str
) -> dict[str, Any]:
    """Run the counting query (Kafka -> groupBy(key).count() on RocksDB -> memory, complete mode: the
    mode in which the memory sink may recover from a checkpoint)
    with ``availableNow`` to the end of ``topic`` on ``checkpoint``; return the last count per key
    and the batches' durations.

    Called in a spawned process: a driver JVM's class path is fixed when the first session of the
    Python process starts it, so this driver gets both the Kafka connector and the S3A jars.
    """
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-objectstore-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", f"{workdir}/warehouse")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    )
    for key, value in s3a.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", PER_BATCH)
            .load()
        )
        counts = source.groupBy(F.col("key").cast("string").alias("k")).count()
        name = f"counts_{uuid.uuid4().hex[:8]}"
        query = (
            counts.writeStream.outputMode("complete").format("memory").queryName(name)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(300):
            query.stop()
            raise RuntimeError("the availableNow query did not finish within 300s")
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(f"the query failed: {failure}")
        rows = spark.sql(f"SELECT k, max(count) AS n FROM {name} GROUP BY k").collect()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        return {
            "counts": {row["k"]: int(row["n"]) for row in rows},
            "batches": [p["batchId"] for p in progress],
            "trigger_ms": [p["durationMs"]["triggerExecution"] for p in progress],
            "commit_ms": [p["durationMs"].get("walCommit", 0) + p["durationMs"].get("commitOffsets", 0)
                          for p in progress],
        }
    except Exception as exc:
        # Py4J errors do not pickle; hand the parent their text.
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
    finally:
        spark.stop()


def _produce(bootstrap: str, topic: str, start: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + PER_RUN):
        producer.produce(topic, key=KEYS[i % len(KEYS)], value=json.dumps({"i": i}))
    assert producer.flush(30) == 0


def _run(pool: ProcessPoolExecutor, jars: list[Path], *args: Any) -> dict[str, Any]:
    result: dict[str, Any] = pool.submit(count_by_key, [str(p) for p in jars], *args).result(timeout=600)
    return result


def test_s3a_jars_are_hadoop_aws_of_pysparks_hadoop_without_the_sdk_bundle(s3a_jars: list[Path]) -> None:
    names = {path.name for path in s3a_jars}
    assert f"hadoop-aws-{pairing.HADOOP}.jar" in names
    assert f"s3-{pairing.AWS_SDK}.jar" in names and f"sts-{pairing.AWS_SDK}.jar" in names
    assert any(name.startswith(f"spark-hadoop-cloud_{pairing.SCALA}-") for name in names)
    assert not any(name.startswith("bundle-") for name in names)
    from sluice_dev.platform import sparkjars

    shipped = {path.name for path in sparkjars.pyspark_jars_dir().glob("*.jar")}
    assert f"hadoop-client-api-{pairing.HADOOP}.jar" in shipped
    assert not shipped & names
    total = sum(path.stat().st_size for path in s3a_jars)
    print(f"{len(s3a_jars)} S3A jars, {total / 1e6:.1f} MB")
    assert total < 40e6  # the modules, not the ~700 MB bundle


def test_a_stateful_query_checkpoints_in_the_store_and_resumes_its_state(
    objectstore: ObjectStore, kafka: str, spark_jars: list[Path], s3a_jars: list[Path], tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"s3a-counts-{suffix}"
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    prefix = f"checkpoints/test-{suffix}"
    checkpoint = f"s3a://{objectstore.bucket}/{prefix}"
    s3a = component.s3a_spark_conf(objectstore.endpoint, objectstore.access_key, objectstore.secret_key)
    jars = [*spark_jars, *s3a_jars]
    per_key = PER_RUN // len(KEYS)

    context = multiprocessing.get_context("spawn")
    _produce(kafka, topic, 0)
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        first = _run(pool, jars, kafka, topic, checkpoint, s3a, str(tmp_path / "w1"))
    assert first["counts"] == {k: per_key for k in KEYS}
    assert first["batches"] == list(range(PER_RUN // PER_BATCH))

    keys = set(objectstore.client.keys(objectstore.bucket, prefix + "/"))
    for part in ("offsets", "commits", "state", "sources"):
        assert any(k.startswith(f"{prefix}/{part}/") for k in keys), (part, sorted(keys))
    assert f"{prefix}/metadata" in keys
    state = [k for k in keys if k.startswith(f"{prefix}/state/")]
    # RocksDB's provider uploads zipped snapshots (the default provider would write .delta files)
    assert any(k.endswith(".zip") for k in state) and not any(k.endswith(".delta") for k in state), state
    last = PER_RUN // PER_BATCH - 1
    assert f"{prefix}/commits/{last}" in keys and f"{prefix}/offsets/{last}" in keys

    # a new driver (a new JVM) on the same checkpoint: it resumes after the last committed batch,
    # and its counts continue from the state in the store instead of starting from zero
    _produce(kafka, topic, PER_RUN)
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        second = _run(pool, jars, kafka, topic, checkpoint, s3a, str(tmp_path / "w2"))
    assert second["batches"] == list(range(last + 1, last + 1 + PER_RUN // PER_BATCH))
    assert second["counts"] == {k: 2 * per_key for k in KEYS}
    keys = set(objectstore.client.keys(objectstore.bucket, prefix + "/"))
    assert f"{prefix}/commits/{second['batches'][-1]}" in keys

    # the same query on a local checkpoint, for a first rough comparison (printed, not asserted)
    local_topic = f"s3a-counts-local-{suffix}"
    for future in admin.create_topics([NewTopic(local_topic, 1, 1)]).values():
        future.result(timeout=30)
    _produce(kafka, local_topic, 0)
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        local = _run(pool, jars, kafka, local_topic, str(tmp_path / "cp-local"), {}, str(tmp_path / "w3"))
    assert local["counts"] == {k: per_key for k in KEYS}

    def summary(run: dict[str, Any]) -> str:
        steady = run["trigger_ms"][1:] or run["trigger_ms"]  # the first batch warms the JVM up
        commits = run["commit_ms"][1:] or run["commit_ms"]
        return (f"batch p50 {statistics.median(steady):.0f} ms (first {run['trigger_ms'][0]} ms), "
                f"walCommit+commitOffsets p50 {statistics.median(commits):.0f} ms")

    print(f"\ncheckpoint on s3proxy (s3a), first run:  {summary(first)}")
    print(f"checkpoint on s3proxy (s3a), resumed:    {summary(second)}")
    print(f"checkpoint on a local directory:         {summary(local)}")
