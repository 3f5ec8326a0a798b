"""A class-data-sharing archive of the driver's JVM: Spark's classes parsed once, at build time.

A driver JVM spends most of its first seconds loading, parsing and verifying some 15,000 of
Spark's classes. Java's class data sharing (CDS) keeps them, already parsed, in an archive the JVM
maps at start instead. The runtime image makes one at build time (``python -m
sluice_runtime.classdata --output /opt/sluice/spark-driver.jsa --kafka``): a JVM started the way
the driver's is (PySpark's launcher, Spark's jars directory on the class path) runs
:func:`exercise`, a small batch and streaming workload (SQL with generated code, JSON functions, a
windowed count with RocksDB state, ``foreachBatch``, the Kafka source's provider), and writes every
class it loaded when it exits (``-XX:ArchiveClassesAtExit``, a dynamic archive on top of the JDK's
own). The image names it to every driver JVM through ``SPARK_SUBMIT_OPTS``
(``-XX:SharedArchiveFile``, :func:`use_options`).

What an archive needs to be used: the same JVM build, and the same class path (the same jars,
sizes and modification times, in the same order) as when it was written; otherwise the JVM logs
``Unable to use shared archive`` once and starts without it, as a JVM without an archive does.
Classes that ``spark.jars`` adds (outside an image: the connector jars) are loaded by Spark's own
class loader, which Java 17 does not archive; they load as before.

Executors (:mod:`sluice_runtime.executor`) map the same archive. The JVM that writes it records
its class path beside it (``<archive>.classpath``, :func:`classpath_file`), and an executor's class
path starts with that one, followed by its own entries (Spark's configuration directory, the
connector jars). A driver run in local mode runs its tasks itself, so the archive holds the classes
a task needs (code generation, the state store, the Kafka consumer) as well as the driver's.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG = logging.getLogger(__name__)

#: where the runtime image keeps the driver's archive (beside its manifest)
IMAGE_ARCHIVE: Final = Path("/opt/sluice/spark-driver.jsa")
#: the streaming query of :func:`exercise` runs this many micro-batches
BATCHES: Final = 3
#: how long the JVM may take to write the archive once it is told to exit
DUMP_TIMEOUT_S: Final = 300.0

_OPTIONS_ENV: Final = "SPARK_SUBMIT_OPTS"
#: the JVM options that name an archive (to map, or to write)
ARCHIVE_FLAGS: Final = ("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=")


@dataclass(frozen=True)
class SharedArchive:
    """An archive and the class path of the JVM that wrote it (a JVM that maps the archive uses
    its application classes only when its own class path starts with that one)."""

    path: Path
    classpath: str


def classpath_file(archive: Path) -> Path:
    """Where the class path of the JVM that wrote ``archive`` is kept: beside it."""
    return archive.with_name(f"{archive.name}.classpath")


def named_archive(env: Mapping[str, str]) -> Path | None:
    """The archive ``SPARK_SUBMIT_OPTS`` names for drivers to map (the last one, as for the JVM)."""
    named = [opt.removeprefix(ARCHIVE_FLAGS[0]) for opt in shlex.split(env.get(_OPTIONS_ENV, ""))
             if opt.startswith(ARCHIVE_FLAGS[0])]
    return Path(named[-1]) if named else None


def find(env: Mapping[str, str]) -> SharedArchive | None:
    """The archive drivers map here (``SPARK_SUBMIT_OPTS``) with its recorded class path; None
    when none is named, or it or its class path is missing (an archive written before class
    paths were recorded)."""
    archive = named_archive(env)
    if archive is None or not archive.is_file():
        return None
    try:
        recorded = classpath_file(archive).read_text().strip()
    except OSError:
        return None
    return SharedArchive(archive, recorded) if recorded else None


def use_options(archive: Path) -> list[str]:
    """The JVM options that make a JVM map ``archive``."""
    return [f"-XX:SharedArchiveFile={archive}"]


def dump_options(env: Mapping[str, str], archive: Path) -> str:
    """``SPARK_SUBMIT_OPTS`` for the JVM that writes ``archive`` at exit: the options in ``env``
    without any other archive option (a JVM maps one archive or writes one, not both)."""
    kept = [opt for opt in shlex.split(env.get(_OPTIONS_ENV, ""))
            if not opt.startswith(ARCHIVE_FLAGS)]
    return shlex.join([*kept, f"-XX:ArchiveClassesAtExit={archive}"])


def session_settings() -> dict[str, str]:
    """The Spark settings of the JVM that writes the archive: the runtime's defaults, RocksDB
    state, two shuffle partitions."""
    from sluice.core import sizing

    from sluice_runtime.session import DEFAULTS

    return {**DEFAULTS, "spark.sql.streaming.stateStore.providerClass": sizing.ROCKSDB_PROVIDER,
            "spark.sql.shuffle.partitions": "2"}


def exercise(spark: SparkSession, scratch: Path, *, kafka: bool) -> None:
    """Load what a driver loads: a batch query with generated code and JSON functions, a
    streaming windowed count with state through ``foreachBatch``, and (``kafka``) the Kafka
    source's provider (its schema only: nothing connects to a broker)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    rows = spark.range(500).selectExpr(
        "id", "cast(id as string) as name", "timestamp_seconds(id) as ts")
    parsed = (rows.select(F.to_json(F.struct("*")).alias("json"))
              .select(F.from_json("json", "id long, name string, ts timestamp").alias("r"))
              .select("r.*"))
    parsed.groupBy(F.window("ts", "10 seconds")).agg(F.count("*"), F.max("name")).collect()

    def drop(frame: DataFrame, _batch: int) -> None:
        frame.collect()

    counts = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
              .withWatermark("timestamp", "1 second")
              .groupBy(F.window("timestamp", "1 second")).count())
    query = (counts.writeStream.outputMode("update").foreachBatch(drop)
             .option("checkpointLocation", str(scratch / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < BATCHES and time.monotonic() < deadline:
            query.awaitTermination(1)
    finally:
        query.stop()
    if kafka:
        source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
                  .option("subscribe", "sluice-classdata").load())
        source.select(F.col("value").cast("string")).schema.simpleString()


def write_archive(output: Path, *, kafka: bool) -> None:
    """Start a driver JVM that writes ``output`` when it exits, run :func:`exercise` in it, stop
    it and wait for the archive; record the JVM's class path beside it (:func:`classpath_file`).
    The archive appears whole or not at all (written beside, then renamed), after its class path.
    ``RuntimeError`` when the JVM wrote none."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    os.environ[_OPTIONS_ENV] = dump_options(os.environ, partial)
    builder = SparkSession.builder.master("local[2]").appName("sluice-classdata")
    for key, value in session_settings().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    recorded = str(jvm.java.lang.System.getProperty("java.class.path"))
    with tempfile.TemporaryDirectory(prefix="sluice-classdata-") as scratch:
        exercise(spark, Path(scratch), kafka=kafka)
    spark.stop()
    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if process is None:
        raise RuntimeError("PySpark started no JVM of its own: nothing writes the archive")
    if gateway is not None:
        gateway.shutdown()
    if process.stdin is not None:
        process.stdin.close()  # PySpark's gateway exits when its stdin closes
    process.wait(timeout=DUMP_TIMEOUT_S)
    if not partial.is_file():
        raise RuntimeError(f"the JVM wrote no archive {partial} (exit status {process.returncode})")
    classpath_file(partial).write_text(recorded + "\n")
    classpath_file(partial).replace(classpath_file(output))
    partial.replace(output)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sluice_runtime.classdata",
        description="write the driver JVM's class-data-sharing archive")
    parser.add_argument("--output", type=Path, default=IMAGE_ARCHIVE, help="the archive to write")
    parser.add_argument("--kafka", action="store_true",
                        help="load the Kafka source's provider too (on the class path in an image)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    write_archive(args.output, kafka=args.kafka)
    LOG.info("wrote %s (%d MB) in %.0f s", args.output, args.output.stat().st_size // 2**20,
             time.monotonic() - started)
    return 0


if __name__ == "__main__":  # pragma: no cover - the image build's entry point
    sys.exit(main())
