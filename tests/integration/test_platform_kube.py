"""The local Kubernetes control plane is real: CRDs, garbage collection, PVC binding, tokens, RBAC."""

from __future__ import annotations

import json
import subprocess
import uuid
from functools import partial
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import waiting

pytestmark = pytest.mark.integration
#: how this module waits (deadline, poll interval, which errors mean "not yet")
eventually = partial(waiting.eventually, timeout=60.0, interval=0.5, retry_on=ApiException)


def test_crd_becomes_established_and_serves_custom_objects(kube: Any, namespace: str) -> None:
    ext = client.ApiextensionsV1Api(kube.api)
    group = f"g{uuid.uuid4().hex[:8]}.test.sluice.dev"
    name = f"widgets.{group}"
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
                            },
                        }
                    },
                }
            ],
        },
    }
    model = client.V1CustomResourceDefinition.from_dict(crd)
    assert model is not None
    ext.create_custom_resource_definition(model)
    try:

        def established() -> bool:
            status = ext.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        eventually(established, what="the CRD is Established")
        custom = client.CustomObjectsApi(kube.api)
        api_version = f"{group}/v1"
        body = {"apiVersion": api_version, "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}
        eventually(
            lambda: custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", body),
            timeout=30, what="the custom resource is served",
        )
        got = cast(
            dict[str, Any], custom.get_namespaced_custom_object(group, "v1", namespace, "widgets", "w1")
        )
        assert got["spec"] == {"size": 3}
        # Structural schema pruning is real: unknown fields are dropped by the apiserver.
        body2 = {**body, "metadata": {"name": "w2"}, "spec": {"size": 1, "unknown": "x"}}
        created = cast(
            dict[str, Any], custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", body2)
        )
        assert created["spec"] == {"size": 1}
    finally:
        ext.delete_custom_resource_definition(name)


def test_garbage_collector_deletes_dependents(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube.api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"a": "1"})
    )
    assert owner.metadata is not None
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref])),
    )
    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    eventually(dependent_gone, what="the garbage collector deletes the dependent ConfigMap")


def test_pvc_binds_to_matching_pv(kube: Any, namespace: str, tmp_path: Any) -> None:
    core = client.CoreV1Api(kube.api)
    storage = client.StorageV1Api(kube.api)
    suffix = uuid.uuid4().hex[:8]
    class_name, pv_name = f"manual-{suffix}", f"pv-{suffix}"
    storage.create_storage_class(
        client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=class_name),
            provisioner="kubernetes.io/no-provisioner",
            volume_binding_mode="Immediate",
        )
    )
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv_name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                storage_class_name=class_name,
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=str(tmp_path)),
            ),
        )
    )
    try:
        core.create_namespaced_persistent_volume_claim(
            namespace,
            client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name="data"),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    storage_class_name=class_name,
                    resources=client.V1VolumeResourceRequirements(requests={"storage": "500Mi"}),
                ),
            ),
        )

        def bound() -> bool:
            status = core.read_namespaced_persistent_volume_claim("data", namespace).status
            return status is not None and status.phase == "Bound"

        eventually(bound, what="the PVC is Bound")
        claim = core.read_namespaced_persistent_volume_claim("data", namespace)
        assert claim.spec is not None and claim.spec.volume_name == pv_name
        pv = core.read_persistent_volume(pv_name)
        assert pv.spec is not None and pv.spec.claim_ref is not None
        assert pv.spec.claim_ref.name == "data" and pv.spec.claim_ref.namespace == namespace
    finally:
        core.delete_persistent_volume(pv_name)
        storage.delete_storage_class(class_name)


def test_service_account_token_authenticates_and_rbac_is_enforced(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube.api)
    rbac = client.RbacAuthorizationV1Api(kube.api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="configmap-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    request = core.create_namespaced_service_account_token(
        "reader",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    )
    assert request.status is not None
    token = request.status.token
    assert token

    config = client.Configuration()
    config.host = kube.server
    config.ssl_ca_cert = kube.api.configuration.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(config) as as_reader:
        authn = client.AuthenticationV1Api(as_reader)
        review = authn.create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status is not None and review.status.user_info is not None
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:reader"

        reader_core = client.CoreV1Api(as_reader)
        eventually(
            lambda: reader_core.list_namespaced_config_map(namespace) is not None,
            timeout=30, what="the Role grants listing ConfigMaps",
        )
        with pytest.raises(ApiException) as denied:
            reader_core.create_namespaced_config_map(
                namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope"))
            )
        assert denied.value.status == 403
        with pytest.raises(ApiException) as denied_secrets:
            reader_core.list_namespaced_secret(namespace)
        assert denied_secrets.value.status == 403


def test_kubectl_and_helm_run_from_bin_dir(kube: Any) -> None:
    env = kube.env()
    result = subprocess.run(
        [str(kube.bin_dir / "kubectl"), "version", "-o", "json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    versions = json.loads(result.stdout)
    assert versions["serverVersion"]["gitVersion"].startswith("v1.")
    assert versions["clientVersion"]["gitVersion"] == versions["serverVersion"]["gitVersion"]

    namespaces = subprocess.run(
        [str(kube.bin_dir / "kubectl"), "get", "namespaces", "-o", "name"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert "namespace/default" in namespaces.stdout.split()

    helm = subprocess.run(
        [str(kube.bin_dir / "helm"), "version", "--short"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert helm.stdout.startswith("v3.")
    releases = subprocess.run(
        [str(kube.bin_dir / "helm"), "list", "--all-namespaces", "-o", "json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert json.loads(releases.stdout) == []
