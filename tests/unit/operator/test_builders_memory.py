"""What the builders pass on of the containers' memory: the driver container's limit (else request)
through the Downward API, the executors' heap, overhead and RocksDB bound in the Spark settings, and
a container too small named by its field."""

from __future__ import annotations

import json
from typing import Any

from sluice.operator import builders
from sluice.operator.builders import memory
from sluice.operator.builders.driver import spark_conf

from tests.support.operator_fixtures import cluster_spec, context, query_spec

ROCKS = "spark.sql.streaming.stateStore.rocksdb."


def driver_env(ctx: Any) -> list[dict[str, Any]]:
    dep = builders.driver_deployment(ctx, "ab" * 32, "cm")
    return list(dep["spec"]["template"]["spec"]["containers"][0]["env"])


def test_the_driver_is_told_its_containers_limit_else_its_request() -> None:
    env = driver_env(context())  # the QueryCluster's default: 1Gi request, 2Gi limit
    assert [e for e in env if e["name"].startswith("SLUICE_MEMORY")] == [
        {"name": "SLUICE_MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]
    request_only = context(cluster=cluster_spec(driver={"requests": {"memory": "1536Mi"}}))
    assert memory.memory_env(request_only) == [
        {"name": "SLUICE_MEMORY_REQUEST", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}}]
    # no memory at all: nothing (the Downward API would give the node's memory for a missing limit)
    assert memory.memory_env(context(cluster=cluster_spec(driver={"requests": {"cpu": "1"}}))) == []
    # the query's own driver limit is the container's
    override = context(spec=query_spec(resources={"driver": {"limits": {"memory": "4Gi"}}}))
    assert memory.memory_env(override)[0]["name"] == "SLUICE_MEMORY_LIMIT"
    assert builders.driver_deployment(override, "ab" * 32, "cm")["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]["memory"] == "4Gi"


def test_no_heap_in_the_drivers_settings_the_runtime_derives_it() -> None:
    conf = spark_conf(context())
    assert "spark.driver.memory" not in conf and ROCKS + "maxMemoryUsageMB" not in conf


def test_executors_get_heap_overhead_and_rocksdb_bound_from_their_container() -> None:
    ctx = context(cluster=cluster_spec(executors=2, executor={"limits": {"memory": "4Gi"}}))
    conf = spark_conf(ctx)
    assert conf["spark.executor.memory"] == f"{4096 - 410 - 410}m"
    assert conf["spark.executor.memoryOverhead"] == "820m"
    assert conf[ROCKS + "boundedMemoryUsage"] == "true" and conf[ROCKS + "maxMemoryUsageMB"] == "410"
    # the QueryCluster's settings win, and the rest makes up the container
    own = context(cluster=cluster_spec(
        executors=2, executor={"limits": {"memory": "4Gi"}},
        sparkConf={"spark.executor.memory": "3g", ROCKS + "maxMemoryUsageMB": "600"}))
    conf = spark_conf(own)
    assert conf["spark.executor.memory"] == "3g" and conf["spark.executor.memoryOverhead"] == "1024m"
    assert conf[ROCKS + "maxMemoryUsageMB"] == "600"
    # a size Spark cannot read: nothing derived (Spark refuses it in its own words)
    bad = context(cluster=cluster_spec(executors=1, sparkConf={"spark.executor.memory": "1.5g"}))
    assert json.loads(json.dumps(spark_conf(bad)))["spark.executor.memory"] == "1.5g"
    assert "spark.executor.memoryOverhead" not in spark_conf(bad)
    assert memory.memory_problem(bad, "default") == \
        "sparkConf spark.executor.memory: '1.5g' is not a Spark memory size (e.g. 2g, 1536m)"


def test_a_driver_limit_too_small_is_a_problem_naming_its_field() -> None:
    small = context(cluster=cluster_spec(driver={"limits": {"memory": "768Mi"}}))
    problem = memory.memory_problem(small, "default")
    assert problem is not None
    assert problem.startswith("spec.driver.limits.memory of QueryCluster 'default': 768 MiB cannot hold")
    assert "at least 1209Mi" in problem
    override = context(spec=query_spec(resources={"driver": {"limits": {"memory": "768Mi"}}}))
    assert str(memory.memory_problem(override, "default")).startswith("spec.resources.driver.limits.memory: ")
    # the user's own heap, or a request only: no problem, a warning
    own = context(cluster=cluster_spec(driver={"limits": {"memory": "768Mi"}},
                                       sparkConf={"spark.driver.memory": "512m"}))
    assert memory.memory_problem(own, "default") is None
    assert "killed for memory" in memory.memory_warnings(own, "default")[0]
    request = context(cluster=cluster_spec(driver={"requests": {"memory": "768Mi"}}))
    assert memory.memory_problem(request, "default") is None
    assert memory.memory_warnings(request, "default")[0].startswith(
        "spec.driver.requests.memory of QueryCluster 'default': 768 MiB leaves")
    assert memory.memory_problem(context(), "default") is None
    assert memory.memory_warnings(context(), "default") == []


def test_executor_containers_too_small_are_warned_about() -> None:
    # what the e2e suite runs: 512Mi executor requests; Spark's pods come out larger, as before
    executor = {"requests": {"cpu": "250m", "memory": "512Mi"}}
    ctx = context(cluster=cluster_spec(executors=2, executor=executor))
    conf = spark_conf(ctx)
    assert (conf["spark.executor.memory"], conf["spark.executor.memoryOverhead"]) == ("512m", "448m")
    (warning,) = memory.memory_warnings(ctx, "default")
    assert warning.startswith("spec.executor.requests.memory of QueryCluster 'default': 512 MiB")
    assert memory.memory_problem(ctx, "default") is None
