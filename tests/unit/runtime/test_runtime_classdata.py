"""The JVM options that write and map the driver's class-data-sharing archive."""

from __future__ import annotations

import shlex
from pathlib import Path

from sluice_runtime import classdata


def test_a_driver_maps_the_archive_it_is_given() -> None:
    assert classdata.use_options(Path("/opt/sluice/spark-driver.jsa")) == [
        "-XX:SharedArchiveFile=/opt/sluice/spark-driver.jsa"]


def test_the_writing_jvm_keeps_the_other_options_and_writes_the_archive_at_exit() -> None:
    env = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -Dname='a b'"}
    options = shlex.split(classdata.dump_options(env, Path("/tmp/out.jsa")))
    assert options == ["-XX:TieredStopAtLevel=1", "-Dname=a b", "-XX:ArchiveClassesAtExit=/tmp/out.jsa"]


def test_the_writing_jvm_maps_no_archive_of_its_own() -> None:
    """A JVM maps an archive or writes one: the image's (or a test run's) mapping option is
    dropped, as is an earlier writing option."""
    env = {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/opt/sluice/spark-driver.jsa -Xmx1g "
                                "-XX:ArchiveClassesAtExit=/tmp/old.jsa"}
    assert shlex.split(classdata.dump_options(env, Path("/tmp/new.jsa"))) == [
        "-Xmx1g", "-XX:ArchiveClassesAtExit=/tmp/new.jsa"]


def test_without_options_only_the_archive_is_written() -> None:
    assert classdata.dump_options({}, Path("/x.jsa")) == "-XX:ArchiveClassesAtExit=/x.jsa"


def test_the_archive_drivers_map_is_the_last_one_spark_submit_opts_names() -> None:
    env = {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/a.jsa -Xmx1g -XX:SharedArchiveFile=/b.jsa"}
    assert classdata.named_archive(env) == Path("/b.jsa")
    assert classdata.named_archive({"SPARK_SUBMIT_OPTS": "-Xmx1g"}) is None
    assert classdata.named_archive({}) is None


def test_an_archive_is_found_with_the_class_path_recorded_beside_it(tmp_path: Path) -> None:
    archive = tmp_path / "spark-driver.jsa"
    env = {"SPARK_SUBMIT_OPTS": f"-XX:SharedArchiveFile={archive}"}
    assert classdata.find(env) is None  # named, not there
    archive.write_bytes(b"archive")
    assert classdata.find(env) is None  # written before class paths were recorded: not used
    assert classdata.classpath_file(archive) == tmp_path / "spark-driver.jsa.classpath"
    classdata.classpath_file(archive).write_text("/py/conf:/py/jars/a.jar\n")
    assert classdata.find(env) == classdata.SharedArchive(archive, "/py/conf:/py/jars/a.jar")
    assert classdata.find({}) is None
