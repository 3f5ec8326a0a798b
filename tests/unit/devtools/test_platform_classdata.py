"""The cache key of the class-data-sharing archive: whatever decides whether a JVM may map it."""

from __future__ import annotations

import os
from pathlib import Path

from sluice_dev.platform import classdata

JAVA = 'openjdk version "17.0.15" 2025-04-15\n'


def pyspark(tmp_path: Path) -> Path:
    root = tmp_path / "pyspark"
    (root / "jars").mkdir(parents=True)
    (root / "jars" / "spark-core_2.13-4.3.0.jar").write_bytes(b"core")
    (root / "jars" / "spark-sql_2.13-4.3.0.jar").write_bytes(b"sql")
    (root / "version.py").write_text('__version__ = "4.3.0"\n')
    return root


def test_the_same_jdk_jars_and_workload_give_the_same_key(tmp_path: Path) -> None:
    root = pyspark(tmp_path)
    assert classdata.cache_key(JAVA, root, b"w") == classdata.cache_key(JAVA, root, b"w")


def test_another_jdk_build_gives_another_key(tmp_path: Path) -> None:
    root = pyspark(tmp_path)
    other = 'openjdk version "17.0.16" 2025-07-15\n'
    assert classdata.cache_key(JAVA, root, b"w") != classdata.cache_key(other, root, b"w")


def test_a_jar_added_replaced_or_touched_gives_another_key(tmp_path: Path) -> None:
    """The JVM refuses an archive when a class path jar's size or modification time changed."""
    root = pyspark(tmp_path)
    keys = {classdata.cache_key(JAVA, root, b"w")}
    (root / "jars" / "extra-1.0.jar").write_bytes(b"extra")
    keys.add(classdata.cache_key(JAVA, root, b"w"))
    (root / "jars" / "extra-1.0.jar").write_bytes(b"extra, longer")
    keys.add(classdata.cache_key(JAVA, root, b"w"))
    stat = (root / "jars" / "extra-1.0.jar").stat()
    os.utime(root / "jars" / "extra-1.0.jar", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    keys.add(classdata.cache_key(JAVA, root, b"w"))
    assert len(keys) == 4


def test_another_pyspark_or_workload_gives_another_key(tmp_path: Path) -> None:
    root = pyspark(tmp_path)
    before = classdata.cache_key(JAVA, root, b"w")
    assert classdata.cache_key(JAVA, root, b"another workload") != before
    (root / "version.py").write_text('__version__ = "4.3.1"\n')
    assert classdata.cache_key(JAVA, root, b"w") != before


def test_another_virtualenv_gives_another_key(tmp_path: Path) -> None:
    """The class path names the virtualenv's files: another one's archive is never mapped."""
    first, second = tmp_path / "a", tmp_path / "b"
    assert classdata.cache_key(JAVA, pyspark(first), b"w") != classdata.cache_key(JAVA, pyspark(second), b"w")


def test_only_the_most_recently_used_archives_stay(tmp_path: Path) -> None:
    for age, key in enumerate(["newest", "second", "third", "old", "older"]):
        directory = tmp_path / f"classdata-{key}"
        directory.mkdir()
        (directory / classdata.ARCHIVE).write_bytes(b"x")
        os.utime(directory, (10_000 - age, 10_000 - age))
    (tmp_path / "kafka-4.3.1").mkdir()  # another component's cache
    removed = classdata.prune(tmp_path, keep=3)
    assert sorted(d.name for d in removed) == ["classdata-old", "classdata-older"]
    assert sorted(d.name for d in tmp_path.iterdir()) == [
        "classdata-newest", "classdata-second", "classdata-third", "kafka-4.3.1"]
