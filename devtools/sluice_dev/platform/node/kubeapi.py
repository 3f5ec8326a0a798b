"""A very small JSON client for the Kubernetes API (plain dicts, list+watch, raw verbs).

The agent works on plain JSON objects (camelCase keys as on the wire) rather than the generated
models, so that status patches and unknown fields round-trip unchanged. Credentials come from a
kubeconfig, read by the official client's loader (client certificates, tokens, CA data).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, body: str, method: str, path: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")


class Api:
    """JSON requests against the API server named by a kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.server: str = cfg.host.rstrip("/")
        self.ca_file: str | None = cfg.ssl_ca_cert
        headers = {"Accept": "application/json"}
        token = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix("BearerToken")
        if token:
            headers["Authorization"] = token
        self._headers = headers
        kwargs: dict[str, Any] = {"maxsize": 64, "block": False, "retries": False}
        if self.server.startswith("https"):
            kwargs.update(
                cert_reqs=ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE,
                ca_certs=cfg.ssl_ca_cert,
                cert_file=cfg.cert_file,
                key_file=cfg.key_file,
            )
        self._pool = urllib3.PoolManager(num_pools=4, **kwargs)
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        parts = urlsplit(self.server)
        return parts.port or (443 if parts.scheme == "https" else 80)

    def ca_pem(self) -> str:
        return Path(self.ca_file).read_text() if self.ca_file else ""

    def _url(self, path: str, query: dict[str, Any] | None) -> str:
        url = self.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        return url

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Obj:
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        resp = self._pool.request(
            method,
            self._url(path, query),
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=5.0, read=timeout),
            preload_content=True,
        )
        text = resp.data.decode("utf-8", "replace")
        if resp.status >= 300:
            raise ApiError(resp.status, text, method, path)
        return json.loads(text) if text else {}

    def request_text(self, path: str, **query: Any) -> str:
        """GET a plain-text resource (e.g. a pod's ``/log``)."""
        resp = self._pool.request(
            "GET",
            self._url(path, query or None),
            headers={**self._headers, "Accept": "*/*"},
            timeout=urllib3.Timeout(connect=5.0, read=30.0),
        )
        text = resp.data.decode("utf-8", "replace")
        if resp.status >= 300:
            raise ApiError(resp.status, text, "GET", path)
        return text

    def get(self, path: str, **query: Any) -> Obj:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Obj | None:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Obj, *, strategic: bool = False) -> Obj:
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return self.request("PATCH", path, body, content_type=f"application/{kind}+json")

    def put(self, path: str, body: Obj) -> Obj:
        return self.request("PUT", path, body)

    def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def watch(self, path: str, resource_version: str, *, timeout: int = 45, **query: Any) -> Iterator[Obj]:
        """Yield watch events (``{"type", "object"}``) until the server ends the stream."""
        params = dict(
            query,
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=timeout,
            allowWatchBookmarks="true",
        )
        resp = self._pool.request(
            "GET",
            self._url(path, params),
            headers=self._headers,
            timeout=urllib3.Timeout(connect=5.0, read=timeout + 15),
            preload_content=False,
        )
        try:
            if resp.status >= 300:
                raise ApiError(resp.status, resp.read().decode("utf-8", "replace"), "WATCH", path)
            buffer = b""
            for chunk in resp.stream(None, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()


def list_watch(
    api: Api,
    path: str,
    on_event: Callable[[str, Obj], None],
    stop: threading.Event,
    *,
    on_list: Callable[[list[Obj]], None] | None = None,
    **query: Any,
) -> None:
    """List then watch ``path`` until ``stop`` is set, re-listing on errors and expiry.

    ``on_event(type, obj)`` gets ``ADDED``/``MODIFIED``/``DELETED``; after each (re)list,
    ``on_list(items)`` gets the complete current set (so callers can reconcile what they missed).
    """
    while not stop.is_set():
        try:
            listing = api.get(path, **query)
            for item in listing.get("items", []):
                on_event("ADDED", item)
            if on_list is not None:
                on_list(listing.get("items", []))
            rv = listing["metadata"]["resourceVersion"]
            while not stop.is_set():
                for event in api.watch(path, rv, **query):
                    kind, obj = event.get("type"), event.get("object", {})
                    if kind == "ERROR":
                        raise ApiError(int(obj.get("code", 500)), json.dumps(obj), "WATCH", path)
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if kind != "BOOKMARK":
                        on_event(str(kind), obj)
                    if stop.is_set():
                        return
        except Exception as exc:
            if stop.is_set():
                return
            log.warning("watch %s: %s; re-listing", path, exc)
            stop.wait(1.0)
