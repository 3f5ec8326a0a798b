"""A thin, dict-in/dict-out Kubernetes REST client on top of the kubernetes package's ApiClient.

Handlers talk to the API only through this module: every call is counted (for metrics and the
benchmark), errors carry the HTTP status, and create-or-get makes creation idempotent under
conflicts and operator restarts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from sluice.crd.base import GROUP, VERSION

#: kind -> (API path prefix, plural)
KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("/api/v1", "configmaps"),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
    "Service": ("/api/v1", "services"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Pod": ("/api/v1", "pods"),
    "Secret": ("/api/v1", "secrets"),
    "Event": ("/api/v1", "events"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),
    "StreamingQuery": (f"/apis/{GROUP}/{VERSION}", "streamingqueries"),
    "QueryCluster": (f"/apis/{GROUP}/{VERSION}", "queryclusters"),
}

#: kinds whose spec the operator converges (others are created once and left alone: the plan
#: ConfigMap is immutable, the claim's owner follows the deletion policy by patch, and the driver
#: Lease belongs to the drivers once created)
MUTABLE_KINDS = frozenset({"Deployment", "Service", "Role", "RoleBinding", "PodDisruptionBudget"})
SPEC_HASH = "sluice.dev/spec-hash"

MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{what}: HTTP {status}: {message}")


def spec_hash(obj: dict[str, Any]) -> str:
    content = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    content["labels"] = obj.get("metadata", {}).get("labels", {})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class CallCounter:
    total: int = 0
    by_verb: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.by_verb = {}
        self._lock = threading.Lock()

    def add(self, verb: str) -> None:
        with self._lock:
            self.total += 1
            assert self.by_verb is not None
            self.by_verb[verb] = self.by_verb.get(verb, 0) + 1


CALLS = CallCounter()


class Kube:
    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        self.api = api_client
        self.timeout = timeout

    # -- raw ---------------------------------------------------------------------------------
    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
        query: dict[str, Any] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if query:
            path = f"{path}?{urlencode(query)}"
        method, url, headers, _, _ = self.api.param_serialize(
            method=method, resource_path=path, header_params=headers, auth_settings=["BearerToken"],
        )
        CALLS.add(method)
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=self.timeout)
            resp.read()
        except ApiException as exc:
            try:
                payload = json.loads(exc.body) if exc.body else {}
            except ValueError:
                payload = exc.body
            raise KubeError(exc.status or 0, payload, f"{method} {path}") from exc
        raw = resp.data
        payload = json.loads(raw) if raw else None
        if resp.status >= 400:
            raise KubeError(resp.status, payload, f"{method} {path}")
        return payload

    # -- paths -------------------------------------------------------------------------------
    @staticmethod
    def path(kind: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        prefix, plural = KINDS[kind]
        out = prefix
        if namespace is not None:
            out += f"/namespaces/{quote(namespace)}"
        out += f"/{plural}"
        if name is not None:
            out += f"/{quote(name)}"
        if sub:
            out += f"/{sub}"
        return out

    # -- verbs -------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        return self.request("GET", self.path(kind, namespace), query=query).get("items", [])

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace")
        return self.request("POST", self.path(obj["kind"], ns), obj)

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
              sub: str | None = None) -> dict[str, Any]:
        return self.request("PATCH", self.path(kind, namespace, name, sub), patch, content_type=MERGE_PATCH)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("PUT", self.path(obj["kind"], meta["namespace"], meta["name"]), obj)

    def delete(self, kind: str, namespace: str, name: str, *, propagation: str = "Background") -> bool:
        try:
            self.request("DELETE", self.path(kind, namespace, name),
                         {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self.patch(kind, namespace, name, body, sub="status")

    # -- idempotent create -------------------------------------------------------------------
    def ensure(self, obj: dict[str, Any], probe_first: bool = False,
               replace: bool = True) -> tuple[dict[str, Any], str]:
        """Create ``obj`` or converge the existing one; returns (object, created|updated|unchanged).

        ``probe_first``: read before creating (cheaper when the object usually exists). A 409 on
        create means someone (another reconcile, a previous operator run) created it already:
        read it and converge. Objects of ``MUTABLE_KINDS`` are replaced when the desired spec hash
        (annotation) differs (unless ``replace`` is False); the others are left as found.
        """
        obj = json.loads(json.dumps(obj))
        meta = obj["metadata"]
        meta.setdefault("annotations", {})[SPEC_HASH] = spec_hash(obj)
        kind, ns, name = obj["kind"], meta["namespace"], meta["name"]
        existing = self.get(kind, ns, name) if probe_first else None
        for _attempt in range(4):
            if existing is None:
                try:
                    return self.create(obj), "created"
                except KubeError as exc:
                    if exc.status != 409:
                        raise
                existing = self.get(kind, ns, name)
                if existing is None:
                    continue
            if kind not in MUTABLE_KINDS or not replace:
                return existing, "unchanged"
            current = existing["metadata"].get("annotations", {}).get(SPEC_HASH)
            if current == meta["annotations"][SPEC_HASH]:
                return existing, "unchanged"
            desired = dict(obj)
            desired["metadata"] = {
                **existing["metadata"],
                "labels": meta.get("labels", {}),
                "annotations": {**existing["metadata"].get("annotations", {}), **meta["annotations"]},
                "ownerReferences": meta.get("ownerReferences", existing["metadata"].get("ownerReferences")),
            }
            if kind == "Service":  # clusterIP is immutable and server-assigned
                desired["spec"] = {**desired["spec"], "clusterIP": existing["spec"].get("clusterIP")}
            try:
                return self.replace(desired), "updated"
            except KubeError as exc:
                if exc.status != 409:
                    raise
                existing = self.get(kind, ns, name)
        raise KubeError(409, {"message": "conflicts did not settle"}, f"ensure {kind} {ns}/{name}")
