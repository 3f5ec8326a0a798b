"""A driver JVM maps the class-data-sharing archive written for it, and one that cannot use an
archive still starts and runs (real PySpark, real JVMs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sluice_dev.platform import classdata

pytestmark = pytest.mark.integration

#: a driver started the way the runtime starts one (PySpark's launcher, SPARK_SUBMIT_OPTS), a
#: query, then whether its JVM process maps the archive named in argv[1]
DRIVER = """
import sys
from pyspark import SparkContext
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
count = spark.range(1000).selectExpr("id % 7 as k").groupBy("k").count().count()
with open(f"/proc/{SparkContext._gateway.proc.pid}/maps") as maps:
    mapped = sys.argv[1] in maps.read()
spark.stop()
print(f"groups={count} mapped={mapped}")
"""


def start_driver(archive: Path) -> str:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_SUBMIT_OPTS": f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(archive)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_driver_jvm_maps_the_archive_written_for_this_jdk_and_pyspark() -> None:
    archive = classdata.provision(os.environ)
    assert start_driver(archive) == "groups=7 mapped=True"


def test_a_driver_jvm_starts_without_an_archive_it_cannot_use(tmp_path: Path) -> None:
    """A damaged archive (as one from another JDK build or class path): the JVM says so, maps
    nothing and runs the query as without an archive."""
    damaged = tmp_path / "damaged.jsa"
    data = bytearray(classdata.provision(os.environ).read_bytes()[:1 << 20])
    data[0:4] = b"\0\0\0\0"
    damaged.write_bytes(bytes(data))
    assert start_driver(damaged) == "groups=7 mapped=False"
