"""Is a connector version published? Maven asked artifact by artifact (the image tests' check).

:func:`unused_newer` lists, for a recorded connector artifact (:mod:`sluice_runtime.pairing`), the
versions newer than the recorded one, up to the image's Spark version, that Maven's default
repository serves: a non-empty answer means the record should move. Each question is one
``mvn dependency:get`` of the jar (``-U``: a "not found" cached by an earlier run is asked again);
an answer other than "found" or "not found" (no network, no Maven, a proxy error) raises
:class:`MavenUnavailable`, so that the check never passes by not asking.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from sluice_runtime import pairing

#: the default version of the dependency plugin fails on some POMs; this one resolves them
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class MavenUnavailable(RuntimeError):
    """Maven could not say whether an artifact is published."""


def get_argv(mvn: str, coordinates: str) -> list[str]:
    return [mvn, "-B", "-q", "-U", "-Dstyle.color=never", f"{DEPENDENCY_PLUGIN}:get",
            f"-Dartifact={coordinates}", "-Dtransitive=false"]


def classify(coordinates: str, returncode: int, output: str) -> bool:
    """True: published; False: Maven's repository answered that it has no such jar."""
    if returncode == 0:
        return True
    group, artifact, version = coordinates.split(":")
    if f"Could not find artifact {group}:{artifact}:jar:{version}" in output:
        return False
    raise MavenUnavailable(f"mvn could not tell whether {coordinates} is published "
                           f"(exit {returncode}):\n{output[-3000:]}")


def is_published(coordinates: str, *, timeout: float = 300) -> bool:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable("mvn (Apache Maven) not found on PATH")
    try:
        result = subprocess.run(get_argv(mvn, coordinates), capture_output=True, text=True,
                                check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise MavenUnavailable(f"mvn did not answer for {coordinates} in {timeout:.0f} s") from exc
    return classify(coordinates, result.returncode, result.stdout + result.stderr)


def newer_candidates(recorded: str, spark: str) -> list[str]:
    """Versions newer than ``recorded`` and at most ``spark`` that could have been published: the
    next patch of the recorded version, the first release of each later minor (and major), and
    every patch of Spark's own minor up to Spark's version. Releases are numbered in order, so a
    later patch is never published before the next one is."""
    rec, top = pairing.version_key(recorded), pairing.version_key(spark)
    if len(rec) != 3 or len(top) != 3:
        raise ValueError(f"expected major.minor.patch versions, got {recorded!r} and {spark!r}")
    found: set[tuple[int, int, int]] = {(rec[0], rec[1], rec[2] + 1)}
    for major in range(rec[0], top[0] + 1):
        first = rec[1] + 1 if major == rec[0] else 0
        last = top[1] if major == top[0] else first  # other majors: their x.y.0 alone (unknown width)
        found.update((major, minor, 0) for minor in range(first, last + 1))
    found.update((top[0], top[1], patch) for patch in range(top[2] + 1))
    return [".".join(map(str, v)) for v in sorted(found) if rec < v <= top]


def unused_newer(
    artifact: pairing.Artifact,
    spark: str = pairing.SPARK,
    published: Callable[[str], bool] = is_published,
) -> list[str]:
    """The candidate versions of ``artifact`` (see :func:`newer_candidates`) that are published."""
    return [v for v in newer_candidates(artifact.version, spark)
            if published(f"{artifact.group}:{artifact.artifact}:{v}")]
