"""Exactly-once writers: the driver's one transactional producer against a transaction per output
partition written by the tasks (``SLUICE_EOS_WRITERS``, issue 31).

Measures, in one run on one SparkSession (``local[2]``: two task slots, no executor pods), with a
real Kafka broker it starts itself, the seconds each writer takes to write the same encoded batch
(``--records`` records of about 120 bytes over ``--partitions`` output partitions) to a topic of as
many partitions, interleaved (driver, tasks, driver, ...) after one unmeasured warm-up of each; every
batch is read back with ``read_committed`` and checked to hold exactly the records written. Prints
p50/p95 seconds and records/s per writer and the ratio tasks s / driver s (above 1: the tasks are
slower), with a batch large enough that the per-transaction cost is small (default)
and, with ``--small-records``, with small batches where it is not.

    python bench/bench_eos_writers.py [--records 400000] [--partitions 4] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench_runtime import interleaved  # noqa: E402


def frame(spark: Any, start: int, records: int, partitions: int) -> Any:
    return spark.range(start, start + records, numPartitions=partitions).selectExpr(
        "cast(id % 1000 as string) AS key",
        "to_json(named_struct('order_id', concat('o', cast(id as string)), 'customer', "
        "concat('c', cast(id % 97 as string)), 'amount', id % 17, 'note', repeat('x', 40))) AS value")


def count_committed(bootstrap: str, topic: str) -> int:
    """Records visible to a read_committed reader (the high watermarks of a fresh consumer's view
    would count aborted records and markers too: read them)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe([topic])
    n, idle = 0, time.monotonic()
    try:
        while time.monotonic() - idle < 3.0:
            batch = c.consume(10000, 0.5)
            good = [m for m in batch if m.error() is None]
            if good:
                n += len(good)
                idle = time.monotonic()
    finally:
        c.close()
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000, help="records in each batch")
    parser.add_argument("--partitions", type=int, default=4, help="output partitions of each batch")
    parser.add_argument("--pairs", type=int, default=5, help="driver/tasks pairs, run ABAB...")
    parser.add_argument("--small-records", type=int, default=2_000,
                        help="records of each small batch (0: no small-batch pairs)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sluice.core.compiler import compile_query
    from sluice.core.manifest import parse_manifest
    from sluice_dev.platform import kafka as kafka_component
    from sluice_dev.platform import sparkjars
    from sluice_runtime.eos_tasks import TaskSink
    from sluice_runtime.session import create_spark
    from sluice_runtime.sink_exactly_once import TransactionalSink

    state = Path(tempfile.mkdtemp(prefix="sluice-bench-eos-"))
    kafka_component.provision()
    bootstrap = kafka_component.start(state).env["SLUICE_KAFKA_BOOTSTRAP"]
    results: dict[str, Any] = {"records": args.records, "partitions": args.partitions,
                               "load_average_before": os.getloadavg()}
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        plan = compile_query(parse_manifest(
            "apiVersion: sluice.dev/v1alpha1\nkind: StreamingQuery\nmetadata: {name: b}\nspec:\n"
            "  sources: [{name: s, topic: t, schema: [{name: a, type: string}]}]\n"
            "  sql: SELECT a FROM s\n  sink: {topic: o}\n").spec)
        spark = create_spark(plan, "local[2]", {"spark.driver.memory": "2g"}, sparkjars.jar_paths())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        offset = 0

        def writer(kind: str, records: int) -> Any:
            def run() -> float:
                nonlocal offset
                topic = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
                for f in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
                    f.result()
                work = state / topic
                work.mkdir()
                (work / "metadata").write_text(json.dumps({"id": uuid.uuid4().hex}) + "\n")
                cls = TaskSink if kind == "tasks" else TransactionalSink
                sink = cls(bootstrap=bootstrap, topic=topic, query_id=topic, checkpoint=str(work))
                sink.start()
                batch = frame(spark, offset, records, args.partitions).cache()
                batch.count()  # computed once, outside the measurement: only the writing is timed
                offset += records
                try:
                    began = time.monotonic()
                    sink.write_batch(batch, 0)
                    seconds = time.monotonic() - began
                finally:
                    sink.close()
                    batch.unpersist()
                got = count_committed(bootstrap, topic)
                if got != records:
                    raise SystemExit(f"{kind}: {got} records visible, {records} written")
                return seconds
            return run

        for kind in ("driver", "tasks"):  # warm-up: JVM, Python workers, the broker's coordinators
            writer(kind, args.records // 4)()
        results["large"] = interleaved("driver", writer("driver", args.records),
                                       "tasks", writer("tasks", args.records), args.pairs)
        for label, secs in results["large"]["seconds_p50_p95"].items():
            print(f"{label}: {args.records / secs[0]:,.0f} records/s at p50", flush=True)
        if args.small_records:
            results["small"] = interleaved("driver", writer("driver", args.small_records),
                                           "tasks", writer("tasks", args.small_records), args.pairs)
    finally:
        kafka_component.stop(state)
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
