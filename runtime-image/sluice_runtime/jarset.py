"""Which resolved connector jars go next to Spark's own: the one drop rule of image and dev platform.

Maven resolves a connector set (the Kafka connector, the S3A jars: :mod:`sluice_runtime.pairing`)
with its transitive dependencies, many of which PySpark already ships in ``pyspark/jars`` (Scala,
Netty, slf4j, httpclient, ...), usually in another version. A resolved jar is left out when a jar
of Spark's (or one added before it) has the same artifact id, whatever the version, or when one
covers it under another name (:data:`COVERED_BY`), so that the classpath holds one copy of each
library and PySpark's own version wins.

Both users apply :func:`decide`: the runtime image's build (``runtime-image/Dockerfile`` runs this
file as a script in a side stage, before the package is installed, to pick the jars of each set
that PySpark's ``jars/`` lacks and list them for the version manifest) and the development caches
(``sluice_dev.platform.sparkjars.drop_shipped``). Standard library only, for that reason.

``python jarset.py [--spark DIR] [--into DIR] [--list FILE] SET_DIR...``
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: artifacts that PySpark carries under another artifact id: ``{artifact: the one covering it}``
#: (its ``jcl-over-slf4j`` holds the ``org.apache.commons.logging`` classes)
COVERED_BY: Final = {"commons-logging": "jcl-over-slf4j"}

# "kafka-clients-3.9.2.jar" -> ("kafka-clients", "3.9.2"): the version is the last part starting
# with digits and a dot ("spark-sql-kafka-0-10_2.13-4.2.0", "log4j-1.2-api-2.24.3"), with what
# follows ("4.1.118.Final-linux-x86_64"); else the first starting with a digit
_JAR_NAMES = (
    re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.[^-]*(?:-[^-]+)*)\.jar$"),
    re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[^-]+)*)\.jar$"),
)


@dataclass(frozen=True)
class Jar:
    file: str
    artifact: str
    version: str


def parse_jar(name: str) -> Jar | None:
    """The jar of a path or file name (``artifact-version.jar``), None when it is not one."""
    file = Path(name).name
    for pattern in _JAR_NAMES:
        match = pattern.match(file)
        if match:
            return Jar(file, match["artifact"], match["version"])
    return None


def parse_jars(names: Iterable[str]) -> tuple[Jar, ...]:
    return tuple(sorted((j for j in map(parse_jar, names) if j), key=lambda j: j.file))


@dataclass(frozen=True)
class Decision:
    """One resolved jar: added, or left out because ``present`` (a jar already there) covers it."""

    file: str
    present: Jar | None = None

    @property
    def added(self) -> bool:
        return self.present is None

    def describe(self) -> str:
        """``keep x.jar`` or ``skip x.jar: pyspark ships y-1.2`` (the lines the logs show)."""
        if self.present is None:
            return f"keep {self.file}"
        jar = parse_jar(self.file)
        covers = f" (covers {jar.artifact})" if jar and jar.artifact != self.present.artifact else ""
        return f"skip {self.file}: pyspark ships {self.present.artifact}-{self.present.version}{covers}"


def decide(candidates: Iterable[str], present: Iterable[str]) -> list[Decision]:
    """For each candidate jar name (sorted): left out when a jar of ``present`` (Spark's
    ``jars/``, by file name) has its artifact id or covers it (:data:`COVERED_BY`), else added;
    an added jar counts as present for the candidates after it."""
    there = {jar.artifact: jar for jar in parse_jars(present)}
    decisions: list[Decision] = []
    for name in sorted(Path(c).name for c in candidates):
        jar = parse_jar(name)
        artifact = jar.artifact if jar else Path(name).stem
        shipped = there.get(artifact) or there.get(COVERED_BY.get(artifact, ""))
        decisions.append(Decision(name, shipped))
        if shipped is None and jar is not None:
            there[artifact] = jar
    return decisions


def pyspark_jars() -> Path:
    """The installed PySpark's ``jars`` directory (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("jarset: pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def add_sets(spark: Path, into: Path, sets: Sequence[Path]) -> list[str]:
    """Copy each set's jars into ``into`` unless :func:`decide` leaves them out against the jars of
    ``spark`` and of ``into`` (the sets in order: a jar of an earlier set counts as present);
    print each decision; return the names added."""
    added: list[str] = []
    into.mkdir(parents=True, exist_ok=True)
    for directory in sets:
        present = {p.name for p in (*spark.glob("*.jar"), *into.glob("*.jar"))}
        for decision in decide((p.name for p in directory.glob("*.jar")), present):
            print(f"{directory.name}: {decision.describe()}")
            if decision.added:
                shutil.copy2(directory / decision.file, into / decision.file)
                added.append(decision.file)
    return added


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jarset.py", description="Add resolved connector jars to Spark's, minus what it ships.")
    parser.add_argument("sets", nargs="+", type=Path, help="directories of resolved jars, in order")
    parser.add_argument("--spark", type=Path, help="Spark's jars directory (default: PySpark's)")
    parser.add_argument("--into", type=Path, help="where the jars kept go (default: Spark's jars directory)")
    parser.add_argument("--list", type=Path, help="append the names of the jars added to this file")
    args = parser.parse_args(argv)
    spark = args.spark or pyspark_jars()
    for directory in args.sets:
        if not any(directory.glob("*.jar")):
            print(f"jarset: no jars in {directory}", file=sys.stderr)
            return 1
    added = add_sets(spark, args.into or spark, args.sets)
    if args.list is not None:
        with open(args.list, "a") as listing:
            listing.writelines(f"{name}\n" for name in added)
    return 0


if __name__ == "__main__":
    sys.exit(main())
