"""Shared inputs for the operator's unit tests: manifests, contexts, a fake Kubernetes API."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders import QueryContext
from sluice.operator.kube import MUTABLE_KINDS, SPEC_HASH, KubeError, spec_hash

SQL = """SELECT customer, count(*) AS orders, sum(amount) AS total
FROM orders GROUP BY customer"""


def query_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "sources": [{
            "name": "orders", "topic": "orders",
            "schema": [{"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
                       {"name": "amount", "type": "double"}],
        }],
        "sql": SQL,
        "sink": {"topic": "totals", "key": ["customer"], "outputMode": "update"},
        "trigger": {"processingTime": "5 seconds"},
    }
    spec.update(overrides)
    return spec


def cluster_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceId": "shop", "kafka": {"bootstrapServers": "kafka:9092"}}
    spec.update(overrides)
    return spec


def context(name: str = "totals", spec: dict[str, Any] | None = None,
            cluster: dict[str, Any] | None = None, **kw: Any) -> QueryContext:
    return QueryContext(
        namespace="shop", name=name, uid="0123456789abcdef-uid",
        spec=StreamingQuerySpec.model_validate(spec or query_spec()),
        cluster=QueryClusterSpec.model_validate(cluster or cluster_spec()), **kw,
    )


class FakeKube:
    """An in-memory API with the verbs sluice.operator.kube.Kube offers (resourceVersion, 409, 404)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self._rv = itertools.count(1)
        self.fail_creates: set[str] = set()

    def _key(self, kind: str, ns: str, name: str) -> tuple[str, str, str]:
        return (kind, ns, name)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("GET", kind, name))
        obj = self.objects.get(self._key(kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        self.calls.append(("LIST", kind, ""))
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                if k == kind and ns == namespace
                and all(o["metadata"].get("labels", {}).get(a) == b for a, b in wanted.items())]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.calls.append(("POST", obj["kind"], meta["name"]))
        if obj["kind"] in self.fail_creates:
            raise KubeError(500, {"message": "injected"}, "POST")
        key = self._key(obj["kind"], meta["namespace"], meta["name"])
        if key in self.objects:
            raise KubeError(409, {"message": "exists"}, "POST")
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        stored["metadata"].setdefault("uid", f"uid-{meta['name']}")
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.calls.append(("PUT", obj["kind"], meta["name"]))
        key = self._key(obj["kind"], meta["namespace"], meta["name"])
        current = self.objects.get(key)
        if current is None:
            raise KubeError(404, {"message": "not found"}, "PUT")
        if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise KubeError(409, {"message": "conflict"}, "PUT")
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        if "status" in current:
            stored["status"] = current["status"]
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
              sub: str | None = None) -> dict[str, Any]:
        self.calls.append(("PATCH", kind, name))
        key = self._key(kind, namespace, name)
        if key not in self.objects:
            raise KubeError(404, {"message": "not found"}, "PATCH")
        merged = merge_patch(self.objects[key], patch)
        merged["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = merged
        return copy.deepcopy(merged)

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        return self.patch(kind, namespace, name, {"status": status}, sub="status")

    def delete(self, kind: str, namespace: str, name: str, *, propagation: str = "Background") -> bool:
        self.calls.append(("DELETE", kind, name))
        return self.objects.pop(self._key(kind, namespace, name), None) is not None

    def ensure(self, obj: dict[str, Any], probe_first: bool = False) -> tuple[dict[str, Any], str]:
        from sluice.operator.kube import Kube

        return Kube.ensure(self, obj, probe_first)  # type: ignore[arg-type]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


__all__ = ["MUTABLE_KINDS", "SPEC_HASH", "FakeKube", "cluster_spec", "context", "json", "query_spec",
           "spec_hash"]
