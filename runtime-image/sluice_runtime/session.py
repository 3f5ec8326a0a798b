"""The SparkSession of a runtime: flags and defaults first, the plan's pinned settings last."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.plan.model import Plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "120s",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-Dio.netty.tryReflectionSetAccessible=true",
}


def effective_conf(
    plan: Plan, conf: Mapping[str, str] | None = None, jars: Iterable[str | Path] | None = None
) -> dict[str, str]:
    """Spark settings in force: defaults < jars < flags/env < the plan's pinned settings."""
    out = dict(DEFAULTS)
    jar_list = [str(j) for j in (jars or [])]
    if jar_list:
        out["spark.jars"] = ",".join(jar_list)
    out.update(conf or {})
    out.update(plan.settings.spark_conf())
    return out


def create_spark(
    plan: Plan,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    jars: Iterable[str | Path] | None = None,
) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("sluice-runtime")
    for key, value in effective_conf(plan, conf, jars).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # getOrCreate() may return an existing session: apply the pinned SQL settings to it too.
    for key, value in plan.settings.spark_conf().items():
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    return spark
