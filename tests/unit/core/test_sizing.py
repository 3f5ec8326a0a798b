"""Memory sizing of driver and executor containers (pure): Kubernetes quantities and Spark sizes, the
limit before the request, the heap's floor, the user's settings first, containers too small, and
the settings that never enter plans."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core import sizing
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.engine import EngineFacts, engine_changes, plan_inputs
from sluice.core.plan import meaning
from sluice.core.sizing import Container, QuantityError, SizingError
from sluice.core.spec import QuerySpec

GI = 1024 * 1024 * 1024
ROCKS = "spark.sql.streaming.stateStore.rocksdb."


# -- quantities --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("2Gi", 2 * GI), ("1536Mi", 1536 * 2**20), ("1.5Gi", 3 * GI // 2), ("512Ki", 512 * 1024),
    ("1G", 10**9), ("500M", 500 * 10**6), ("2k", 2000), ("1e9", 10**9), ("5E6", 5 * 10**6),
    ("2147483648", 2 * GI),  # what the Downward API gives (divisor 1)
    ("128974848000m", 128974848), ("1.0000001", 2),  # fractions of a byte round up
    (" 2Gi ", 2 * GI),
])
def test_kubernetes_quantities(text: str, expected: int) -> None:
    assert sizing.parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "2GB", "2 Gi", "lots", "-1Gi", "0", "0Mi", "1.2.3Gi", "Gi"])
def test_what_is_not_a_memory_quantity(text: str) -> None:
    with pytest.raises(QuantityError):
        sizing.parse_quantity(text)


def test_quantities_in_whole_mib_round_down() -> None:
    assert sizing.quantity_mib("2Gi") == 2048
    assert sizing.quantity_mib("1G") == 953  # 10^9 bytes hold 953 whole MiB
    assert sizing.quantity_mib(str(2 * GI + 5)) == 2048


@pytest.mark.parametrize(("text", "mib"), [
    ("2g", 2048), ("2G", 2048), ("1536m", 1536), ("1536", 1536), ("1048576k", 1024), ("1t", 1024 * 1024),
    ("3gb", 3072), ("1073741824b", 1024),
])
def test_spark_sizes(text: str, mib: int) -> None:
    assert sizing.spark_mib(text) == mib


@pytest.mark.parametrize("text", ["1.5g", "2x", "", "g", "-1g"])
def test_spark_refuses_what_this_refuses(text: str) -> None:
    with pytest.raises(QuantityError):
        sizing.spark_mib(text)


def test_the_limit_before_the_request() -> None:
    both = Container.of("2Gi", "1Gi", limit_field="L", request_field="R")
    assert both == Container(2048, "L", limit=True)
    assert Container.of(None, "1Gi", limit_field="L", request_field="R") == Container(1024, "R", limit=False)
    assert Container.of(None, None, limit_field="L", request_field="R") is None


# -- the driver ---------------------------------------------------------------------------------


def limit(mib: int) -> Container:
    return Container(mib, "spec.driver.limits.memory")


def test_the_default_driver_container() -> None:
    """2Gi: heap = 2048 - max(448, 205) JVM - 128 Python - max(64, 205) RocksDB."""
    sized = sizing.driver(limit(2048), {}, rocksdb=True)
    assert sized.conf == {"spark.driver.memory": "1267m", ROCKS + "boundedMemoryUsage": "true",
                          ROCKS + "maxMemoryUsageMB": "205"}
    b = sized.budget
    assert (b.heap, b.jvm, b.python, b.rocksdb, b.total) == (1267, 448, 128, 205, 2048)
    assert sized.warnings == ()


def test_no_rocksdb_in_the_driver_no_share_for_it() -> None:
    """A stateless plan, or executors holding the state: nothing bounded, the heap takes the share."""
    sized = sizing.driver(limit(2048), {}, rocksdb=False)
    assert sized.conf == {"spark.driver.memory": "1472m"}
    assert sized.budget.rocksdb == 0


def test_large_containers_give_ten_percent_to_the_jvm_and_to_rocksdb() -> None:
    sized = sizing.driver(limit(8192), {}, rocksdb=True)
    assert sized.budget.jvm == sized.budget.rocksdb == 820  # ceil(819.2)
    assert sized.conf["spark.driver.memory"] == f"{8192 - 820 - 128 - 820}m"


def test_the_users_settings_win() -> None:
    own_heap = sizing.driver(limit(2048), {"spark.driver.memory": "1g"}, rocksdb=True)
    assert "spark.driver.memory" not in own_heap.conf and own_heap.budget.heap == 1024
    assert own_heap.warnings == ()
    own_bound = sizing.driver(limit(2048), {ROCKS + "maxMemoryUsageMB": "500"}, rocksdb=True)
    assert own_bound.conf == {"spark.driver.memory": f"{2048 - 448 - 128 - 500}m",
                              ROCKS + "boundedMemoryUsage": "true"}
    unbounded = sizing.driver(limit(2048), {ROCKS + "boundedMemoryUsage": "false"}, rocksdb=True)
    assert ROCKS + "boundedMemoryUsage" not in unbounded.conf  # the user's false stands
    assert unbounded.conf["spark.driver.memory"] == "1267m"  # and RocksDB's share is still set aside
    own_overhead = sizing.driver(limit(2048), {"spark.driver.memoryOverhead": "600m"}, rocksdb=False)
    assert own_overhead.conf == {"spark.driver.memory": f"{2048 - 600 - 128}m"}


def test_a_users_heap_too_large_for_the_container_is_a_warning() -> None:
    sized = sizing.driver(limit(2048), {"spark.driver.memory": "2g"}, rocksdb=True)
    assert sized.conf == {ROCKS + "boundedMemoryUsage": "true", ROCKS + "maxMemoryUsageMB": "205"}
    (warning,) = sized.warnings
    assert "sparkConf spark.driver.memory 2g" in warning and "2829 MiB" in warning
    assert "spec.driver.limits.memory" in warning and "killed" in warning


def test_a_users_size_spark_cannot_read_names_the_setting() -> None:
    with pytest.raises(SizingError) as caught:
        sizing.driver(limit(2048), {"spark.driver.memory": "1.5g"}, rocksdb=False)
    assert caught.value.field == "sparkConf spark.driver.memory"
    with pytest.raises(SizingError, match="maxMemoryUsageMB"):
        sizing.driver(limit(2048), {ROCKS + "maxMemoryUsageMB": "lots"}, rocksdb=True)


def test_a_limit_that_cannot_hold_a_driver_is_refused_naming_the_field() -> None:
    with pytest.raises(SizingError) as caught:
        sizing.driver(limit(900), {}, rocksdb=True)
    assert caught.value.field == "spec.driver.limits.memory"
    message = str(caught.value)
    assert message.startswith("spec.driver.limits.memory: 900 MiB cannot hold a Spark driver")
    assert "at least 1209Mi" in message and "512 MiB" in message
    # the user's own heap is the user's call
    assert sizing.driver(limit(900), {"spark.driver.memory": "512m"}, rocksdb=True).warnings


def test_a_squeezed_heap_gets_sparks_minimum_and_a_warning() -> None:
    with pytest.raises(SizingError):  # 1024 MiB: under 512 heap + 448 JVM + 128 Python
        sizing.driver(limit(1024), {}, rocksdb=True)
    sized = sizing.driver(limit(1100), {}, rocksdb=True)
    assert sized.conf["spark.driver.memory"] == f"{sizing.MIN_HEAP_MIB}m"
    assert sized.conf[ROCKS + "maxMemoryUsageMB"] == str(sizing.ROCKSDB_MIN_MIB)
    (warning,) = sized.warnings
    assert warning.startswith("spec.driver.limits.memory: 1100 MiB")
    assert "raise the limit to at least 1209Mi" in warning
    request = sizing.driver(Container(700, "spec.driver.requests.memory", limit=False), {}, rocksdb=False)
    assert request.conf == {"spark.driver.memory": "512m"}  # a request only: not refused
    assert "raise the request to at least 1088Mi" in request.warnings[0]


def test_the_floor_spark_accepts() -> None:
    assert sizing.MIN_HEAP_MIB >= 480  # -Xmx450m is refused by Spark under the serial collector
    assert sizing.minimum_mib("driver", rocksdb=True) == 1209
    assert sizing.minimum_mib("driver", rocksdb=False) == sizing.floor_mib("driver") == 1088
    assert sizing.minimum_mib("executor", rocksdb=True) == 996
    for size in range(1024, 9000, 7):  # at and above the minimum the heap never falls under the floor
        for rocksdb in (True, False):
            if size >= sizing.minimum_mib("driver", rocksdb=rocksdb):
                sized = sizing.driver(limit(size), {}, rocksdb=rocksdb)
                assert sized.budget.heap >= sizing.MIN_HEAP_MIB and sized.budget.total == size
                assert not sized.warnings


# -- executors ----------------------------------------------------------------------------------


def executor(mib: int, **kw: Any) -> Container:
    return Container(mib, "spec.executor.limits.memory", **kw)


def test_executor_heap_and_overhead_make_the_container() -> None:
    sized = sizing.executor(executor(2048), {}, rocksdb=True)
    assert sized.conf == {"spark.executor.memory": "1459m", "spark.executor.memoryOverhead": "589m",
                          ROCKS + "boundedMemoryUsage": "true", ROCKS + "maxMemoryUsageMB": "205"}
    assert sized.budget.python == 0 and sized.budget.total == 2048 and not sized.warnings
    plain = sizing.executor(executor(2048), {}, rocksdb=False)
    assert plain.conf == {"spark.executor.memory": "1664m", "spark.executor.memoryOverhead": "384m"}


def test_executor_settings_of_the_user_win() -> None:
    heap = sizing.executor(executor(4096), {"spark.executor.memory": "3g"}, rocksdb=True)
    assert heap.conf["spark.executor.memoryOverhead"] == "1024m" and "spark.executor.memory" not in heap.conf
    overhead = sizing.executor(executor(4096), {"spark.executor.memoryOverhead": "1g"}, rocksdb=True)
    assert overhead.conf["spark.executor.memory"] == "3072m"
    both = sizing.executor(executor(4096), {"spark.executor.memory": "2g",
                                            "spark.executor.memoryOverhead": "1g"}, rocksdb=False)
    assert both.conf == {}
    tight = sizing.executor(executor(2048), {"spark.executor.memory": "1800m"}, rocksdb=True)
    assert tight.conf["spark.executor.memoryOverhead"] == "384m"  # Spark's minimum: the pod grows
    assert "1800 MiB heap + 384 MiB overhead" in tight.warnings[0]


def test_an_executor_container_too_small_makes_a_larger_pod_and_says_so() -> None:
    sized = sizing.executor(Container(512, "spec.executor.requests.memory", limit=False), {}, rocksdb=True)
    assert sized.conf["spark.executor.memory"] == "512m"
    assert sized.conf["spark.executor.memoryOverhead"] == "448m"  # 384 + RocksDB's 64
    (warning,) = sized.warnings
    assert warning.startswith("spec.executor.requests.memory: 512 MiB")
    assert "960Mi per executor pod" in warning
    assert "at least 996Mi" in warning
    small_overhead = sizing.executor(executor(4096), {"spark.executor.memory": "3600m"}, rocksdb=True)
    assert "under the 820 MiB" in small_overhead.warnings[0]


def test_rocksdb_is_the_plans_default_state_store() -> None:
    assert sizing.uses_rocksdb({})
    assert not sizing.uses_rocksdb({"spark.sql.streaming.stateStore.providerClass": "x.HDFSProvider"})


# -- never in plans -----------------------------------------------------------------------------

QUERY: dict[str, Any] = {
    "sources": [{"name": "o", "topic": "o", "schema": [{"name": "shop", "type": "string"}]}],
    "sql": "SELECT shop, count(*) AS n FROM o GROUP BY shop",
    "sink": {"topic": "out", "outputMode": "update", "key": ["shop"]},
}
MEMORY_CONF = {"spark.driver.memory": "3g", "spark.executor.memory": "2g",
               "spark.executor.memoryOverhead": "1g", ROCKS + "boundedMemoryUsage": "true",
               ROCKS + "maxMemoryUsageMB": "300",
               ROCKS + "writeBufferCacheRatio": "0.4"}


def test_memory_settings_are_runtime_only_never_pinned() -> None:
    assert sizing.DERIVED_KEYS <= set(meaning.RUNTIME_ONLY)
    for key in meaning.RUNTIME_ONLY:
        assert not meaning.is_pinned(key), key
    pinned = set(meaning.BY_KEY) | set(meaning.TYPED) | set(meaning.OWNED_BY_SPEC)
    assert not set(meaning.RUNTIME_ONLY) & pinned


def test_memory_settings_leave_the_plan_and_its_inputs_as_they_are() -> None:
    query = QuerySpec.model_validate(QUERY)
    plain = compile_query(query)
    sized = compile_query(query, CompileTarget(spark_conf=MEMORY_CONF))
    assert sized.hash == plain.hash
    before = EngineFacts(digest="a", image="rt:1", spark_version="4.3.0")
    after = EngineFacts(digest="b", image="rt:1", spark_version="4.3.0", spark_conf=MEMORY_CONF)
    assert plan_inputs(query, after) == plan_inputs(query, before)
    changes = engine_changes(before, after)
    assert {c.category for c in changes} == {"transparent"} and len(changes) == len(MEMORY_CONF)
