"""``sluice-runtime purge --prefix s3a://bucket/<root>/<service>/<namespace>/<query>``: delete
every object of a deleted query's checkpoints (all its plan versions) from an object store.

The operator runs it as a pod of its own (``<query>-purge``) when a StreamingQuery with
``deletionPolicy: Delete`` whose checkpoints live in an object store is deleted, after its drivers
stopped: under the query's ServiceAccount and with the drivers' object-store settings, so that it
reaches the bucket exactly as they did (a key pair from a Secret, or the workload identity bound
to that ServiceAccount), and the operator itself needs no access to the bucket.

It starts a local Spark JVM only for S3A's SDK client (the same client, settings and credentials
chain as a driver's checkpoint), deletes the keys under the prefix, lists again, and ends with a
one-line JSON summary on stdout and in the container's termination message; exit 0 when nothing is
left under the prefix, 1 otherwise (2 for a refused prefix).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sluice_runtime import checkpointstore as cs
from sluice_runtime.config import object_store_conf

log = logging.getLogger(__name__)

#: where Kubernetes reads a container's termination message (terminationMessagePath's default)
TERMINATION_LOG = Path("/dev/termination-log")
#: a query's prefix has at least ``<service>/<namespace>/<query>`` under the store's root
MIN_DEPTH = 3


class PurgeRefused(ValueError):
    """A prefix the purge will not delete."""


@dataclass(frozen=True)
class Summary:
    prefix: str
    objects: int  # found before the deletion
    bytes: int
    left: int  # still listed after it
    seconds: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def check_prefix(prefix: str) -> str:
    """The prefix without a trailing slash; :class:`PurgeRefused` for anything that is not a
    query's prefix in an ``s3a://`` bucket (never a bucket, never a store's root)."""
    if not cs.is_object_store(prefix):
        raise PurgeRefused(f"--prefix: {prefix!r} is not an s3a:// location")
    clean = prefix.rstrip("/")
    try:
        _, key = cs.split_uri(clean)
    except ValueError as exc:
        raise PurgeRefused(f"--prefix: {exc}") from exc
    parts = [p for p in key.split("/") if p]
    if len(parts) < MIN_DEPTH or any(p in (".", "..") for p in parts):
        raise PurgeRefused(f"--prefix: {prefix!r} is not a query's prefix "
                           f"(<root>/<service>/<namespace>/<query>)")
    return clean


def spark_settings(prefix: str, env: Mapping[str, str], jars: Sequence[str]) -> dict[str, str]:
    """A small local JVM with the drivers' object-store settings."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "512m",  # Spark refuses a heap under 450 MiB
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
        **object_store_conf(prefix, env),
    }
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf


def purge(store: cs.CheckpointStore, prefix: str) -> Summary:
    """Delete everything under ``prefix`` in ``store``; what was there and what is left."""
    started = time.monotonic()
    before = store.listing(prefix)
    if before:
        store.delete_prefix(prefix)
    left = len(store.listing(prefix)) if before else 0
    return Summary(prefix=prefix, objects=len(before), bytes=sum(e.size for e in before), left=left,
                   seconds=round(time.monotonic() - started, 3))


def _report(text: str) -> None:
    print(text, flush=True)
    try:
        TERMINATION_LOG.write_text(text)
    except OSError:
        pass  # not in a pod


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="sluice-runtime purge", description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", required=True, help="s3a://bucket/<root>/<service>/<namespace>/<query>")
    parser.add_argument("--jars", default=os.environ.get("SLUICE_JARS", ""),
                        help="extra jars (the S3A jars outside the image)")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        prefix = check_prefix(args.prefix)
        settings = spark_settings(prefix, os.environ, [j for j in args.jars.split(",") if j.strip()])
    except (PurgeRefused, ValueError) as exc:
        _report(json.dumps({"prefix": args.prefix, "error": str(exc)}))
        return 2
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("sluice-purge")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        summary = purge(cs.S3Store.from_spark(), prefix)
    except Exception as exc:  # the store's answer, for the operator's event
        _report(json.dumps({"prefix": prefix, "error": f"{type(exc).__name__}: {exc}"[:900]}))
        return 1
    finally:
        spark.stop()
    _report(summary.to_json())
    log.info("purge: %d objects (%d bytes) under %s deleted in %.1fs, %d left", summary.objects,
             summary.bytes, prefix, summary.seconds, summary.left)
    return 0 if summary.left == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
