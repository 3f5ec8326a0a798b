"""Write the runtime image's version manifest at build time (``runtime-image/Dockerfile``).

``python -m sluice_runtime.image_manifest --added LIST --output /opt/sluice/versions.json``
records the installed PySpark, the Scala library among its jars, Java (asked from ``java``), the
Python and sluice versions, each recorded artifact (the Kafka connector and the S3A set:
:data:`sluice_runtime.versions.RECORDED`) with the version of its jar in PySpark's ``jars/``, and
the jars the connector step added there (``LIST``: one file name a line, written by
:mod:`sluice_runtime.jarset`). It refuses (exit 1, the build fails) when those jars depart from
:mod:`sluice_runtime.pairing`.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sluice_runtime import connector, versions

_JAVA_VERSION = re.compile(r"^\s*java\.version = (\S+)\s*$", re.MULTILINE)


def java_version(java: str = "java") -> str:
    """``java.version`` of the given ``java`` (from ``-XshowSettings:properties``)."""
    result = subprocess.run([java, "-XshowSettings:properties", "-version"],
                            capture_output=True, text=True, check=True, timeout=120)
    match = _JAVA_VERSION.search(result.stderr)
    if match is None:
        raise RuntimeError(f"{java}: no java.version in its settings:\n{result.stderr}")
    return match[1]


def collect(jars_dir: Path, added: Sequence[str], *, spark: str, java: str) -> versions.Versions:
    """The manifest of an image whose Spark ``jars`` directory is ``jars_dir``."""
    present = versions.parse_jars(p.name for p in jars_dir.glob("*.jar"))
    return versions.Versions(
        image=True, source=str(versions.MANIFEST),
        sluice=versions.distribution("sluice"), spark=spark, scala=versions.scala_of(jars_dir),
        java=java, python=platform.python_version(),
        connectors=versions.match_record(present), jars=versions.parse_jars(added),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_runtime.image_manifest")
    parser.add_argument("--added", type=Path, required=True, help="the jars the connector step added")
    parser.add_argument("--output", type=Path, default=versions.MANIFEST)
    args = parser.parse_args(argv)
    pyspark = connector.installed_pyspark()
    if pyspark is None:
        print("image_manifest: pyspark is not installed", file=sys.stderr)
        return 1
    added = [line.strip() for line in args.added.read_text().splitlines() if line.strip()]
    manifest = collect(pyspark[1], added, spark=pyspark[0], java=java_version())
    problems = versions.pairing_problems(versions.parse_jars(p.name for p in pyspark[1].glob("*.jar")),
                                         manifest.spark)
    if problems:
        print("image_manifest: the jars depart from sluice_runtime/pairing.py:\n  " + "\n  ".join(problems),
              file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
    print(versions.render_text(manifest), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
