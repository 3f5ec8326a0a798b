"""Pod volumes materialised as directories under ``<pod dir>/volumes/<name>``.

emptyDir, hostPath, configMap, secret, downwardAPI, projected (serviceAccountToken through the
TokenRequest API, configMap, secret, downwardAPI) and persistentVolumeClaim (PVC -> bound PV ->
its hostPath/local path). Tokens are re-issued at 80% of their lifetime; configMap and secret
contents are a snapshot taken when the pod starts (no live updates).
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sluice_dev.nodeagent import envres
from sluice_dev.nodeagent.kubeapi import Api, ApiError

Obj = dict[str, Any]


class VolumeNotReady(RuntimeError):
    """Not yet possible (PVC not bound, object missing); retried."""


def write_atomic(path: Path, data: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode if mode is not None else 0o644)
    tmp.replace(path)


def _keys(
    data: Mapping[str, bytes], items: list[Obj] | None, default_mode: int | None, what: str
) -> list[tuple[str, bytes, int | None]]:
    """(relative path, content, mode) for a configMap/secret source, honouring ``items``."""
    if not items:
        return [(key, value, default_mode) for key, value in data.items()]
    out: list[tuple[str, bytes, int | None]] = []
    for item in items:
        if item["key"] not in data:
            raise VolumeNotReady(f"key {item['key']!r} not found in {what}")
        out.append((str(item.get("path", item["key"])), data[item["key"]], item.get("mode", default_mode)))
    return out


class Volumes:
    """The volumes of one pod."""

    def __init__(
        self, api: Api, pod: Obj, pod_dir: Path, pod_ip: str, allocatable: Mapping[str, str] | None = None
    ) -> None:
        self.api = api
        self.pod = pod
        self.root = pod_dir / "volumes"
        self.pod_ip = pod_ip
        self.allocatable = dict(allocatable or {})
        self.paths: dict[str, Path] = {}
        self.read_only: set[str] = set()
        self._tokens: list[tuple[Path, Obj, int | None, float]] = []  # file, source, mode, refresh at
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]

    # -- lookups -------------------------------------------------------------------------------

    def _object(self, kind: str, name: str, optional: bool) -> Obj | None:
        plural = "configmaps" if kind == "configmap" else "secrets"
        obj = self.api.get_or_none(f"/api/v1/namespaces/{self.namespace}/{plural}/{name}")
        if obj is None and not optional:
            raise VolumeNotReady(f"{kind} {self.namespace}/{name} not found")
        return obj

    def _configmap_files(self, src: Obj, default_mode: int | None) -> list[tuple[str, bytes, int | None]]:
        obj = self._object("configmap", src.get("name", ""), bool(src.get("optional")))
        if obj is None:
            return []
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return _keys(
            data, src.get("items"), src.get("defaultMode", default_mode), f"configmap {src.get('name')}"
        )

    def _secret_files(self, src: Obj, default_mode: int | None) -> list[tuple[str, bytes, int | None]]:
        name = src.get("secretName") or src.get("name", "")
        obj = self._object("secret", name, bool(src.get("optional")))
        if obj is None:
            return []
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        return _keys(data, src.get("items"), src.get("defaultMode", default_mode), f"secret {name}")

    def _downward_files(self, src: Obj, default_mode: int | None) -> list[tuple[str, bytes, int | None]]:
        out = []
        for item in src.get("items", []) or []:
            if "fieldRef" in item:
                value = envres.field_value(self.pod, item["fieldRef"]["fieldPath"], self.pod_ip)
            else:
                ref = item["resourceFieldRef"]
                container = next(
                    (c for c in self.pod["spec"]["containers"] if c["name"] == ref.get("containerName")),
                    self.pod["spec"]["containers"][0],
                )
                value = envres.resource_value(container, ref, self.allocatable)
            out.append((item["path"], value.encode(), item.get("mode", default_mode)))
        return out

    def _token(self, src: Obj) -> tuple[bytes, float]:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        sa = spec.get("serviceAccountName") or "default"
        ttl = int(src.get("expirationSeconds") or 3600)
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [src["audience"]] if src.get("audience") else [],
                "expirationSeconds": ttl,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        try:
            result = self.api.create(f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{sa}/token", body)
        except ApiError as exc:
            raise VolumeNotReady(f"token request for serviceaccount {sa}: {exc}") from exc
        return result["status"]["token"].encode(), time.time() + 0.8 * ttl

    # -- materialisation -------------------------------------------------------------------------

    def setup(self) -> None:
        """Create every volume (idempotent); raises ``VolumeNotReady`` to be retried later."""
        for volume in self.pod["spec"].get("volumes", []) or []:
            name = volume["name"]
            if name in self.paths:
                continue
            self.paths[name] = self._materialise(name, volume)

    def _write_all(self, target: Path, files: list[tuple[str, bytes, int | None]]) -> None:
        for rel, data, mode in files:
            write_atomic(target / rel, data, mode)

    def _materialise(self, name: str, volume: Obj) -> Path:
        target = self.root / name
        if "persistentVolumeClaim" in volume:
            return self._pvc(volume["persistentVolumeClaim"], name)
        if "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                host.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not host.exists():
                host.parent.mkdir(parents=True, exist_ok=True)
                host.touch()
            if not host.exists():
                raise VolumeNotReady(f"hostPath {host} does not exist")
            return host
        staging = self.root / f".{name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if "emptyDir" in volume:
            if target.exists():  # a restarted agent keeps emptyDir contents
                shutil.rmtree(staging)
                return target
        elif "configMap" in volume:
            self._write_all(
                staging, self._configmap_files(volume["configMap"], volume["configMap"].get("defaultMode"))
            )
            self.read_only.add(name)
        elif "secret" in volume:
            self._write_all(
                staging, self._secret_files(volume["secret"], volume["secret"].get("defaultMode"))
            )
            self.read_only.add(name)
        elif "downwardAPI" in volume:
            self._write_all(
                staging, self._downward_files(volume["downwardAPI"], volume["downwardAPI"].get("defaultMode"))
            )
            self.read_only.add(name)
        elif "projected" in volume:
            self._projected(staging, target, volume["projected"])
            self.read_only.add(name)
        else:
            shutil.rmtree(staging)
            raise VolumeNotReady(f"volume {name!r}: unsupported volume type {sorted(volume)}")
        shutil.rmtree(target, ignore_errors=True)
        staging.replace(target)
        return target

    def _projected(self, staging: Path, target: Path, projected: Obj) -> None:
        mode = projected.get("defaultMode")
        for src in projected.get("sources", []) or []:
            if "configMap" in src:
                self._write_all(staging, self._configmap_files(src["configMap"], mode))
            elif "secret" in src:
                self._write_all(staging, self._secret_files(src["secret"], mode))
            elif "downwardAPI" in src:
                self._write_all(staging, self._downward_files(src["downwardAPI"], mode))
            elif "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                token, refresh_at = self._token(sat)
                write_atomic(staging / sat["path"], token, sat.get("mode", mode) or 0o600)
                self._tokens.append((target / sat["path"], sat, sat.get("mode", mode) or 0o600, refresh_at))
            else:
                raise VolumeNotReady(f"unsupported projected source {sorted(src)}")

    def _pvc(self, ref: Obj, name: str) -> Path:
        claim = ref["claimName"]
        pvc = self.api.get_or_none(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{claim}")
        if pvc is None:
            raise VolumeNotReady(f"persistentvolumeclaim {claim!r} not found")
        if pvc.get("status", {}).get("phase") != "Bound" or not pvc["spec"].get("volumeName"):
            raise VolumeNotReady(f"persistentvolumeclaim {claim!r} is not bound yet")
        pv = self.api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
        spec = pv["spec"]
        raw = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
        if not raw:
            raise VolumeNotReady(f"persistentvolume {pv['metadata']['name']} has no hostPath/local path")
        path = Path(raw)
        path.mkdir(parents=True, exist_ok=True)
        if ref.get("readOnly"):
            self.read_only.add(name)
        return path

    def refresh(self, now: float | None = None) -> None:
        """Re-issue service-account tokens at 80% of their lifetime."""
        now = time.time() if now is None else now
        for i, (path, src, mode, refresh_at) in enumerate(self._tokens):
            if now >= refresh_at:
                token, again = self._token(src)
                write_atomic(path, token, mode)
                self._tokens[i] = (path, src, mode, again)

    def mounts_for(self, container: Obj) -> list[Obj]:
        """Bind mounts (``src``, ``dst``, ``readOnly``) for one container's ``volumeMounts``."""
        mounts = []
        for mount in container.get("volumeMounts", []) or []:
            src = self.paths.get(mount["name"])
            if src is None:
                raise VolumeNotReady(f"volume {mount['name']!r} is not defined in the pod")
            sub = mount.get("subPath") or ""
            if sub:
                src = src / sub
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            mounts.append(
                {
                    "src": str(src),
                    "dst": mount["mountPath"],
                    "readOnly": bool(mount.get("readOnly")) or mount["name"] in self.read_only,
                }
            )
        return mounts
