"""What this runtime carries: Spark, Scala, Java, the connector and S3A jars and their versions.

The runtime image writes a manifest at build time (``/opt/sluice/versions.json``, by
:mod:`sluice_runtime.image_manifest`); :func:`current` reads it. Outside an image it says what it
can without starting a JVM: the installed PySpark (and the Scala of its jars) and the jars given by
``SLUICE_JARS``, marked "not an image". ``sluice-runtime --version [--output json]`` prints it;
:func:`summary` is the flat form for the driver's Lease and the query's status.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from sluice_runtime import connector, pairing

# the jar names' parsing lives with the drop rule (jarset); kept importable from here
from sluice_runtime.jarset import Jar, parse_jars
from sluice_runtime.jarset import parse_jar as parse_jar

#: where the runtime image keeps its manifest (its virtualenv is ``/opt/sluice``)
MANIFEST: Final = Path("/opt/sluice/versions.json")
FORMAT: Final = 1

class ManifestError(ValueError):
    """The manifest is missing a field or has the wrong shape."""


@dataclass(frozen=True)
class Connector:
    """A recorded connector artifact (:mod:`sluice_runtime.pairing`) and what actually ships."""

    name: str
    artifact: str
    #: the version found (None: no jar of it)
    version: str | None
    recorded: str
    why: str


@dataclass(frozen=True)
class Versions:
    #: True when read from the image's manifest
    image: bool
    #: the manifest's path, or why this is not an image
    source: str
    sluice: str | None
    spark: str | None
    scala: str | None
    java: str | None
    python: str | None
    connectors: tuple[Connector, ...] = ()
    #: the jars added to Spark's (image) or given by SLUICE_JARS (not an image)
    jars: tuple[Jar, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = FORMAT
        return data


#: every artifact the image ships beside Spark's jars: the Kafka connector, then the S3A set
#: (``s3a://`` checkpoints), as :mod:`sluice_runtime.pairing` records them
RECORDED: Final[tuple[pairing.Artifact, ...]] = (*pairing.ARTIFACTS, *pairing.S3A_ARTIFACTS)


def match_record(jars: Iterable[Jar]) -> tuple[Connector, ...]:
    """Each recorded artifact (:data:`RECORDED`) with the version of its jar among ``jars`` (if any)."""
    found = {jar.artifact: jar.version for jar in jars}
    return tuple(
        Connector(a.name, a.artifact, found.get(a.artifact), a.version, a.why) for a in RECORDED
    )


def pairing_problems(jars: Iterable[Jar], spark: str | None) -> list[str]:
    """What in ``jars`` (Spark's jar directory) departs from the record: a recorded artifact
    (:data:`RECORDED`) missing or in another version, more than one version of one, the wrong
    Spark or Hadoop (hadoop-aws must match PySpark's ``hadoop-client-api``), or a Spark artifact
    of another version that the record does not name (an unrecorded pairing)."""
    jars = list(jars)
    problems = [] if spark == pairing.SPARK else [f"Spark is {spark}, the record says {pairing.SPARK}"]
    hadoop = sorted(j.version for j in jars if j.artifact == "hadoop-client-api")
    if hadoop != [pairing.HADOOP]:
        problems.append(f"hadoop-client-api: ships {', '.join(hadoop) or 'no jar'}, "
                        f"the record says Hadoop {pairing.HADOOP}")
    recorded = {a.artifact: a for a in RECORDED}
    for artifact in RECORDED:
        versions = sorted(j.version for j in jars if j.artifact == artifact.artifact)
        if versions != [artifact.version]:
            problems.append(
                f"{artifact.artifact}: ships {', '.join(versions) or 'no jar'}, recorded {artifact.version}"
            )
    for jar in jars:
        if (jar.artifact.startswith("spark-") and jar.artifact.endswith(f"_{pairing.SCALA}")
                and jar.version != spark and jar.artifact not in recorded):
            problems.append(f"{jar.file}: a Spark artifact of another version than {spark}, not recorded")
    return problems


def load(path: Path = MANIFEST) -> Versions:
    """The image's manifest."""
    return from_json(json.loads(path.read_text()), source=str(path))


def from_json(data: Mapping[str, Any], *, source: str) -> Versions:
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ManifestError(f"{source}: not a version manifest of format {FORMAT}")
    try:
        return Versions(
            image=True, source=source,
            sluice=data["sluice"], spark=data["spark"], scala=data["scala"], java=data["java"],
            python=data["python"],
            connectors=tuple(Connector(**c) for c in data["connectors"]),
            jars=tuple(Jar(**j) for j in data["jars"]),
        )
    except (KeyError, TypeError) as exc:
        raise ManifestError(f"{source}: {type(exc).__name__}: {exc}") from exc


def distribution(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def scala_of(jars_dir: Path) -> str | None:
    """The Scala library version among a Spark ``jars`` directory's jars."""
    for jar in parse_jars(p.name for p in jars_dir.glob("scala-library-*.jar")):
        if jar.artifact == "scala-library":
            return jar.version
    return None


def outside_image(env: Mapping[str, str], manifest: Path = MANIFEST) -> Versions:
    """What can be said without a manifest (and without starting a JVM)."""
    pyspark = connector.installed_pyspark()
    given = parse_jars(j for j in env.get("SLUICE_JARS", "").replace("\n", ",").split(",") if j.strip())
    shipped = parse_jars(p.name for p in pyspark[1].glob("*.jar")) if pyspark else ()
    return Versions(
        image=False,
        source=f"not an image: no {manifest}; connector jars from SLUICE_JARS and PySpark's jars",
        sluice=distribution("sluice"), spark=pyspark[0] if pyspark else None,
        scala=scala_of(pyspark[1]) if pyspark else None, java=None, python=platform.python_version(),
        connectors=match_record((*shipped, *given)), jars=given,
    )


def current(env: Mapping[str, str] | None = None, manifest: Path = MANIFEST) -> Versions:
    """The image's manifest if there is one, else what :func:`outside_image` finds."""
    if manifest.is_file():
        return load(manifest)
    return outside_image(os.environ if env is None else env, manifest)


@functools.cache
def _current() -> Versions:
    return current()


def summary(versions: Versions | None = None) -> dict[str, str]:
    """A flat ``{name: version}`` for a Lease annotation or the query's status: ``image``
    (``"true"``/``"false"``), ``sluice``, ``spark``, ``scala``, ``java`` and each
    recorded artifact by name (``kafka``, ``kafka-token-provider``, ``hadoop-aws``, ``aws-sdk-s3``,
    ...: :data:`RECORDED`); unknown ones are left out.

    Without an argument it reads the process's own versions once (cached)."""
    v = _current() if versions is None else versions
    out = {"image": "true" if v.image else "false"}
    for key in ("sluice", "spark", "scala", "java"):
        value = getattr(v, key)
        if value:
            out[key] = value
    out.update({c.name: c.version for c in v.connectors if c.version})
    return out


def render_text(v: Versions) -> str:
    lines = [
        f"sluice-runtime {v.sluice or 'unknown'} ({'image: ' + v.source if v.image else v.source})",
        f"Spark {v.spark or 'not installed'} (Scala {v.scala or 'unknown'}), "
        f"Java {v.java or 'unknown'}, Python {v.python or 'unknown'}",
        f"connectors (record: Spark {pairing.SPARK}, Hadoop {pairing.HADOOP}, sluice_runtime/pairing.py):",
    ]
    width = max((len(c.name) for c in v.connectors), default=0)
    for c in v.connectors:
        shipped = c.version or "no jar"
        if c.version != c.recorded:
            shipped += f" (recorded {c.recorded})"
        lines.append(f"  {c.name:<{width}}  {c.artifact} {shipped}: {c.why}")
    label = "jars added to Spark's" if v.image else "jars given (SLUICE_JARS)"
    lines.append(f"{label}: {', '.join(j.file for j in v.jars) or 'none'}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] = ()) -> int:
    """``sluice-runtime --version [--output text|json]``."""
    parser = argparse.ArgumentParser(
        prog="sluice-runtime --version", description="Print the versions this runtime carries.")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    args = parser.parse_args(list(argv))
    try:
        versions = current()
    except (OSError, ValueError) as exc:
        print(f"sluice-runtime: cannot read the version manifest: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(versions.to_json(), indent=2, sort_keys=True))
    else:
        print(render_text(versions), end="")
    return 0
