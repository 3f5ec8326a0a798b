"""A local volume provisioner: directory-backed hostPath PVs for the ``sluice-local`` class.

Creates the StorageClass (provisioner ``sluice.dev/local``, ``volumeBindingMode: Immediate``,
marked default), then polls: a pending PVC of that class gets a PV under ``<state>/pv/<pv name>``
pre-bound to it (the controller-manager's PV controller completes the binding). A released PV
with ``reclaimPolicy: Delete`` loses its directory and its object; ``Retain`` keeps both. Given
the node the directories are on (``--node``, with two nodes), every PV gets a node affinity to it,
so that a pod using one is scheduled there only.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from sluice_dev.platform.node.kubeapi import Api, ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]

CLASS_NAME = "sluice-local"
PROVISIONER = "sluice.dev/local"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_class(default: bool = True) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": CLASS_NAME,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true" if default else "false"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def wants_volume(pvc: Obj, classes: dict[str, Obj]) -> bool:
    """A pending, unbound claim whose class is provisioned by us."""
    spec = pvc.get("spec", {})
    if spec.get("volumeName") or pvc.get("status", {}).get("phase", "Pending") != "Pending":
        return False
    if pvc["metadata"].get("deletionTimestamp"):
        return False
    cls = classes.get(spec.get("storageClassName") or "")
    return cls is not None and cls.get("provisioner") == PROVISIONER


def node_affinity(node: str) -> Obj:
    """A PV's ``nodeAffinity`` to ``node`` (its hostPath directory is that node's)."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def pv_for(pvc: Obj, cls: Obj, root: Path, node: str | None = None) -> Obj:
    """The hostPath PV for ``pvc`` under ``root``; with ``node``, pinned to it (``node_affinity``)."""
    meta, spec = pvc["metadata"], pvc["spec"]
    name = f"pvc-{meta['uid']}"
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    pv: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": {PROVISIONED_BY: PROVISIONER},
            "labels": {"sluice.dev/local-volume": "true"},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy", "Delete"),
            "storageClassName": cls["metadata"]["name"],
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "hostPath": {"path": str(root / name), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    if node is not None:
        pv["spec"]["nodeAffinity"] = node_affinity(node)
    return pv


def should_delete(pv: Obj) -> bool:
    ours = (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
    released = pv.get("status", {}).get("phase") in ("Released", "Failed")
    return ours and released and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete"


class Provisioner:
    def __init__(
        self, api: Api, root: Path, interval: float = 1.0, make_default: bool = True,
        dir_mode: int | None = None, node: str | None = None,
    ) -> None:
        """``dir_mode``: what the volumes' directories are chmod'ed to (pods running as another
        user than this process need write access; a hostPath volume gets no fsGroup). ``node``:
        the node ``root`` is on, given to the volumes as their node affinity."""
        self.api, self.root, self.interval, self.make_default = api, root, interval, make_default
        self.dir_mode = dir_mode
        self.node = node
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="provisioner", daemon=True)

    def ensure_class(self) -> None:
        try:
            self.api.create("/apis/storage.k8s.io/v1/storageclasses", storage_class(self.make_default))
        except ApiError as exc:
            if exc.status != 409:
                raise

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ensure_class()
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.reconcile()
            except Exception as exc:
                log.warning("provisioner: %s", exc)

    def reconcile(self) -> None:
        classes = {
            c["metadata"]["name"]: c
            for c in self.api.get("/apis/storage.k8s.io/v1/storageclasses").get("items", [])
        }
        for pvc in self.api.get("/api/v1/persistentvolumeclaims").get("items", []):
            if wants_volume(pvc, classes):
                self.provision(pvc, classes[pvc["spec"]["storageClassName"]])
        for pv in self.api.get("/api/v1/persistentvolumes").get("items", []):
            if should_delete(pv):
                self.remove(pv)

    def provision(self, pvc: Obj, cls: Obj) -> None:
        pv = pv_for(pvc, cls, self.root, self.node)
        directory = Path(pv["spec"]["hostPath"]["path"])
        directory.mkdir(parents=True, exist_ok=True)
        if self.dir_mode is not None:
            directory.chmod(self.dir_mode)
        try:
            self.api.create("/api/v1/persistentvolumes", pv)
            log.info(
                "provisioner: created %s for %s/%s",
                pv["metadata"]["name"],
                pvc["metadata"]["namespace"],
                pvc["metadata"]["name"],
            )
        except ApiError as exc:
            if exc.status != 409:
                raise

    def remove(self, pv: Obj) -> None:
        path = Path((pv["spec"].get("hostPath") or {}).get("path", ""))
        if path.is_dir() and path.parent == self.root:
            shutil.rmtree(path, ignore_errors=True)
        self.api.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
        log.info("provisioner: deleted released %s", pv["metadata"]["name"])
