"""``sluice-runtime executor``: a Spark executor for Spark's own Kubernetes scheduler.

When a QueryCluster has ``executors: N``, the driver runs with a ``k8s://`` master and Spark's
Kubernetes scheduler backend creates N executor pods from the runtime image, with the single
argument ``executor`` and their settings in ``SPARK_*`` variables (the contract of Spark's own
image entry point). This module turns those variables into the executor JVM's command line and
replaces the process with it, so the JVM receives the pod's signals directly.

The JVM maps the driver's class-data-sharing archive when the image has one
(:mod:`sluice_runtime.classdata`): its class path starts with the one the archive was written
with, and Spark's configuration directory and the connector jars follow.

Building the command is pure (``executor_argv``); ``main`` only looks up Java, the jars and the
archive and calls ``execv``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice_runtime import classdata

MAIN_CLASS = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"

#: variable -> the backend's flag; Spark sets every one of them on the executor pods it creates
REQUIRED: tuple[tuple[str, str], ...] = (
    ("SPARK_DRIVER_URL", "--driver-url"),
    ("SPARK_EXECUTOR_ID", "--executor-id"),
    ("SPARK_EXECUTOR_CORES", "--cores"),
    ("SPARK_APPLICATION_ID", "--app-id"),
    ("SPARK_EXECUTOR_POD_IP", "--hostname"),
    ("SPARK_RESOURCE_PROFILE_ID", "--resourceProfileId"),
    ("SPARK_EXECUTOR_POD_NAME", "--podName"),
)

_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_(\d+)$")


class ExecutorConfigError(ValueError):
    """The pod does not carry what a Spark executor needs (not started by Spark's scheduler?)."""


def java_options(env: Mapping[str, str]) -> list[str]:
    """``SPARK_JAVA_OPT_<n>`` values in numeric order (one JVM option each)."""
    numbered = []
    for name, value in env.items():
        match = _JAVA_OPT.match(name)
        if match:
            numbered.append((int(match.group(1)), value))
    return [value for _, value in sorted(numbered)]


def classpath(env: Mapping[str, str], spark_jars_dir: Path, first: str = "") -> str:
    """``first`` (an archive's recorded class path), Spark's configuration directory, the image's
    Spark jars, then the connector jars. (No Spark jar holds a resource of the configuration
    directory's, such as ``log4j2.properties``: the directory may come after them.)"""
    parts: list[str] = [entry for entry in first.split(":") if entry]
    if env.get("SPARK_CONF_DIR"):
        parts.append(env["SPARK_CONF_DIR"])
    if env.get("SPARK_CLASSPATH"):
        parts.append(env["SPARK_CLASSPATH"])
    parts.append(str(spark_jars_dir / "*"))
    # the image ships the Kafka connector in Spark's jars directory; outside an image it comes
    # from SLUICE_JARS, like for the driver
    parts.extend(j.strip() for j in env.get("SLUICE_JARS", "").split(",") if j.strip())
    if env.get("SPARK_EXTRA_CLASSPATH"):
        parts.append(env["SPARK_EXTRA_CLASSPATH"])
    return ":".join(parts)


def executor_argv(
    env: Mapping[str, str], *, java: str, spark_jars_dir: Path,
    archive: classdata.SharedArchive | None = None,
) -> list[str]:
    """The executor JVM's command line, from the variables Spark put on the executor pod; with
    ``archive``, one that maps it."""
    missing = [name for name, _ in REQUIRED if not env.get(name)]
    if missing:
        raise ExecutorConfigError(
            f"missing {', '.join(missing)}: `sluice-runtime executor` runs in executor pods that "
            "Spark's Kubernetes scheduler creates, which set these variables"
        )
    argv = [java, *(classdata.use_options(archive.path) if archive else []), *java_options(env)]
    memory = env.get("SPARK_EXECUTOR_MEMORY")
    if memory:
        argv += [f"-Xms{memory}", f"-Xmx{memory}"]
    argv += ["-cp", classpath(env, spark_jars_dir, archive.classpath if archive else ""), MAIN_CLASS]
    for name, flag in REQUIRED:
        argv += [flag, env[name]]
    return argv


def find_java(env: Mapping[str, str]) -> str:
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return "java"


def spark_jars_dir() -> Path:
    """``pyspark/jars`` of the installed PySpark (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ExecutorConfigError("PySpark is not installed in this image")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def main(argv: Sequence[str] = (), env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    if argv:
        print(f"sluice-runtime executor: unexpected arguments {list(argv)}", file=sys.stderr)
        return 2
    try:
        command = executor_argv(env, java=find_java(env), spark_jars_dir=spark_jars_dir(),
                                archive=classdata.find(env))
    except ExecutorConfigError as exc:
        print(f"sluice-runtime executor: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - execvpe does not return
