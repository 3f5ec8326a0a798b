"""Avro benchmark: the windowed aggregation of ``bench_runtime.py`` over Avro records, Avro out.

Measures, in one run and on one SparkSession (``local[2]``), interleaved after one unmeasured
warm-up of each side:

(a) the plan-built pipeline, avro source (Confluent wire format, every writer schema of the subject
    resolved against the pinned reader schema, malformed records tagged) and avro sink, against
(b) the same query written by hand in PySpark: strip the 5 header bytes, ``from_avro`` with the one
    schema, ``to_avro`` behind a fixed header (the "usual home-made trick" of issue 30);
(c) with ``--json-pairs N``: the plan-built pipeline on the same records as JSON in and out, against
    (a);
(d) with ``--protobuf-pairs N``: the plan-built pipeline on the same records as Protobuf in and out
    (the schema registered as ``.proto`` text, pinned by the operator's registry client, decoded and
    encoded in Python UDFs: ``sluice_runtime.protobuf``), against the JSON pipeline of (c).

Each side reads the whole topic once (available-now); the ratio is ``b seconds / a seconds``
(plan-built throughput over hand-written; the issue's target: Sluice within 10 %, at least 0.90).
It starts its own Kafka broker and schema registry (``sluice_dev.platform``) in a temporary state
directory and uses the cached connector jars (spark-avro among them).

    python bench/bench_avro.py [--records 500000] [--pairs 3] [--json-pairs 3] [--protobuf-pairs 0]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for sub in ("operator", "runtime-image", "devtools"):
    sys.path.insert(0, str(ROOT / sub))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runtime import SQL, interleaved, send  # noqa: E402

ORDER = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
BASE_MILLIS = 1767261600_000  # 2026-01-01T10:00:00Z
ORDER_PROTO = """\
syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  string order_id = 1;
  string customer = 2;
  double amount = 3;
  google.protobuf.Timestamp ts = 4;
}
"""


def spec(topic: str, out: str, fmt: str) -> str:
    schema = "" if fmt != "json" else """
      schema:
        - {name: order_id, type: string}
        - {name: customer, type: string}
        - {name: amount, type: double}
        - {name: ts, type: timestamp}"""
    return f"""\
apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {{name: bench, namespace: bench}}
spec:
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {topic}
      format: {fmt}{schema}
      eventTime: {{column: ts, watermark: 1 minute}}
      malformed: {{policy: skip}}
  sql: "{SQL}"
  sink: {{topic: {out}, format: {fmt}, outputMode: update}}
"""


def build_plan(topic: str, out: str, fmt: str, reader: Any = None) -> Any:
    from sluice.core.compiler import CompileTarget, compile_query
    from sluice.core.manifest import parse_manifest

    target = CompileTarget(schemas={reader.subject: reader} if reader is not None else {})
    return compile_query(parse_manifest(spec(topic, out, fmt)).spec, target)


def fill(bootstrap: str, topic: str, n: int, encode: Any) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    started = time.monotonic()
    for i in range(n):
        record = {"order_id": f"o{i}", "customer": f"c{i % 50}", "amount": i % 97 + 0.5,
                  "ts": BASE_MILLIS + (i // 100) * 1000}
        send(p, topic, encode(record), i)
    assert p.flush(120) == 0
    return time.monotonic() - started


def avro_encoder(schema_id: int) -> Any:
    import fastavro

    parsed = fastavro.parse_schema(ORDER)
    header = struct.pack(">bI", 0, schema_id)

    def encode(record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, parsed, record)
        return out.getvalue()

    return encode


def protobuf_encoder(descriptor: str, schema_id: int) -> Any:
    from google.protobuf import message_factory
    from sluice.core.formats import protobuf as core

    cls = message_factory.GetMessageClass(core.message(descriptor, "bench.Order"))
    header = struct.pack(">bI", 0, schema_id) + b"\x00"  # message indexes [0]

    def encode(record: dict[str, Any]) -> bytes:
        message = cls(order_id=record["order_id"], customer=record["customer"], amount=record["amount"])
        message.ts.FromMilliseconds(record["ts"])
        return header + message.SerializeToString()

    return encode


def json_encode(record: dict[str, Any]) -> bytes:
    ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["ts"] // 1000))
    return json.dumps({**record, "ts": ts}).encode()


def run_plan(spark: Any, plan: Any, bootstrap: str, work: Path, avro: Any) -> float:
    from sluice_runtime.pipeline import build_pipeline

    started = time.monotonic()
    pipe = build_pipeline(spark, plan, checkpoint=str(work / uuid.uuid4().hex), bootstrap=bootstrap,
                          query_id=f"bench-{uuid.uuid4().hex[:8]}", available_now=True, avro=avro)
    for q in pipe.all_queries():
        q.awaitTermination()
        if q.exception():
            raise RuntimeError(str(q.exception()))
    return time.monotonic() - started


def run_by_hand(spark: Any, topic: str, out: str, bootstrap: str, work: Path, sink_schema: str,
                sink_id: int) -> float:
    """The same query as a PySpark user would write it with one fixed schema each way."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    started = time.monotonic()
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").load())
    payload = F.expr("substring(value, 6, length(value) - 5)")
    rows = raw.select(from_avro(payload, json.dumps(ORDER), {"mode": "PERMISSIVE"}).alias("r")).select("r.*")
    agg = (rows.withWatermark("ts", "1 minute")
           .groupBy(F.window("ts", "1 minute").alias("w"), "customer")
           .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")))
    header = F.lit(bytearray(struct.pack(">bI", 0, sink_id)))
    value = F.concat(header, to_avro(F.struct("w", "customer", "n", "total"), sink_schema))
    q = (agg.select(value.alias("value")).writeStream.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
         .option("checkpointLocation", str(work / uuid.uuid4().hex))
         .outputMode("update").trigger(availableNow=True).start())
    q.awaitTermination()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000, help="records in each topic")
    parser.add_argument("--pairs", type=int, default=3, help="plan/hand pairs (avro), run ABAB...")
    parser.add_argument("--json-pairs", type=int, default=3, help="avro/json pairs (both plan-built)")
    parser.add_argument("--protobuf-pairs", type=int, default=0,
                        help="protobuf/json pairs (both plan-built; needs --json-pairs > 0)")
    args = parser.parse_args()

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from sluice.core.plan.model import RegistrySchema
    from sluice_dev.platform import kafka as kafka_component
    from sluice_dev.platform import registry as registry_component
    from sluice_dev.platform import sparkjars
    from sluice_runtime.avro import AvroSettings, Registry
    from sluice_runtime.session import create_spark

    # the Python workers of the Protobuf UDFs run this interpreter (its packages), as the image's do
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    state = Path(tempfile.mkdtemp(prefix="sluice-bench-avro-"))
    kafka_component.provision()
    bootstrap = kafka_component.start(state).env["SLUICE_KAFKA_BOOTSTRAP"]
    results: dict[str, Any] = {"records": args.records, "load_average_before": os.getloadavg()}
    try:
        url = registry_component.start(state).env["SLUICE_SCHEMA_REGISTRY_URL"]
        client = SchemaRegistryClient({"url": url, "timeout": 30})
        jars = sparkjars.jar_paths()
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        subject = f"{topic}-value"
        reader_id = client.register_schema(subject, Schema(json.dumps(ORDER), "AVRO"))
        found = client.lookup_schema(subject, Schema(json.dumps(ORDER), "AVRO"))
        reader = RegistrySchema.model_validate(
            {"subject": subject, "schema": json.dumps(ORDER), "id": reader_id, "version": found.version})
        results["fill_seconds_avro"] = round(fill(bootstrap, topic, args.records, avro_encoder(reader_id)), 1)
        avro_plan = build_plan(topic, f"{topic}-out-avro", "avro", reader)
        sink_schema = avro_plan.sink.value_schema.schema_
        sink_id = client.register_schema(avro_plan.sink.value_schema.subject, Schema(sink_schema, "AVRO"))
        settings = AvroSettings(registry=Registry(url), sink_schema_id=sink_id)
        spark = create_spark(avro_plan, "local[2]", {"spark.driver.memory": "2g"}, jars)
        work = state / "work"
        work.mkdir()

        def plan() -> float:
            return run_plan(spark, avro_plan, bootstrap, work, settings)

        def hand() -> float:
            return run_by_hand(spark, topic, f"{topic}-out-hand", bootstrap, work, sink_schema, sink_id)

        hand()
        plan()
        results["avro_plan_vs_hand"] = interleaved("plan", plan, "hand", hand, args.pairs)
        if args.json_pairs > 0:
            json_topic = f"{topic}-json"
            results["fill_seconds_json"] = round(fill(bootstrap, json_topic, args.records, json_encode), 1)
            json_plan = build_plan(json_topic, f"{json_topic}-out", "json")

            def as_json() -> float:
                return run_plan(spark, json_plan, bootstrap, work, None)

            as_json()
            results["avro_vs_json"] = interleaved("avro", plan, "json", as_json, args.json_pairs)
            if args.protobuf_pairs > 0:
                from sluice.operator.registry import RegistryClient

                registry = RegistryClient(url)
                proto_topic = f"{topic}-protobuf"
                proto_id = registry.register(f"{proto_topic}-value", ORDER_PROTO, "PROTOBUF")
                pinned = registry.latest(f"{proto_topic}-value")  # as the operator pins it
                assert pinned.descriptor is not None
                results["fill_seconds_protobuf"] = round(fill(
                    bootstrap, proto_topic, args.records, protobuf_encoder(pinned.descriptor, proto_id)), 1)
                proto_plan = build_plan(proto_topic, f"{proto_topic}-out", "protobuf", pinned)
                sink = proto_plan.sink.value_schema
                proto_settings = AvroSettings(sink_schema_id=registry.register(sink.subject, sink.schema_,
                                                                               sink.schema_type))

                def as_protobuf() -> float:
                    return run_plan(spark, proto_plan, bootstrap, work, proto_settings)

                as_protobuf()
                results["protobuf_vs_json"] = interleaved("protobuf", as_protobuf, "json", as_json,
                                                          args.protobuf_pairs)
        spark.stop()
        results["load_average_after"] = os.getloadavg()
    finally:
        registry_component.stop(state)
        kafka_component.stop(state)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
