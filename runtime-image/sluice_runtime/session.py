"""The SparkSession of a runtime: flags and defaults first, the plan's pinned settings last."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core import sizing
from sluice.core.plan.model import Plan
from sluice.core.plan.steptypes import STATEFUL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Spark's checkpoint file manager on Hadoop's FileSystem API. Spark's default for ``file:`` paths
#: goes through Hadoop's FileContext, whose local file system (without Hadoop's native library, which
#: PySpark does not ship) starts a ``readlink`` process for every rename: about 13 a second for one
#: query at a batch a second, each started by the driver's JVM. The FileSystem API renames without one
#: (the ``chmod`` process of every file created remains with either: about 4 a second). A driver's
#: checkpoint is always a local directory (its epochs are hard links), where ``rename`` is atomic
#: with either manager.
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "120s",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-Dio.netty.tryReflectionSetAccessible=true",
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
}


def holds_rocksdb_state(plan: Plan, master: str) -> bool:
    """Whether this driver's JVM holds RocksDB state stores: a stateful plan on RocksDB with a local
    master (with executors the state stores live in the executors, sized by the operator)."""
    return (master.startswith("local") and plan.settings.state_store_provider == sizing.ROCKSDB_PROVIDER
            and any(step.type in STATEFUL for step in plan.steps))


def driver_sizing(plan: Plan, conf: Mapping[str, str] | None, master: str,
                  memory: sizing.Container | None) -> sizing.Sizing | None:
    """The driver's heap (and RocksDB's bound where its JVM holds the state) from its container's
    memory (``sluice.core.sizing.driver``; the settings in ``conf`` win); None without a container
    memory: Spark's own defaults. :class:`sluice.core.sizing.SizingError` for a container that cannot
    hold a driver."""
    if memory is None:
        return None
    return sizing.driver(memory, conf or {}, rocksdb=holds_rocksdb_state(plan, master))


def effective_conf(
    plan: Plan, conf: Mapping[str, str] | None = None, jars: Iterable[str | Path] | None = None, *,
    master: str = "local[2]", memory: sizing.Container | None = None,
) -> dict[str, str]:
    """Spark settings in force: defaults < jars < derived from the container's ``memory`` <
    flags/env < the plan's pinned settings."""
    out = dict(DEFAULTS)
    jar_list = [str(j) for j in (jars or [])]
    if jar_list:
        out["spark.jars"] = ",".join(jar_list)
    sized = driver_sizing(plan, conf, master, memory)
    if sized is not None:
        out.update(sized.conf)
    out.update(conf or {})
    out.update(plan.settings.spark_conf())
    return out


#: Spark's setting of the executors a static allocation starts with
EXECUTOR_INSTANCES = "spark.executor.instances"


def launch_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings spark-submit launches the JVM with: all but ``spark.executor.instances=0``,
    which spark-submit refuses without dynamic allocation ("Number of executors must be a positive
    number") while the SparkContext accepts it (no executor pods until the scheduler is asked for
    some: a standby that releases its executors, :mod:`sluice_runtime.standby_executors`). The
    SparkContext gets every setting from the session's builder."""
    return {k: v for k, v in settings.items() if not (k == EXECUTOR_INSTANCES and v.strip() == "0")}


def _launch_gateway(master: str, settings: Mapping[str, str], own_session: bool) -> None:
    """Start Spark's JVM (spark-submit) with :func:`launch_settings`.

    ``own_session``: in a process session of its own. A signal sent to the driver's process group
    (a SIGTERM to the group, Ctrl-C) then reaches the Python runtime alone, which drains; the JVM
    must keep running until the drain is done. It still dies with the runtime: PySpark's gateway
    exits when its stdin pipe from Python breaks.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName("sluice-runtime")
    for key, value in launch_settings(settings).items():
        spark_conf.set(key, value)
    gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True} if own_session else None)
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)


def create_spark(
    plan: Plan,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    jars: Iterable[str | Path] | None = None,
    own_session: bool = False,
    memory: sizing.Container | None = None,
) -> SparkSession:
    """The runtime's SparkSession; ``own_session``: the JVM in a process session of its own;
    ``memory``: the driver container's, which the heap is derived from (it must be set before the
    JVM starts: a session of a running JVM keeps its heap)."""
    from pyspark.sql import SparkSession

    settings = effective_conf(plan, conf, jars, master=master, memory=memory)
    if own_session or launch_settings(settings) != settings:
        _launch_gateway(master, settings, own_session)
    builder = SparkSession.builder.master(master).appName("sluice-runtime")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # getOrCreate() may return an existing session: apply the pinned SQL settings to it too.
    for key, value in plan.settings.spark_conf().items():
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    return spark
