"""Cluster DNS for the real node: CoreDNS (built from its Go module) as a Deployment.

The objects are the usual ``kube-dns`` set in ``kube-system``: a ServiceAccount with read access
to Services, EndpointSlices, Pods and Namespaces, a Corefile ConfigMap, a one-replica Deployment
and the ``kube-dns`` Service on ``DNS_IP``, which the kubelet hands to pods as their name server.
CoreDNS listens on an unprivileged port (the pod runs non-root, read-only, no capabilities: it
passes the ``restricted`` Pod Security Standard); the Service maps 53 to it. Names outside the
cluster go to the node's own resolvers (``forward . /etc/resolv.conf`` in a ``Default`` DNS
policy pod).
"""

from __future__ import annotations

import json
from typing import Any

from sluice_dev.platform.node import config

DNS_IP = config.DNS_IP
CLUSTER_DOMAIN = config.CLUSTER_DOMAIN
NAMESPACE = "kube-system"
NAME = "coredns"
PORT = 1053
READY_PORT = 8181
LABELS = {"k8s-app": "kube-dns"}

COREFILE = f""".:{PORT} {{
    errors
    health :8080
    ready :{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}}
"""


def manifests(image: str = config.COREDNS_IMAGE) -> list[dict[str, Any]]:
    """Every object of cluster DNS, in apply order."""
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)}
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    container = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": PORT, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": READY_PORT}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "50m", "memory": "50Mi"}, "limits": {"memory": "170Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"system:{NAME}"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"system:{NAME}"},
         "roleRef": {
             "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"system:{NAME}"
         },
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(LABELS)},
                "template": {
                    "metadata": {"labels": dict(LABELS)},
                    "spec": {
                        "serviceAccountName": NAME,
                        "dnsPolicy": "Default",
                        "priorityClassName": "system-cluster-critical",
                        "securityContext": {
                            "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": NAME}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": dict(LABELS)},
            "spec": {
                "selector": dict(LABELS),
                "clusterIP": DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "targetPort": PORT, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": PORT, "protocol": "TCP"},
                ],
            },
        },
    ]


def manifest_json(image: str = config.COREDNS_IMAGE) -> str:
    """The objects as one ``v1/List`` document for ``kubectl apply -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(image)}, indent=2)
