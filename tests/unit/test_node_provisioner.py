"""Node agent: local provisioner and node object builders (pure parts)."""

from __future__ import annotations

from pathlib import Path

from sluice_dev.nodeagent import node, provisioner

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


def test_node_object_reports_capacity_ready_and_loopback_address() -> None:
    obj = node.node_object("n1", {"cpu": "32", "memory": "64Gi", "pods": "110"}, 12345, 0.0)
    status = obj["status"]
    assert status["capacity"] == status["allocatable"] == {"cpu": "32", "memory": "64Gi", "pods": "110"}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert obj["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert status["nodeInfo"]["operatingSystem"] == "linux"
