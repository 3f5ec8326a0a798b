"""Where a query's checkpoint lives and what a node loss leaves it (pure): the storage mode of a
QueryCluster (``objectStore`` or the state claim's access mode), whether the drivers survive a node
loss (the ``NodeLossTolerant`` condition), executors refused on a one-node claim, and the warnings
``kubectl apply`` prints for standbys on one. Used by the admission webhook
(:mod:`sluice.core.admission`) and by the operator's builders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the storage mode of a query's checkpoint: ``objectStore``, or the state claim's access mode
OBJECT_STORE = "objectStore"
#: claim access modes whose volume attaches to one node
ONE_NODE_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})


def storage_mode(storage: Mapping[str, Any] | None) -> str:
    """``objectStore`` or the access mode of a QueryCluster's ``spec.storage`` (as written)."""
    storage = storage if isinstance(storage, Mapping) else {}
    if storage.get(OBJECT_STORE):
        return OBJECT_STORE
    return str(storage.get("accessMode") or "ReadWriteOnce")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def node_loss(mode: str, standbys: int) -> tuple[bool, str]:
    """Whether a node loss leaves a query a driver on another node (the ``NodeLossTolerant``
    condition), and why."""
    where = "the object store" if mode == OBJECT_STORE else f"a {mode} claim"
    if mode not in ONE_NODE_MODES:
        if standbys == 0:
            return True, (f"checkpoint on {where}: after a node loss the driver starts again on another "
                          f"node (no standby: the query stops until then)")
        return True, (f"checkpoint on {where}: the driver and its {_plural(standbys, 'standby')} are spread "
                      f"over nodes (preferred): a standby on another node takes over after a node loss")
    if standbys == 0:
        return False, (f"checkpoint on {where}: the driver is bound to the claim's node; after a node loss "
                       f"it waits until the volume can attach elsewhere")
    return False, (f"storage.accessMode {mode} keeps the driver and its {_plural(standbys, 'standby')} on "
                   f"the state claim's node: a node loss takes all of them; use storage.objectStore or a "
                   f"ReadWriteMany storage class to spread them")


def executor_claim_problem(field: str, executors: int, mode: str) -> str | None:
    """Why ``executors`` executor pods cannot share a state claim of access mode ``mode`` (they mount
    it from any node; a ReadWriteOnce(Pod) volume attaches to one node), or None."""
    if executors == 0 or mode not in ONE_NODE_MODES:
        return None
    verb = "mounts" if executors == 1 else "mount"
    return (f"{field}: {_plural(executors, 'executor pod')} {verb} the state claim from any node; "
            f"QueryCluster storage.accessMode {mode} attaches it to one node: use storage.objectStore or "
            f"storage.accessMode ReadWriteMany, or executors 0")


def int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def storage_review(spec: Mapping[str, Any], cluster: Mapping[str, Any] | None, status: Mapping[str, Any],
                   cluster_ref: str) -> tuple[str | None, list[str]]:
    """A query's layout against its cluster's storage: the refusal (executors on a one-node claim) and
    the warnings (standbys on a one-node claim). The storage is the one the query started on
    (``status.engine``) once it runs, else the cluster's."""
    if cluster is None:
        return None, []
    engine = status.get("engine") if isinstance(status.get("engine"), Mapping) else None
    storage = dict(cluster.get("storage") or {}) if isinstance(cluster.get("storage"), Mapping) else {}
    if engine is not None:
        storage[OBJECT_STORE] = engine.get(OBJECT_STORE)
    mode = storage_mode(storage)
    resources = spec.get("resources") if isinstance(spec.get("resources"), Mapping) else {}
    own_executors = resources.get("executors") if isinstance(resources, Mapping) else None
    executors = int_or(own_executors, int_or(cluster.get("executors"), 0))
    field = ("spec.resources.executors" if own_executors is not None
             else f"spec.executors (QueryCluster {cluster_ref!r})")
    problem = executor_claim_problem(field, executors, mode)
    own_standbys = spec.get("standbyReplicas")
    standbys = int_or(own_standbys, int_or(cluster.get("standbyReplicas"), 0))
    warning = standby_warning(mode, standbys)
    return problem, [warning] if warning else []


def standby_warning(mode: str, standbys: int) -> str | None:
    """What ``kubectl apply`` warns of standbys on a ReadWriteOnce claim: a node loss takes them all."""
    tolerant, why = node_loss(mode, standbys)
    return why if not tolerant and standbys > 0 and mode == "ReadWriteOnce" else None


def checkpoint_store(spec: Mapping[str, Any]) -> str:
    """Where a QueryCluster spec puts new queries' checkpoints: its object store's uri, or ``the state
    volume``."""
    storage = spec.get("storage") if isinstance(spec.get("storage"), Mapping) else {}
    store = storage.get(OBJECT_STORE) if isinstance(storage, Mapping) else None
    uri = store.get("uri") if isinstance(store, Mapping) else None
    return str(uri).rstrip("/") if uri else "the state volume"
