"""The real node's volume provisioner (pure parts)."""

from __future__ import annotations

from pathlib import Path

from sluice_dev.platform.node import provisioner

CLASSES = {
    "sluice-local": provisioner.storage_class(),
    "other": {"metadata": {"name": "other"}, "provisioner": "x"},
}


def pvc(**spec: object) -> dict:
    return {
        "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
        "spec": {
            "storageClassName": "sluice-local",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}},
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def test_storage_class_is_default_immediate_delete() -> None:
    cls = provisioner.storage_class()
    assert cls["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert (cls["provisioner"], cls["volumeBindingMode"], cls["reclaimPolicy"]) == (
        "sluice.dev/local",
        "Immediate",
        "Delete",
    )


def test_only_pending_claims_of_our_class_get_volumes() -> None:
    assert provisioner.wants_volume(pvc(), CLASSES)
    assert not provisioner.wants_volume(pvc(storageClassName="other"), CLASSES)
    assert not provisioner.wants_volume(pvc(volumeName="pv-x"), CLASSES)
    bound = pvc()
    bound["status"]["phase"] = "Bound"
    assert not provisioner.wants_volume(bound, CLASSES)


def test_pv_is_prebound_directory_with_class_reclaim_policy(tmp_path: Path) -> None:
    retain = dict(provisioner.storage_class(), reclaimPolicy="Retain")
    pv = provisioner.pv_for(pvc(), retain, tmp_path)
    assert pv["metadata"]["name"] == "pvc-u1"
    assert pv["spec"]["hostPath"]["path"] == str(tmp_path / "pvc-u1")
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "data",
        "uid": "u1",
    }
    assert pv["spec"]["capacity"] == {"storage": "2Gi"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    released = dict(pv, status={"phase": "Released"})
    assert not provisioner.should_delete(released)
    released["spec"] = dict(pv["spec"], persistentVolumeReclaimPolicy="Delete")
    assert provisioner.should_delete(released)
    assert not provisioner.should_delete(dict(released, status={"phase": "Bound"}))
