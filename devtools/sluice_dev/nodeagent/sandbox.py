"""What stands in for a container's sandbox: /etc/hosts, in-cluster variables, mount fallback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


def in_cluster_env(hostname: str, api_port: int) -> dict[str, str]:
    """``HOSTNAME`` and the variables in-cluster clients use to find the API server."""
    port = str(api_port)
    return {
        "HOSTNAME": hostname,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
    }


def hosts_file(pod: Obj, ip: str, extra: list[str] | None = None) -> str:
    """The pod's /etc/hosts: localhost, its own name(s) on its IP, the API server, hostAliases."""
    spec, meta = pod["spec"], pod["metadata"]
    hostname = spec.get("hostname") or meta["name"]
    names = [hostname]
    if spec.get("subdomain"):
        names.insert(0, f"{hostname}.{spec['subdomain']}.{meta['namespace']}.svc.cluster.local")
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{ip}\t{' '.join(names)}",
        "127.0.0.1\tkubernetes kubernetes.default kubernetes.default.svc "
        "kubernetes.default.svc.cluster.local",
    ]
    for alias in spec.get("hostAliases", []) or []:
        lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames', []))}")
    lines.extend(extra or [])
    return "\n".join(lines) + "\n"


def symlink_fallback(mounts: list[Obj]) -> None:
    """Without mount namespaces: point each mountPath at its volume with a symlink (best effort).

    A path that exists and is not a symlink is left alone; a symlink is re-pointed, so the most
    recently started container wins.
    """
    for m in mounts:
        dst = Path(m["dst"])
        if dst.is_symlink() and os.readlink(dst) != m["src"]:
            dst.unlink()
        if not dst.exists() and not dst.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(m["src"])


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_hosts(namespace: str, services: list[Obj], pods: list[Obj]) -> list[str]:
    """/etc/hosts lines standing in for cluster DNS (there is none).

    A Service with a selector resolves to the IP of one pod it selects (a ready one first);
    ClusterIPs do not route here, so clients must use the target port. Pods with a ``hostname``
    and ``subdomain`` get their ``<hostname>.<subdomain>.<ns>.svc`` names. Short names only for
    the pod's own namespace.
    """

    def ready(pod: Obj) -> bool:
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in pod.get("status", {}).get("conditions") or []
        )

    live = [
        p
        for p in pods
        if p.get("status", {}).get("podIP")
        and not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") in ("Pending", "Running")
    ]
    lines = []
    for svc in services:
        meta = svc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        selector = svc.get("spec", {}).get("selector") or {}
        chosen = sorted(
            (
                p
                for p in live
                if p["metadata"]["namespace"] == ns and _matches(selector, p["metadata"].get("labels") or {})
            ),
            key=lambda p: (not ready(p), p["metadata"]["name"]),
        )
        if not chosen:
            continue
        names = [f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}.svc", f"{name}.{ns}"]
        if ns == namespace:
            names.append(name)
        lines.append(f"{chosen[0]['status']['podIP']}\t{' '.join(names)}")
    for pod in live:
        spec, meta = pod.get("spec", {}), pod["metadata"]
        if spec.get("hostname") and spec.get("subdomain"):
            fqdn = f"{spec['hostname']}.{spec['subdomain']}.{meta['namespace']}.svc"
            lines.append(f"{pod['status']['podIP']}\t{fqdn}.cluster.local {fqdn}")
    return lines
