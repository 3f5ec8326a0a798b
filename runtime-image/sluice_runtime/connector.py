"""Spark's Kafka connector (``spark-sql-kafka-0-10``): which version goes with the installed PySpark,
and the fallback that lets Spark resolve it when nothing else puts it on the classpath.

The runtime image ships the connector in PySpark's own ``jars`` directory, and tests hand the
jars over with ``--jars``. ``sluice run`` on a developer machine may have neither: with
``--resolve-connector`` the runtime then sets ``spark.jars.packages`` to the connector's Maven
coordinates, and Spark's own resolver (Ivy) downloads it into ``~/.ivy2*`` on the first run.

Which connector version goes with which Spark is recorded in :mod:`sluice_runtime.pairing`, which
the image (``runtime-image/Dockerfile``) and the development cache
(``devtools/sluice_dev/platform/sparkjars.py``) follow too: for Spark 4.3.0, whose own connector is
not published on Maven Central as reachable here, the newest published one (4.2.0). The fallback
asks for ``spark-avro`` too (avro sources and sinks), in the version that record pairs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from sluice_runtime import pairing

SCALA: Final = pairing.SCALA
ARTIFACT: Final = pairing.by_name("kafka").artifact
#: PySpark version -> connector version to use with it, when that Spark's own is not published
CONNECTOR_VERSIONS: Final[dict[str, str]] = {pairing.SPARK: pairing.by_name("kafka").version}
#: the connector's transitive dependencies that PySpark already ships (in another version): never
#: resolve a second copy (Spark itself excludes its own modules such as spark-tags)
EXCLUDES: Final[tuple[str, ...]] = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.scala-lang:scala-library",
    f"org.scala-lang.modules:scala-parallel-collections_{SCALA}",
    "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java",
    "at.yawk.lz4:lz4-java",
    "org.lz4:lz4-java",
    "com.google.code.findbugs:jsr305",
)
#: settings through which the caller already provides jars or packages
PROVIDING_CONF: Final = ("spark.jars", "spark.jars.packages")


def connector_version(pyspark_version: str) -> str:
    return CONNECTOR_VERSIONS.get(pyspark_version, pyspark_version)


def coordinates(pyspark_version: str) -> str:
    """``org.apache.spark:spark-sql-kafka-0-10_2.13:<version>`` for the given PySpark."""
    return f"org.apache.spark:{ARTIFACT}:{connector_version(pyspark_version)}"


def avro_coordinates(pyspark_version: str) -> str:
    """``org.apache.spark:spark-avro_2.13:<version>``: the recorded one for the image's Spark, else
    the given PySpark's own."""
    avro = pairing.by_name("avro")
    version = avro.version if pyspark_version == pairing.SPARK else pyspark_version
    return f"{avro.group}:{avro.artifact}:{version}"


def packages_conf(pyspark_version: str) -> dict[str, str]:
    """Spark settings that make Spark resolve the connector and ``spark-avro`` (network access on
    first use)."""
    packages = f"{coordinates(pyspark_version)},{avro_coordinates(pyspark_version)}"
    return {"spark.jars.packages": packages, "spark.jars.excludes": ",".join(EXCLUDES)}


def installed_pyspark() -> tuple[str, Path] | None:
    """(version, ``jars`` directory) of the installed PySpark, found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None
    return version, Path(next(iter(spec.submodule_search_locations))) / "jars"


def shipped(jars_dir: Path) -> bool:
    """True when PySpark's ``jars`` directory already holds the connector (the runtime image)."""
    return any(jars_dir.glob(f"{ARTIFACT}-*.jar"))


def fallback_conf(
    jars: Iterable[str],
    conf: Mapping[str, str],
    pyspark: tuple[str, Path] | None = None,
    submit_args: str = "",
) -> dict[str, str]:
    """``spark.jars.packages`` for the connector, unless jars, ``spark.jars``/``spark.jars.packages``,
    ``--jars``/``--packages`` in ``PYSPARK_SUBMIT_ARGS`` (``submit_args``) or PySpark itself
    already provide it ({} then, and when PySpark is not installed)."""
    if list(jars) or any(conf.get(key) for key in PROVIDING_CONF):
        return {}
    if any(opt in submit_args.split() for opt in ("--jars", "--packages")):
        return {}
    pyspark = pyspark or installed_pyspark()
    if pyspark is None or shipped(pyspark[1]):
        return {}
    return packages_conf(pyspark[0])
