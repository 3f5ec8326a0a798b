"""A driver JVM maps the class-data-sharing archive written for it, and one that cannot use an
archive still starts and runs; an executor JVM loads Spark's classes from the driver's archive
(real PySpark, real JVMs)."""

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


#: what Spark's Kubernetes scheduler sets on an executor pod; the driver URL names a port nobody
#: listens on, so the executor starts, fails to register and exits
EXECUTOR_POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:9",
    "SPARK_EXECUTOR_ID": "1",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "query-exec-1",
}


def executor_class_sources(tmp_path: Path, submit_opts: str) -> list[str]:
    """Start ``sluice-runtime executor`` as in an executor pod (the archive drivers map named in
    ``SPARK_SUBMIT_OPTS``, as the image's variable names it), let it fail to reach the driver,
    and return where each class it loaded came from (``-Xlog:class+load``)."""
    log = tmp_path / "classes.log"
    env = {**os.environ, **EXECUTOR_POD_ENV, "SPARK_SUBMIT_OPTS": submit_opts,
           "SPARK_JAVA_OPT_0": f"-Xlog:class+load=info:file={log}"}
    done = subprocess.run([str(Path(sys.executable).parent / "sluice-runtime"), "executor"], env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert "KubernetesExecutorBackend" in done.stderr + done.stdout, done.stderr[-3000:]
    return [line.split(" source: ", 1)[1] for line in log.read_text().splitlines() if " source: " in line]


def test_an_executor_jvm_loads_spark_s_classes_from_the_driver_s_archive(tmp_path: Path) -> None:
    archive = classdata.provision(os.environ)
    with_archive = executor_class_sources(tmp_path, f"-XX:SharedArchiveFile={archive}")
    from_archive = [s for s in with_archive if s == "shared objects file (top)"]
    from_jars = [s for s in with_archive if s.startswith("file:")]
    # the executor's class path starts with the archive's: most classes come from it (a class
    # path that does not would load every one of Spark's classes from the jars)
    assert len(from_archive) > 2000 and len(from_jars) < 500, (len(from_archive), len(from_jars))
    without = executor_class_sources(tmp_path, "")
    assert "shared objects file (top)" not in without
    assert len([s for s in without if s.startswith("file:")]) > 2000
