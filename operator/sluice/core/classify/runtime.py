"""Spec changes outside the plan: how the query runs, not what it computes.

The plan holds everything that decides the results, including the trigger interval, the rate limit
(``maxOffsetsPerTrigger``) and a source's ``minPartitions``, which the plan comparison reports as
``transparent``. A few fields of a StreamingQuery spec never reach the plan but still change the
running query: pod resources (``spec.resources``: driver, executor, executor count), the pods'
templates (``spec.podTemplate``: placement and metadata), the driver restart nonce, and the sink
topic's partitions, replication factor and cleanup policy (used when the topic is created).
Changing them restarts the driver on the same checkpoint with the same plan: same results,
``transparent`` -> ``in-place``.

Fields that change neither the plan nor the running query are not compared: the upgrade policy
(``spec.upgrade``), ``deletionPolicy`` and ``suspend`` (a lifecycle switch, not an upgrade).

Pure: works on the spec as a plain mapping (the manifest's ``spec``), so the diff CLI and the
operator can pass what they have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.core.classify.comparison import TRANSPARENT, fmt
from sluice.core.classify.model import Change, change

#: Spec paths outside the plan that change the running query, and what they do.
RUNTIME_FIELDS: dict[str, str] = {
    "resources": "pod resources of the query (driver, executors)",
    "restartNonce": "the driver is restarted",
    "podTemplate": "placement and metadata of the query's pods (pod templates)",
    "sink.partitions": "partitions of the sink topic when it is created",
    "sink.replicationFactor": "replication factor of the sink topic when it is created",
    "sink.cleanupPolicy": "cleanup.policy of the sink topic when it is created",
}

_SNAKE = {"restart_nonce": "restartNonce", "replication_factor": "replicationFactor"}


def _camel(key: str) -> str:
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return _SNAKE.get(key, head + "".join(p[:1].upper() + p[1:] for p in rest))


def _leaves(value: Any, path: str, out: dict[str, Any]) -> None:
    """Flatten nested mappings into ``path.to.leaf -> value`` (empty and null leaves left out)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _leaves(v, f"{path}.{_camel(str(k))}", out)
    elif value is not None:
        out[path] = value


def flatten(value: Mapping[str, Any]) -> dict[str, Any]:
    """Nested mappings as ``path.to.leaf -> value`` (camelCase keys; empty and null leaves left out)."""
    flat: dict[str, Any] = {}
    _leaves(value, "", flat)
    return {path.lstrip("."): leaf for path, leaf in flat.items()}


def runtime_settings(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The runtime-relevant fields of a StreamingQuery spec outside the plan, flattened.

    ``{"resources.driver.limits.memory": "2Gi", "restartNonce": "a", "sink.partitions": 6}``;
    accepts camelCase (manifest) or snake_case (``model_dump()``) keys.
    """
    out: dict[str, Any] = {}
    if not spec:
        return out
    for path, value in flatten(spec).items():
        if any(path == f or path.startswith(f + ".") for f in RUNTIME_FIELDS):
            out[path] = value
    return out


def runtime_changes(old_spec: Mapping[str, Any] | None, new_spec: Mapping[str, Any] | None) -> list[Change]:
    """One ``transparent`` change per runtime field (outside the plan) that differs."""
    old, new = runtime_settings(old_spec), runtime_settings(new_spec)
    changes: list[Change] = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        top = next(f for f in RUNTIME_FIELDS if path == f or path.startswith(f + "."))
        changes.append(
            change(
                "transparent",
                "spec",
                path,
                a,
                b,
                f"spec.{path} changed from {fmt(a)} to {fmt(b)} ({RUNTIME_FIELDS[top]}); it is "
                f"not part of the plan and does not change what the query computes: the driver "
                f"restarts on the same checkpoint with the same plan. {TRANSPARENT}",
            )
        )
    return changes
