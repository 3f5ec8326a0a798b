"""How a driver's or an executor's container memory is split between the JVM heap and the rest (pure).

A container's memory (its limit, else its request) holds more than the JVM heap, and Kubernetes
kills the container when all of it together passes the limit:

* the JVM's own memory outside the heap (class metadata, compiled code, thread stacks, the garbage
  collector's structures, direct buffers): Spark's rule for it, ``memoryOverhead`` =
  max(384 MiB, 10 %) of the container, for an executor; a driver's JVM (planner, scheduler and
  tasks in one) committed 358-421 MiB outside its heap (Native Memory Tracking, docs/performance.md
  "Driver memory"), so its share is max(448 MiB, 10 %);
* in a driver, the runtime's Python process (about 70 MiB resident; no Python workers and no Arrow
  buffers run: the plan's expressions are Spark SQL);
* RocksDB's native memory where the state stores live (the driver with a local master, else the
  executors), bounded by Spark's ``boundedMemoryUsage`` to :func:`rocksdb_budget`.

The heap gets the rest, at least :data:`MIN_HEAP_MIB`. Settings the user gives in the QueryCluster's
``sparkConf`` always win; derived values are only the settings the user left out (:attr:`Sizing.conf`).
None of these settings enters a plan (``sluice.core.plan.meaning.RUNTIME_ONLY``).

Units: MiB throughout (Spark's ``m``); Kubernetes quantities and Spark sizes are parsed here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Literal

MIB = 1024 * 1024
Role = Literal["driver", "executor"]

#: Spark's floor is 450 MiB of ``Runtime.maxMemory()`` (1.5 x its 300 MiB reserve). With the serial
#: collector (the JVM's choice in a container under 1792 MiB or with one CPU) ``maxMemory`` leaves out
#: a survivor space: ``-Xmx450m`` gives 435 MiB and Spark refuses it, ``-Xmx480m`` 464 MiB (measured
#: on the image's Java 17, PySpark 4.3.0). 512 MiB passes under every collector.
MIN_HEAP_MIB = 512
#: Spark's ``memoryOverhead`` for a JVM: max(384 MiB, 10 % of the container); an executor's share
JVM_OVERHEAD_MIN_MIB = 384
JVM_OVERHEAD_FACTOR = 0.10
#: a driver's JVM outside the heap is larger: 358-421 MiB committed measured (Native Memory Tracking,
#: the example queries, local master, up to 5 minutes; its compiled code still grew), so its share
#: is max(448 MiB, 10 %)
DRIVER_JVM_MIN_MIB = 448
#: the runtime's Python process in a driver container: 68-71 MiB resident measured (every example
#: query, exactly-once included, 50 records/s), with room for an exactly-once batch's rows, which
#: pass through it a partition at a time (the next one prefetched)
PYTHON_MIB = 128
#: RocksDB's share of the container where the state stores live, at least :data:`ROCKSDB_MIN_MIB`
ROCKSDB_FACTOR = 0.10
ROCKSDB_MIN_MIB = 64

#: the driver container's memory limit / request in bytes (the operator sets one from the Downward
#: API; the runtime derives the driver's heap from it before its JVM starts)
MEMORY_LIMIT_ENV = "SLUICE_MEMORY_LIMIT"
MEMORY_REQUEST_ENV = "SLUICE_MEMORY_REQUEST"

DRIVER_MEMORY = "spark.driver.memory"
DRIVER_OVERHEAD = "spark.driver.memoryOverhead"
EXECUTOR_MEMORY = "spark.executor.memory"
EXECUTOR_OVERHEAD = "spark.executor.memoryOverhead"
_ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."
ROCKSDB_BOUNDED = _ROCKSDB + "boundedMemoryUsage"
ROCKSDB_MAX_MB = _ROCKSDB + "maxMemoryUsageMB"
#: settings this module derives (each only when the user's settings leave it out)
DERIVED_KEYS: frozenset[str] = frozenset({DRIVER_MEMORY, EXECUTOR_MEMORY, EXECUTOR_OVERHEAD, ROCKSDB_BOUNDED,
                                          ROCKSDB_MAX_MB})
#: the state store provider whose memory is bounded
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity (or a Spark size) of memory."""


class SizingError(ValueError):
    """A container too small for a JVM: ``field`` names the setting to raise."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_FACTORS: dict[str, Decimal] = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes memory quantity (``2Gi``, ``1500M``, ``1e9``, ``2147483648``, what the
    Downward API gives), rounded up to a whole byte as Kubernetes does."""
    value = str(text).strip()
    match = _QUANTITY.match(value)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (e.g. 2Gi, 1500Mi, 2147483648)")
    sign, number, suffix = match.groups()
    suffix = suffix or ""
    try:
        amount = Decimal(number)
        scale = Decimal(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else _FACTORS[suffix]
    except (InvalidOperation, ValueError, KeyError):
        raise QuantityError(f"{text!r} is not a Kubernetes quantity") from None
    total = amount * scale
    if sign == "-" or total <= 0:
        raise QuantityError(f"{text!r}: a memory amount must be positive")
    return math.ceil(total)


def quantity_mib(text: str) -> int:
    """Whole MiB of a Kubernetes memory quantity (rounded down: what fits in it)."""
    return parse_quantity(text) // MIB


_SPARK_SIZE = re.compile(r"^(\d+)\s*([a-z]*)$")
_SPARK_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": MIB, "mb": MIB, "g": 1024 * MIB, "gb": 1024 * MIB,
                "t": MIB * MIB, "tb": MIB * MIB, "p": 1024 * MIB * MIB, "pb": 1024 * MIB * MIB}


def spark_mib(text: str) -> int:
    """MiB of a Spark memory setting (``2g``, ``1536m``, ``1536``: MiB without a unit), rounded down
    as Spark does; Spark refuses fractions, and so does this."""
    match = _SPARK_SIZE.match(str(text).strip().lower())
    if match is None or match.group(2) not in ("", *_SPARK_UNITS):
        raise QuantityError(f"{text!r} is not a Spark memory size (e.g. 2g, 1536m)")
    number, unit = int(match.group(1)), match.group(2)
    return number if unit == "" else number * _SPARK_UNITS[unit] // MIB


@dataclass(frozen=True)
class Container:
    """A container's memory as sizing reads it: ``mib``, and the setting it came from."""

    mib: int
    #: what to raise, as the user knows it (``spec.driver.limits.memory``, or a variable's name)
    field: str
    #: a limit (Kubernetes kills the container above it); False: a request only
    limit: bool = True

    @classmethod
    def of(cls, limit: str | None, request: str | None, *, limit_field: str,
           request_field: str) -> Container | None:
        """The limit, else the request (None without either)."""
        if limit:
            return cls(quantity_mib(limit), limit_field, limit=True)
        if request:
            return cls(quantity_mib(request), request_field, limit=False)
        return None


@dataclass(frozen=True)
class Budget:
    """How a container's MiB are split."""

    container: int
    heap: int
    #: the JVM's own memory outside the heap
    jvm: int
    #: the runtime's Python process (drivers only)
    python: int
    #: RocksDB's bound (0: no state store lives in this container)
    rocksdb: int

    @property
    def total(self) -> int:
        return self.heap + self.jvm + self.python + self.rocksdb


@dataclass(frozen=True)
class Sizing:
    budget: Budget
    #: the settings to add: derived values of keys the user's settings leave out
    conf: dict[str, str]
    warnings: tuple[str, ...] = field(default=())


def jvm_overhead_mib(container_mib: int, minimum: int = JVM_OVERHEAD_MIN_MIB) -> int:
    """The JVM's share outside the heap: max(``minimum``, 10 %) (Spark's ``memoryOverhead`` rule with
    its 384 MiB; a driver's minimum is :data:`DRIVER_JVM_MIN_MIB`)."""
    return max(minimum, math.ceil(container_mib * JVM_OVERHEAD_FACTOR))


def rocksdb_budget(container_mib: int) -> int:
    """RocksDB's bound in a container that holds the state stores: max(64 MiB, 10 %)."""
    return max(ROCKSDB_MIN_MIB, math.ceil(container_mib * ROCKSDB_FACTOR))


def uses_rocksdb(conf: Mapping[str, str]) -> bool:
    """Whether the state stores are RocksDB's (the plans' default provider) under ``conf``."""
    return conf.get("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER) == ROCKSDB_PROVIDER


def _user_mib(conf: Mapping[str, str], key: str) -> int | None:
    if key not in conf:
        return None
    try:
        return spark_mib(conf[key])
    except QuantityError as exc:
        raise SizingError(f"sparkConf {key}", str(exc)) from None


def _rocksdb(container: Container, conf: Mapping[str, str], rocksdb: bool) -> tuple[int, dict[str, str]]:
    """RocksDB's MiB in the arithmetic and the settings that bound it (the user's maxMemoryUsageMB
    counts as given; with boundedMemoryUsage=false the derived budget is still set aside)."""
    if not rocksdb:
        return 0, {}
    derived: dict[str, str] = {}
    if ROCKSDB_BOUNDED not in conf:
        derived[ROCKSDB_BOUNDED] = "true"
    if ROCKSDB_MAX_MB in conf:
        try:
            budget = int(str(conf[ROCKSDB_MAX_MB]).strip())
        except ValueError:
            raise SizingError(f"sparkConf {ROCKSDB_MAX_MB}", f"{conf[ROCKSDB_MAX_MB]!r} is not a whole "
                              "number of MB") from None
    else:
        budget = rocksdb_budget(container.mib)
        derived[ROCKSDB_MAX_MB] = str(budget)
    return budget, derived


def _shares(role: Role) -> tuple[int, int]:
    """The JVM's minimum share and Python's share of ``role``'s container."""
    return (DRIVER_JVM_MIN_MIB, PYTHON_MIB) if role == "driver" else (JVM_OVERHEAD_MIN_MIB, 0)


def minimum_mib(role: Role, *, rocksdb: bool) -> int:
    """The smallest container of ``role`` whose derived heap reaches :data:`MIN_HEAP_MIB`."""
    jvm, python = _shares(role)
    size = floor_mib(role)
    while (size - jvm_overhead_mib(size, jvm) - python - (rocksdb_budget(size) if rocksdb else 0)
           < MIN_HEAP_MIB):
        size += 1
    return size


def floor_mib(role: Role) -> int:
    """Below this a container of ``role`` cannot hold Spark's minimum heap and the JVM's and
    Python's own memory at all."""
    jvm, python = _shares(role)
    return MIN_HEAP_MIB + jvm + python


def driver(container: Container, conf: Mapping[str, str], *, rocksdb: bool) -> Sizing:
    """The driver's heap (``spark.driver.memory``) and RocksDB's bound in its container.

    ``rocksdb``: the driver's JVM holds RocksDB state stores (a local master and a stateful plan on
    RocksDB). heap = container - max(448 MiB, 10 %) - Python - RocksDB, at least 512 MiB. The user's
    ``spark.driver.memory`` wins; their ``spark.driver.memoryOverhead`` (which Spark itself ignores for
    a driver in client mode) replaces the JVM's share in the arithmetic.

    :class:`SizingError` when the container is a limit under Spark's minimum heap plus the JVM's own
    memory plus Python's (1088 MiB) and the user did not set the heap; a warning when the heap is
    squeezed to the minimum or the user's settings add up to more than the container.
    """
    user_overhead = _user_mib(conf, DRIVER_OVERHEAD)
    jvm = user_overhead if user_overhead is not None else jvm_overhead_mib(container.mib, DRIVER_JVM_MIN_MIB)
    rocks, derived = _rocksdb(container, conf, rocksdb)
    user_heap = _user_mib(conf, DRIVER_MEMORY)
    warnings: list[str] = []
    if user_heap is not None:
        budget = Budget(container.mib, user_heap, jvm, PYTHON_MIB, rocks)
        if budget.total > container.mib:
            warnings.append(_over(container, budget, f"sparkConf {DRIVER_MEMORY} {conf[DRIVER_MEMORY]}"))
        return Sizing(budget, derived, tuple(warnings))
    heap = container.mib - jvm - PYTHON_MIB - rocks
    if heap < MIN_HEAP_MIB:
        needed = minimum_mib("driver", rocksdb=rocksdb)
        if container.limit and container.mib < floor_mib("driver"):
            raise SizingError(container.field, (
                f"{container.mib} MiB cannot hold a Spark driver: its JVM heap needs at least "
                f"{MIN_HEAP_MIB} MiB, the JVM's own memory {DRIVER_JVM_MIN_MIB} MiB and the runtime's "
                f"Python process {PYTHON_MIB} MiB; raise it to at least {needed}Mi"))
        heap = MIN_HEAP_MIB
        if ROCKSDB_MAX_MB in derived:  # RocksDB gets what is left, at least its minimum
            rocks = max(ROCKSDB_MIN_MIB, container.mib - jvm - PYTHON_MIB - heap)
            derived[ROCKSDB_MAX_MB] = str(rocks)
        warnings.append(_squeezed(container, needed, rocks))
    derived[DRIVER_MEMORY] = f"{heap}m"
    return Sizing(Budget(container.mib, heap, jvm, PYTHON_MIB, rocks), derived, tuple(warnings))


def executor(container: Container, conf: Mapping[str, str], *, rocksdb: bool) -> Sizing:
    """An executor's heap and overhead, so that the pod Spark asks for (heap + overhead, as request
    and limit) is the container: overhead = max(384 MiB, 10 %) + RocksDB, heap = the rest, at least
    512 MiB. An executor runs no Python (``sluice-runtime executor`` becomes the JVM).

    The user's ``spark.executor.memory`` and ``spark.executor.memoryOverhead`` win; with one of them
    the other is the container's remainder (the overhead at least 384 MiB, the heap at least 512).
    Never refused (Spark sizes the pod itself): a warning when the pod comes out larger than the
    container, or with less overhead than the JVM and RocksDB need.
    """
    rocks, derived = _rocksdb(container, conf, rocksdb)
    need = jvm_overhead_mib(container.mib) + rocks
    user_heap = _user_mib(conf, EXECUTOR_MEMORY)
    user_overhead = _user_mib(conf, EXECUTOR_OVERHEAD)
    if user_heap is None and user_overhead is None:
        overhead, heap = need, max(MIN_HEAP_MIB, container.mib - need)
    elif user_overhead is None:
        assert user_heap is not None
        heap, overhead = user_heap, max(JVM_OVERHEAD_MIN_MIB, container.mib - user_heap)
    elif user_heap is None:
        overhead, heap = user_overhead, max(MIN_HEAP_MIB, container.mib - user_overhead)
    else:
        heap, overhead = user_heap, user_overhead
    if user_heap is None:
        derived[EXECUTOR_MEMORY] = f"{heap}m"
    if user_overhead is None:
        derived[EXECUTOR_OVERHEAD] = f"{overhead}m"
    budget = Budget(container.mib, heap, max(0, overhead - rocks), 0, rocks)
    warnings: list[str] = []
    if heap + overhead > container.mib:
        needed = minimum_mib("executor", rocksdb=rocksdb)
        warnings.append(
            f"{container.field}: {container.mib} MiB is less than an executor needs ({heap} MiB heap + "
            f"{overhead} MiB overhead): Spark asks for {heap + overhead}Mi per executor pod instead"
            + (f"; raise it to at least {needed}Mi" if user_heap is None and user_overhead is None else ""))
    elif overhead < need:
        warnings.append(
            f"sparkConf {EXECUTOR_MEMORY if user_heap is not None else EXECUTOR_OVERHEAD}: leaves "
            f"{overhead} MiB outside the heap of the {container.mib} MiB executor, under the {need} MiB "
            f"the JVM and RocksDB need: the pod may be killed for memory")
    return Sizing(budget, derived, tuple(warnings))


def _over(container: Container, budget: Budget, what: str) -> str:
    return (f"{what}: {budget.heap} MiB heap + {budget.jvm} MiB JVM + {budget.python} MiB Python + "
            f"{budget.rocksdb} MiB RocksDB = {budget.total} MiB, more than the {container.mib} MiB of "
            f"{container.field}: the container may be killed for memory")


def _squeezed(container: Container, needed: int, rocks: int) -> str:
    kind = "limit" if container.limit else "request"
    rocksdb = f", RocksDB bounded to {rocks} MiB" if rocks else ""
    return (f"{container.field}: {container.mib} MiB leaves the driver's JVM heap under Spark's minimum: "
            f"the heap is set to {MIN_HEAP_MIB} MiB{rocksdb}, and the container may be killed for memory "
            f"under load; raise the {kind} to at least {needed}Mi")
