"""ServiceAccount, Role and RoleBinding: the driver may compete for its Lease, label its own pod and
manage its executor pods, and nothing else."""

from __future__ import annotations

from typing import Any

from sluice.operator.builders.context import QueryContext

#: what Spark's Kubernetes scheduler backend needs in the namespace (executor pods, their config
#: maps, on-demand claims, and the services Spark may create for executors)
EXECUTOR_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "get", "list", "watch", "delete", "deletecollection", "patch"]},
    {"apiGroups": [""], "resources": ["services"],
     "verbs": ["create", "get", "list", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
     "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]},
]


#: driver election on the query's Lease (the runtime creates it if the operator has not yet)
LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "verbs": ["get", "list", "watch", "create", "update", "patch"]},
]


def service_account(ctx: QueryContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": ctx.metadata(ctx.names.service_account, "rbac"),
        "automountServiceAccountToken": True,
    }


def role(ctx: QueryContext) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": ctx.metadata(ctx.names.role, "rbac"),
        "rules": [dict(rule) for rule in (*EXECUTOR_RULES, *LEASE_RULES)],
    }


def role_binding(ctx: QueryContext) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": ctx.metadata(ctx.names.role_binding, "rbac"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ctx.names.role},
        "subjects": [
            {"kind": "ServiceAccount", "name": ctx.names.service_account, "namespace": ctx.namespace}
        ],
    }
