"""The driver's memory in the runtime: the container's memory from the environment (the Downward
API's bytes, or a quantity), the Spark settings assembled from it before the JVM starts (heap, and
RocksDB's bound where the driver's JVM holds the state), the user's and the plan's settings over
them, and a container too small refused before anything starts."""

from __future__ import annotations

import typing

import pytest
from sluice.core import sizing
from sluice.core.sizing import Container
from sluice_runtime import cli
from sluice_runtime.session import driver_sizing, effective_conf, holds_rocksdb_state

from tests.support.runtime import plan_from_yaml

ROCKS = "spark.sql.streaming.stateStore.rocksdb."
COUNT = """\
  sources: [{name: o, topic: o, schema: [{name: shop, type: string}]}]
  sql: SELECT shop, count(*) AS n FROM o GROUP BY shop
  sink: {topic: out, outputMode: update, key: [shop]}
"""
SELECT = """\
  sources: [{name: o, topic: o, schema: [{name: shop, type: string}]}]
  sql: SELECT shop FROM o
  sink: {topic: out}
"""
LIMIT_2GI = Container(2048, cli.MEMORY_FIELDS[sizing.MEMORY_LIMIT_ENV])


def _resolve(env: dict[str, str]) -> cli.RunConfig:
    base = {"SLUICE_PLAN": "p.json", "SLUICE_CHECKPOINT": "/ck", "SLUICE_BOOTSTRAP": "h:1"}
    return cli.resolve_config(cli.build_parser().parse_args(["run"]), {**base, **env})


def test_the_container_memory_comes_from_the_environment() -> None:
    assert _resolve({}).memory is None
    config = _resolve({"SLUICE_MEMORY_LIMIT": "2147483648", "SLUICE_MEMORY_REQUEST": "1073741824"})
    assert config.memory == LIMIT_2GI  # the limit before the request
    assert "spec.driver.limits.memory" in LIMIT_2GI.field and "SLUICE_MEMORY_LIMIT" in LIMIT_2GI.field
    request = _resolve({"SLUICE_MEMORY_REQUEST": "1536Mi"}).memory
    assert request is not None and (request.mib, request.limit) == (1536, False)
    assert "spec.driver.requests.memory" in request.field


@pytest.mark.parametrize("value", ["2 GB", "lots", "-1", "0"])
def test_a_memory_that_is_no_quantity_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(cli.ConfigError, match=r"^SLUICE_MEMORY_LIMIT: "):
        _resolve({"SLUICE_MEMORY_LIMIT": value})


def test_the_heap_and_rocksdb_bound_come_from_the_container() -> None:
    conf = effective_conf(plan_from_yaml(COUNT), {}, master="local[*]", memory=LIMIT_2GI)
    assert conf["spark.driver.memory"] == "1267m"
    assert conf[ROCKS + "boundedMemoryUsage"] == "true" and conf[ROCKS + "maxMemoryUsageMB"] == "205"
    # the runtime's other defaults and the plan's pinned settings are still there
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.streaming.stateStore.providerClass"] == sizing.ROCKSDB_PROVIDER


def test_without_a_container_memory_spark_keeps_its_defaults() -> None:
    conf = effective_conf(plan_from_yaml(COUNT), {}, master="local[*]")
    assert "spark.driver.memory" not in conf and ROCKS + "maxMemoryUsageMB" not in conf


def test_rocksdb_gets_a_share_only_where_the_drivers_jvm_holds_state() -> None:
    count, select = plan_from_yaml(COUNT), plan_from_yaml(SELECT)
    assert holds_rocksdb_state(count, "local[2]")
    assert not holds_rocksdb_state(select, "local[2]")  # stateless: no state store opens
    assert not holds_rocksdb_state(count, "k8s://https://kube:443")  # executors hold the state
    hdfs = count.model_copy(update={"settings": count.settings.model_copy(
        update={"state_store_provider": "x.HDFSBackedStateStoreProvider"})})
    assert not holds_rocksdb_state(hdfs, "local[2]")
    stateless = effective_conf(select, {}, master="local[2]", memory=LIMIT_2GI)
    assert stateless["spark.driver.memory"] == "1472m" and ROCKS + "boundedMemoryUsage" not in stateless
    k8s = effective_conf(count, {}, master="k8s://https://kube:443", memory=LIMIT_2GI)
    assert k8s["spark.driver.memory"] == "1472m" and ROCKS + "maxMemoryUsageMB" not in k8s


def test_the_users_settings_and_the_plans_win_over_the_derived_ones() -> None:
    user = {"spark.driver.memory": "1g", ROCKS + "maxMemoryUsageMB": "300",
            ROCKS + "boundedMemoryUsage": "false"}
    conf = effective_conf(plan_from_yaml(COUNT), user, master="local[*]", memory=LIMIT_2GI)
    assert {k: conf[k] for k in user} == user
    # only the heap is derived when the user bounds RocksDB: their 300 MB count in its arithmetic
    conf = effective_conf(plan_from_yaml(COUNT), {ROCKS + "maxMemoryUsageMB": "300"}, master="local[*]",
                          memory=LIMIT_2GI)
    assert conf["spark.driver.memory"] == f"{2048 - 448 - 128 - 300}m"


def test_a_container_too_small_is_refused_before_the_jvm_starts(tmp_path: typing.Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_from_yaml(COUNT)
    small = Container(768, cli.MEMORY_FIELDS[sizing.MEMORY_LIMIT_ENV])
    with pytest.raises(sizing.SizingError):
        driver_sizing(plan, {}, "local[*]", small)
    (tmp_path / "plan.json").write_text(plan.to_json())
    config = cli.RunConfig(plan=str(tmp_path / "plan.json"), checkpoint=str(tmp_path / "ck"),
                           bootstrap="127.0.0.1:1", http_addr=None, memory=small)
    assert cli.execute(config) == 1  # before Kafka is reached: no broker listens there
    err = capsys.readouterr().err
    assert err.startswith("sluice-runtime: not started: the driver container's memory limit "
                          "(SLUICE_MEMORY_LIMIT")
    assert "768 MiB cannot hold a Spark driver" in err and "at least 1209Mi" in err
    # the user's own heap is their call: sized, with a warning
    assert driver_sizing(plan, {"spark.driver.memory": "512m"}, "local[*]", small) is not None
