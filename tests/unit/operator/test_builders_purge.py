"""The purge pod of a deleted query whose checkpoints are in an object store: what it deletes, as
whom, with which settings, and that it passes the ``restricted`` Pod Security Standard."""

from __future__ import annotations

from typing import Any

from sluice.operator.builders.purge import PURGE_DEADLINE_SECONDS, purge_pod, purge_prefix

from tests.support.operator_fixtures import cluster_spec, context, query_spec

STORE = {"uri": "s3a://checkpoints/sluice/", "endpoint": "http://s3proxy.storage:8080",
         "pathStyleAccess": True, "credentialsSecret": "s3-credentials"}


def store_ctx(store: dict[str, Any] | None = None, **spec: Any) -> Any:
    return context(spec=query_spec(deletionPolicy="Delete", **spec),
                   cluster=cluster_spec(storage={"objectStore": store or STORE}))


def test_the_prefix_holds_every_plan_version_and_nothing_of_other_queries() -> None:
    ctx = store_ctx()
    assert ctx.identity.checkpoint_path == "s3a://checkpoints/sluice/shop/shop/totals/v1"
    assert purge_prefix(ctx) == "s3a://checkpoints/sluice/shop/shop/totals"
    later = context(spec=ctx.spec.model_dump(by_alias=True), cluster=ctx.cluster.model_dump(by_alias=True),
                    plan_version=7)
    assert purge_prefix(later) == purge_prefix(ctx)


def test_the_pod_runs_purge_as_the_querys_service_account_with_the_drivers_store_settings() -> None:
    pod = purge_pod(store_ctx())
    assert pod["metadata"]["name"] == "totals-purge"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "StreamingQuery"
    assert pod["metadata"]["labels"]["sluice.dev/query"] == "totals"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "totals-spark"
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == PURGE_DEADLINE_SECONDS
    [container] = spec["containers"]
    assert container["command"] == ["sluice-runtime", "purge", "--prefix", "s3a://checkpoints/sluice/shop/shop/totals"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["SLUICE_S3_ENDPOINT"] == "http://s3proxy.storage:8080"
    assert env["SLUICE_S3_PATH_STYLE"] == "true"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-credentials", "key": "accessKey"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-credentials", "key": "secretKey"}}
    # the restricted standard: non-root, no escalation, no capabilities, seccomp, read-only root
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"]


def test_workload_identity_needs_no_secret() -> None:
    pod = purge_pod(store_ctx({"uri": "s3a://checkpoints", "serviceAccountAnnotations": {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/sluice"}}))
    names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert not names & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert pod["spec"]["serviceAccountName"] == "totals-spark"  # the identity is bound to it


def test_the_drivers_pod_template_places_and_pulls_it() -> None:
    template = {"driver": {
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"nodeSelector": {"pool": "streaming"}, "imagePullSecrets": [{"name": "registry"}],
                 "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}}}
    pod = purge_pod(store_ctx(podTemplate=template))
    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["labels"]["sluice.dev/query"] == "totals"
    assert pod["spec"]["nodeSelector"] == {"pool": "streaming"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
