"""A small Kubernetes REST client for the driver: its Lease and its own Pod's labels.

The runtime does not import the ``kubernetes`` package (the data plane stays light); it talks to
the API server with the standard library, authenticated by the pod's service-account token:

* in a pod: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the token and CA
  under ``/var/run/secrets/kubernetes.io/serviceaccount``;
* elsewhere (tests, local runs): ``SLUICE_KUBE_SERVER``, ``SLUICE_KUBE_TOKEN_FILE``,
  ``SLUICE_KUBE_CA_FILE``.

The token file is read on every request (kubelets rotate projected tokens).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


class KubeApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class KubeConfig:
    server: str
    token_file: str
    ca_file: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KubeConfig:
        server = env.get("SLUICE_KUBE_SERVER")
        if not server:
            host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
            if not host or not port:
                raise ValueError("no API server: set KUBERNETES_SERVICE_HOST/PORT (in a pod) "
                                 "or SLUICE_KUBE_SERVER")
            host = f"[{host}]" if ":" in host else host
            server = f"https://{host}:{port}"
        token_file = env.get("SLUICE_KUBE_TOKEN_FILE", f"{SA_DIR}/token")
        ca_file = env.get("SLUICE_KUBE_CA_FILE", f"{SA_DIR}/ca.crt")
        return cls(server=server.rstrip("/"), token_file=token_file,
                   ca_file=ca_file if os.path.exists(ca_file) else None)


class KubeApi:
    def __init__(self, config: KubeConfig, timeout: float = 5.0) -> None:
        self.config = config
        self.timeout = timeout
        self._ssl = ssl.create_default_context(cafile=config.ca_file) if config.ca_file else None

    def _token(self) -> str:
        with open(self.config.token_file, encoding="utf-8") as fh:
            return fh.read().strip()

    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                 timeout: float | None = None) -> Any:
        token = self._token()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.config.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                text = json.loads(text).get("message", text)
            except ValueError:
                pass
            raise KubeApiError(exc.code, text) from None

    # -- leases -----------------------------------------------------------------------------
    def get_lease(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._request("GET", f"{LEASES.format(ns=ns)}/{name}"))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        ns = lease["metadata"]["namespace"]
        return dict(self._request("POST", LEASES.format(ns=ns), lease))

    def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        """PUT with the lease's resourceVersion: a 409 means someone else changed it first."""
        meta = lease["metadata"]
        return dict(self._request("PUT", f"{LEASES.format(ns=meta['namespace'])}/{meta['name']}", lease))

    def watch_lease(self, ns: str, name: str, resource_version: str, timeout: float = 60.0
                    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events (type, object) of one Lease from ``resource_version`` on, until the server ends
        the watch (``timeout``)."""
        token = self._token()
        path = (f"{LEASES.format(ns=ns)}?watch=1&fieldSelector=metadata.name%3D{name}"
                f"&resourceVersion={resource_version}&timeoutSeconds={int(timeout)}&allowWatchBookmarks=false")
        req = urllib.request.Request(self.config.server + path, method="GET")
        req.add_header("Authorization", f"Bearer {token}")
        try:
            resp = urllib.request.urlopen(req, timeout=timeout + 10, context=self._ssl)
        except urllib.error.HTTPError as exc:
            raise KubeApiError(exc.code, exc.read().decode(errors="replace")) from None
        with resp:
            for line in resp:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise KubeApiError(int(status.get("code") or 500), str(status.get("message")))
                yield str(event.get("type")), dict(event.get("object") or {})

    # -- pods -------------------------------------------------------------------------------
    def patch_pod_metadata(self, ns: str, name: str, labels: dict[str, str],
                           annotations: dict[str, str]) -> None:
        """Merge ``labels`` and ``annotations`` into a pod's metadata through its ``status``
        subresource, which changes metadata and status but never the spec: all the driver's Role
        grants on pods without executors (``sluice.operator.builders.rbac``)."""
        self._request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                      {"metadata": {"labels": labels, "annotations": annotations}},
                      content_type="application/merge-patch+json")
