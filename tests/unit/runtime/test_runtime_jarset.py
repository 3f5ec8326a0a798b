"""The one drop rule for resolved connector jars (image build and dev platform): sluice_runtime.jarset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sluice_dev.platform import sparkjars
from sluice_runtime import jarset

from tests.support import paths

_SPARK = ["netty-buffer-4.2.13.Final.jar", "slf4j-api-2.0.17.jar", "jcl-over-slf4j-2.0.17.jar",
          "httpcore-4.4.16.jar", "log4j-1.2-api-2.24.3.jar", "spark-core_2.13-4.3.0.jar"]


def test_a_jar_spark_ships_in_any_version_or_covers_is_left_out() -> None:
    decisions = jarset.decide(
        ["s3-2.35.4.jar", "netty-buffer-4.1.126.Final.jar", "httpcore-4.4.16.jar", "commons-logging-1.2.jar",
         "/x/log4j-1.2-api-2.20.0.jar", "hadoop-aws-3.5.0.jar"], _SPARK)
    assert [d.file for d in decisions] == sorted(
        ["s3-2.35.4.jar", "netty-buffer-4.1.126.Final.jar", "httpcore-4.4.16.jar", "commons-logging-1.2.jar",
         "log4j-1.2-api-2.20.0.jar", "hadoop-aws-3.5.0.jar"])
    assert [d.file for d in decisions if d.added] == ["hadoop-aws-3.5.0.jar", "s3-2.35.4.jar"]
    described = {d.file: d.describe() for d in decisions}
    assert described["s3-2.35.4.jar"] == "keep s3-2.35.4.jar"
    assert described["netty-buffer-4.1.126.Final.jar"] == (
        "skip netty-buffer-4.1.126.Final.jar: pyspark ships netty-buffer-4.2.13.Final")
    assert described["commons-logging-1.2.jar"] == (
        "skip commons-logging-1.2.jar: pyspark ships jcl-over-slf4j-2.0.17 (covers commons-logging)")
    # covered only when the covering jar is there
    assert [d.added for d in jarset.decide(["commons-logging-1.2.jar"], ["slf4j-api-2.0.17.jar"])] == [True]


def test_sets_are_added_in_order_and_a_jar_of_an_earlier_set_counts(tmp_path: Path) -> None:
    spark, kafka, s3a = (tmp_path / name for name in ("jars", "kafka", "s3a"))
    for directory, names in ((spark, _SPARK), (kafka, ["kafka-clients-3.9.2.jar", "slf4j-api-1.7.36.jar"]),
                             (s3a, ["kafka-clients-3.8.0.jar", "s3-2.35.4.jar", "commons-logging-1.2.jar"])):
        directory.mkdir()
        for name in names:
            (directory / name).write_bytes(name.encode())
    listing, out = tmp_path / "added.txt", tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(paths.REPO / "runtime-image/sluice_runtime/jarset.py"), "--spark", str(spark),
         "--into", str(out), "--list", str(listing), str(kafka), str(s3a)],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert listing.read_text().split() == ["kafka-clients-3.9.2.jar", "s3-2.35.4.jar"]
    assert sorted(p.name for p in out.iterdir()) == ["kafka-clients-3.9.2.jar", "s3-2.35.4.jar"]
    assert sorted(p.name for p in spark.iterdir()) == sorted(_SPARK)
    assert "s3a: skip kafka-clients-3.8.0.jar: pyspark ships kafka-clients-3.9.2" in result.stdout
    # without --into the jars go into Spark's directory itself
    assert jarset.main(["--spark", str(spark), str(kafka)]) == 0
    assert "kafka-clients-3.9.2.jar" in {p.name for p in spark.iterdir()}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert jarset.main(["--spark", str(spark), str(empty)]) == 1


def test_the_dev_platform_drops_by_the_same_rule(tmp_path: Path) -> None:
    spark, staging = tmp_path / "jars", tmp_path / "staging"
    spark.mkdir()
    staging.mkdir()
    for name in _SPARK:
        (spark / name).write_bytes(b"")
    for name in ("s3-2.35.4.jar", "netty-buffer-4.1.126.Final.jar", "httpcore-4.4.16.jar",
                 "commons-logging-1.2.jar"):
        (staging / name).write_bytes(b"")
    log = tmp_path / "provision.log"
    kept, substituted = sparkjars.drop_shipped(staging, spark, log)
    assert kept == ["s3-2.35.4.jar"] == [p.name for p in staging.iterdir()]
    assert substituted == [
        "commons-logging 1.2->jcl-over-slf4j 2.0.17", "netty-buffer 4.1.126.Final->4.2.13.Final"]
    lines = log.read_text().splitlines()
    assert "skip netty-buffer-4.1.126.Final.jar: pyspark ships netty-buffer-4.2.13.Final" in lines
