"""The memory of a query's containers as the builders pass it on (the arithmetic is
``sluice.core.sizing``'s).

* Executors: Spark asks each executor pod for heap + overhead (as request and limit), so the
  operator sets both (and RocksDB's bound: the state stores live there) from the executor container
  in ``SLUICE_SPARK_CONF``.
* The driver: its heap must be known before its JVM starts, and the container's memory may come from
  elsewhere than the QueryCluster (a LimitRange, a pod template), so the operator passes the
  container's own limit (else request) through the Downward API and the runtime derives
  ``spark.driver.memory`` from it (``sluice_runtime.session``), and RocksDB's bound with a local
  master, where the runtime knows whether the plan keeps state.
"""

from __future__ import annotations

from typing import Any

from sluice.core import sizing
from sluice.operator.builders.context import QueryContext

#: the driver container's memory limit / request, in bytes (Downward API ``resourceFieldRef``)
MEMORY_LIMIT_ENV = sizing.MEMORY_LIMIT_ENV
MEMORY_REQUEST_ENV = sizing.MEMORY_REQUEST_ENV


def memory_field(ctx: QueryContext, role: str, kind: str, cluster_name: str = "") -> str:
    """The field the memory ``kind`` (``limits``/``requests``) of ``role`` (``driver``/``executor``)
    comes from: the query's override, else the QueryCluster's."""
    override = getattr(ctx.spec.resources, role, None) if ctx.spec.resources else None
    amounts = getattr(override, kind, None) if override is not None else None
    if amounts is not None and amounts.memory:
        return f"spec.resources.{role}.{kind}.memory"
    return f"spec.{role}.{kind}.memory of QueryCluster" + (f" {cluster_name!r}" if cluster_name else "")


def container(ctx: QueryContext, role: str, cluster_name: str = "") -> sizing.Container | None:
    """The memory ``role``'s container has: its limit, else its request (None without either)."""
    res = ctx.executor_resources if role == "executor" else ctx.driver_resources
    return sizing.Container.of(res.limits.memory if res.limits else None,
                               res.requests.memory if res.requests else None,
                               limit_field=memory_field(ctx, role, "limits", cluster_name),
                               request_field=memory_field(ctx, role, "requests", cluster_name))


def executor_sizing(ctx: QueryContext, cluster_name: str = "") -> sizing.Sizing | None:
    """The executors' heap, overhead and RocksDB bound (the QueryCluster's sparkConf wins); None
    without executors or an executor memory."""
    found = container(ctx, "executor", cluster_name) if ctx.executors > 0 else None
    if found is None:
        return None
    user = ctx.cluster.spark_conf
    return sizing.executor(found, user, rocksdb=sizing.uses_rocksdb(user))


def executor_conf(ctx: QueryContext) -> dict[str, str]:
    """The executor settings the operator derives: those the QueryCluster's sparkConf leaves out.
    Nothing when a user setting is not a size Spark reads: Spark refuses it with its own words."""
    try:
        sized = executor_sizing(ctx)
    except sizing.SizingError:
        return {}
    return dict(sized.conf) if sized is not None else {}


def memory_env(ctx: QueryContext) -> list[dict[str, Any]]:
    """``SLUICE_MEMORY_LIMIT`` (else ``SLUICE_MEMORY_REQUEST``) of the driver container, from the
    Downward API. Nothing without either: for a limit that is not set the Downward API gives the
    node's allocatable memory, which no heap should be derived from."""
    res = ctx.driver_resources
    if res.limits and res.limits.memory:
        name, resource = MEMORY_LIMIT_ENV, "limits.memory"
    elif res.requests and res.requests.memory:
        name, resource = MEMORY_REQUEST_ENV, "requests.memory"
    else:
        return []
    return [{"name": name, "valueFrom": {"resourceFieldRef": {"resource": resource}}}]


def memory_problem(ctx: QueryContext, cluster_name: str) -> str | None:
    """Why the containers cannot run a Spark driver (a driver limit under 1024 MiB without a heap in
    sparkConf, or a sparkConf size Spark cannot read), naming the field; None when they can. The
    runtime refuses to start in such a container in the same words. The plan is not known here:
    RocksDB is assumed wherever the state stores live."""
    found = container(ctx, "driver", cluster_name)
    try:
        if found is not None:
            sizing.driver(found, ctx.cluster.spark_conf, rocksdb=ctx.executors == 0)
        executor_sizing(ctx, cluster_name)
    except sizing.SizingError as exc:
        return str(exc)
    return None


def memory_warnings(ctx: QueryContext, cluster_name: str) -> list[str]:
    """What the arithmetic warns about: a heap squeezed to Spark's minimum, settings that add up to
    more than the container, executor pods larger than the executor container ([] after a problem:
    :func:`memory_problem` says it)."""
    found = container(ctx, "driver", cluster_name)
    try:
        driver = sizing.driver(found, ctx.cluster.spark_conf, rocksdb=ctx.executors == 0) if found else None
        executors = executor_sizing(ctx, cluster_name)
    except sizing.SizingError:
        return []
    return [*(driver.warnings if driver else ()), *(executors.warnings if executors else ())]
