"""The purge pod: deletes a deleted query's checkpoints from its object store.

Under ``deletionPolicy: Delete`` the state claim goes with the query; with checkpoints in an
object store there is no claim, and the operator has no access to the bucket (nor should it: on a
cloud the bucket is reached by the workload identity bound to the query's ServiceAccount). So, once
the drivers stopped, the operator runs ``sluice-runtime purge`` in a pod of its own, under the
query's ServiceAccount, with the drivers' object-store settings and credentials, on the prefix
that holds every plan version's checkpoint (:func:`purge_prefix`); the pod's termination message
carries its one-line JSON summary.
"""

from __future__ import annotations

import posixpath
from typing import Any

from sluice.core import podtemplate
from sluice.operator.builders.context import QueryContext
from sluice.operator.builders.driver import (
    CONTAINER_SECURITY_CONTEXT,
    TMP_MOUNT,
    object_store_env,
    pod_security_context,
)

#: a purge that has not ended by then is stopped by the kubelet (and counted as failed)
PURGE_DEADLINE_SECONDS = 600
#: Spark refuses a driver heap under 450 MiB; the purge JVM runs with 512 MiB
PURGE_MEMORY = "900Mi"


def purge_pod_name(ctx: QueryContext) -> str:
    return f"{ctx.names.base}-purge"


def purge_prefix(ctx: QueryContext) -> str:
    """``<root>/<service>/<namespace>/<query>``: the parent of every plan version's checkpoint."""
    return posixpath.dirname(ctx.identity.checkpoint_path)


def purge_pod(ctx: QueryContext) -> dict[str, Any]:
    """The pod running ``sluice-runtime purge --prefix <purge_prefix>``; placed and pulled like the
    drivers (their pod template: node pool, tolerations, image pull secrets)."""
    container = {
        "name": "purge",
        "image": ctx.image,
        "imagePullPolicy": ctx.cluster.image_pull_policy,
        "command": ["sluice-runtime", "purge", "--prefix", purge_prefix(ctx)],
        "env": [{"name": "HOME", "value": TMP_MOUNT}, *object_store_env(ctx)],
        "resources": {"requests": {"cpu": "100m", "memory": PURGE_MEMORY},
                      "limits": {"memory": PURGE_MEMORY}},
        "securityContext": {**CONTAINER_SECURITY_CONTEXT, "readOnlyRootFilesystem": True},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "tmp", "mountPath": TMP_MOUNT}],
    }
    spec = {
        "serviceAccountName": ctx.names.service_account,
        # it never calls the API server (a workload identity's own token is projected apart)
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": PURGE_DEADLINE_SECONDS,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    template = podtemplate.apply({"metadata": {}, "spec": spec}, ctx.pod_template("driver"))
    metadata = ctx.metadata(purge_pod_name(ctx), "purge")
    # the template's labels and annotations beside the operator's, which win
    metadata["labels"] = {**(template["metadata"].get("labels") or {}), **metadata["labels"]}
    metadata["annotations"] = {**(template["metadata"].get("annotations") or {}), **metadata["annotations"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
