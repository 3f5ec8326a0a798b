"""Each query's driver RBAC on the real API server (RBAC authorizer, ServiceAccount admission, the
TokenRequest API): what a driver's own token may do, and what it may not.

Three queries' objects are made by the operator's builders in one namespace (ServiceAccount, Role,
RoleBinding, Leases, state claim, plan ConfigMap, metrics Service, a driver pod from the
Deployment's template; no kubelet, so the pods stay Pending): ``alpha`` and ``bravo`` without
executors, ``charlie`` with executors. A token of alpha's ServiceAccount, bound to alpha's driver
pod as a pod's own token is, drives the runtime's own client (``sluice_runtime.kubeapi``: the
election, the pod's labels) and the operator's (``sluice.operator.kube``) over real HTTP. Every
mutating call the Role should refuse carries ``dryRun=All``, so a wrong grant fails the test
without changing anything. ``docs/operator.md`` ("RBAC of a query") says what is granted and why.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice.core import election
from sluice.operator import builders
from sluice.operator.builders.context import BACKFILL_ROLE, QueryContext
from sluice.operator.kube import MERGE_PATCH, Kube, KubeError
from sluice_runtime.driver import set_pod_role
from sluice_runtime.elector import Elector
from sluice_runtime.kubeapi import KubeApi, KubeApiError, KubeConfig

from tests.support.kubetoken import ca_file
from tests.support.operator_fixtures import cluster_spec, context

pytestmark = pytest.mark.integration

H = "ab" * 32
DRY_RUN = {"dryRun": "All"}
STRATEGIC = "application/strategic-merge-patch+json"
LABEL = {"metadata": {"labels": {"x": "y"}}}
NEW_IMAGE = {"spec": {"containers": [{"name": "driver", "image": "elsewhere:1"}]}}
EXECUTORS = {"labelSelector": "spark-role=executor"}
TOKEN_REQUEST = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}


@dataclass(frozen=True)
class Query:
    ctx: QueryContext
    pod: str

    @property
    def lease(self) -> str:
        return self.ctx.lease

    @property
    def backfill_lease(self) -> str:
        return self.ctx.names.backfill

    @property
    def claim(self) -> str:
        return self.ctx.names.state_claim

    @property
    def plan(self) -> str:
        return self.ctx.names.plan_config_map(H)


def unowned(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without its owner (no StreamingQuery exists here: the garbage collector would
    remove what it owns)."""
    obj["metadata"].pop("ownerReferences", None)
    return obj


def make_query(admin: Kube, namespace: str, name: str, executors: int) -> Query:
    """A query's objects as the operator makes them, and one driver pod of its Deployment."""
    ctx = dataclasses.replace(context(name=name, cluster=cluster_spec(executors=executors)),
                              namespace=namespace)
    config_map = ctx.names.plan_config_map(H)
    objects = [builders.plan_config_map(ctx, H, "{}"), *builders.workload_objects(ctx, H, config_map),
               builders.driver_lease(dataclasses.replace(ctx, role=BACKFILL_ROLE))]
    for obj in objects:
        if obj["kind"] != "Deployment":
            admin.create(unowned(obj))
    template = builders.driver_deployment(ctx, H, config_map)["spec"]["template"]
    pod = f"{ctx.names.driver}-7d9f8-x2x4q"
    spec = {**template["spec"], "nodeSelector": {"sluice.dev/no-such-node": "true"}}
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {**template["metadata"], "name": pod, "namespace": namespace},
                  "spec": spec})
    return Query(ctx, pod)




def token_for(admin: Kube, query: Query) -> str:
    """A token of the query's ServiceAccount from the TokenRequest API, bound to its driver pod
    (what the kubelet mounts into that pod)."""
    pod = admin.get("Pod", query.ctx.namespace, query.pod)
    assert pod is not None
    review = admin.request(
        "POST", Kube.path("ServiceAccount", query.ctx.namespace, query.ctx.names.service_account, "token"),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600,
                  "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": query.pod,
                                     "uid": pod["metadata"]["uid"]}}})
    return str(review["status"]["token"])


def clients(kube: Any, tmp: Path, token: str) -> tuple[Kube, KubeApi]:
    """The operator's client and the runtime's, both authenticating with ``token`` only."""
    from kubernetes import client

    ca = ca_file(kube, tmp)
    config = client.Configuration()
    config.host = kube.server
    config.ssl_ca_cert = str(ca)
    config.api_key = {"authorization": f"Bearer {token}"}
    token_file = tmp / f"token-{abs(hash(token))}"
    token_file.write_text(token)
    return Kube(client.ApiClient(config)), KubeApi(KubeConfig(kube.server, str(token_file), str(ca)))


def status(call: Callable[[], Any]) -> int:
    """The HTTP status of ``call`` (200 when it succeeds)."""
    try:
        call()
    except (KubeError, KubeApiError) as exc:
        return exc.status
    return 200


def named(k: Kube, method: str, kind: str, namespace: str, name: str, body: Any = None,
          content_type: str = MERGE_PATCH, sub: str | None = None) -> Callable[[], Any]:
    """A dry-run request on one object."""
    return lambda: k.request(method, Kube.path(kind, namespace, name, sub), body, content_type=content_type,
                             query=DRY_RUN)


def collection(k: Kube, method: str, kind: str, namespace: str, body: Any = None,
               query: dict[str, str] | None = None) -> Callable[[], Any]:
    """A request on a collection (dry run unless it reads)."""
    extra = {} if method == "GET" else DRY_RUN
    return lambda: k.request(method, Kube.path(kind, namespace), body, query={**extra, **(query or {})})


def lease_watch(k: Kube, namespace: str, name: str | None) -> Callable[[], Any]:
    """A watch of the Leases (of one, by field selector, as the runtime watches) that ends at once."""
    query = {"watch": "1", "timeoutSeconds": "1"}
    if name:
        query["fieldSelector"] = f"metadata.name={name}"
    return lambda: k.request("GET", Kube.path("Lease", namespace), query=query)


def pod_of(q: Query, image: str = "sluice-runtime:test", claim: str | None = None) -> dict[str, Any]:
    volumes = [{"name": "state", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{q.ctx.names.base}-exec-1", "namespace": q.ctx.namespace},
            "spec": {"serviceAccountName": q.ctx.names.service_account, "volumes": volumes,
                     "nodeSelector": {"sluice.dev/no-such-node": "true"},
                     "containers": [{"name": "executor", "image": image}]}}


@pytest.fixture
def queries(kube: Any, namespace: str) -> dict[str, Query]:
    admin = Kube(kube.api)
    return {"alpha": make_query(admin, namespace, "alpha", 0),
            "bravo": make_query(admin, namespace, "bravo", 0),
            "charlie": make_query(admin, namespace, "charlie", 2)}


def test_a_driver_runs_its_election_and_labels_its_pod_with_its_own_token(
        kube: Any, namespace: str, queries: dict[str, Query], tmp_path: Path) -> None:
    admin = Kube(kube.api)
    a = queries["alpha"]
    k, api = clients(kube, tmp_path, token_for(admin, a))
    who = k.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:alpha-spark"

    # the runtime's election, as a driver runs it: the watch (by field selector), GET and PUT
    elector = Elector(api, namespace=namespace, name=a.lease, identity=f"{a.pod}/0001", address=None,
                      plan_hash=H, duration=10)
    stop = threading.Event()
    timer = threading.Timer(30, stop.set)
    timer.start()
    try:
        leadership = elector.wait_for_leadership(stop)
        assert leadership is not None, "the driver never got its own Lease"
        held = admin.get("Lease", namespace, a.lease)
        assert held is not None and held["spec"]["holderIdentity"] == f"{a.pod}/0001"
        assert held["metadata"]["annotations"][election.HOLDER_PLAN] == H
        elector.release()
    finally:
        timer.cancel()
        elector.close()
    released = admin.get("Lease", namespace, a.lease)
    assert released is not None and not released["spec"].get("holderIdentity")

    # its backfill's Lease too (a replace with backfill runs under the same ServiceAccount)
    backfill = api.get_lease(namespace, a.backfill_lease)
    assert backfill is not None
    backfill["spec"]["holderIdentity"] = f"{a.pod}/0002"
    assert api.replace_lease(backfill)["spec"]["holderIdentity"] == f"{a.pod}/0002"
    rv = str(backfill["metadata"]["resourceVersion"])
    events = api.watch_lease(namespace, a.backfill_lease, rv, timeout=5)
    assert next(events)[0] == "MODIFIED"

    # its own pod's role label and deletion cost, and a driver error, through pods/status
    set_pod_role(api, namespace, a.pod, election.ROLE_ACTIVE)
    api.patch_pod_metadata(namespace, a.pod, {}, {"sluice.dev/driver-error": "{}"})
    pod = admin.get("Pod", namespace, a.pod)
    assert pod is not None
    assert pod["metadata"]["labels"][election.ROLE_LABEL] == election.ROLE_ACTIVE
    assert pod["metadata"]["annotations"][election.DELETION_COST] == election.ACTIVE_DELETION_COST
    assert "sluice.dev/driver-error" in pod["metadata"]["annotations"]
    # ...which changes no spec: the image a status patch names is ignored
    k.patch("Pod", namespace, a.pod, {"spec": {"containers": [{"name": "driver", "image": "elsewhere:1"}]}},
            sub="status")
    after = admin.get("Pod", namespace, a.pod)
    assert after is not None
    assert after["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]


def test_a_driver_without_executors_touches_nothing_of_another_query(
        kube: Any, namespace: str, queries: dict[str, Query], tmp_path: Path) -> None:
    admin = Kube(kube.api)
    a, b = queries["alpha"], queries["bravo"]
    k, api = clients(kube, tmp_path, token_for(admin, a))
    ns = namespace
    lease = admin.get("Lease", ns, b.lease)
    assert lease is not None

    refused: dict[str, Callable[[], Any]] = {
        # the other query's Leases: no read (its holder, address, progress), no write, no take-over
        "get B's Lease": lambda: k.get("Lease", ns, b.lease),
        "get B's backfill Lease": lambda: k.get("Lease", ns, b.backfill_lease),
        "patch B's Lease": named(k, "PATCH", "Lease", ns, b.lease, {"spec": {"holderIdentity": "x"}}),
        "update B's Lease": named(k, "PUT", "Lease", ns, b.lease, lease, "application/json"),
        "delete B's Lease": named(k, "DELETE", "Lease", ns, b.lease),
        "watch B's Lease": lease_watch(k, ns, b.lease),
        "runtime GET of B's Lease": lambda: api.get_lease(ns, b.lease),
        # ...and no Lease by any other name: list and watch only with the own name's field selector
        "list Leases": collection(k, "GET", "Lease", ns),
        "watch Leases": lease_watch(k, ns, None),
        "create a Lease": collection(k, "POST", "Lease", ns, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": a.lease, "namespace": ns}}),
        "delete own Lease": named(k, "DELETE", "Lease", ns, a.lease),
        "patch own Lease": named(k, "PATCH", "Lease", ns, a.lease, {"spec": {"holderIdentity": "x"}}),
        # state claims: the kubelet mounts the own one; the driver reads, changes, deletes none
        "get B's claim": lambda: k.get("PersistentVolumeClaim", ns, b.claim),
        "patch B's claim": named(k, "PATCH", "PersistentVolumeClaim", ns, b.claim, LABEL),
        "delete B's claim": named(k, "DELETE", "PersistentVolumeClaim", ns, b.claim),
        "delete own claim": named(k, "DELETE", "PersistentVolumeClaim", ns, a.claim),
        "get own claim": lambda: k.get("PersistentVolumeClaim", ns, a.claim),
        "list claims": collection(k, "GET", "PersistentVolumeClaim", ns),
        "delete claims": collection(k, "DELETE", "PersistentVolumeClaim", ns),
        # plan ConfigMaps: the kubelet mounts the own one
        "get B's plan": lambda: k.get("ConfigMap", ns, b.plan),
        "patch B's plan": named(k, "PATCH", "ConfigMap", ns, b.plan, LABEL),
        "delete B's plan": named(k, "DELETE", "ConfigMap", ns, b.plan),
        "get own plan": lambda: k.get("ConfigMap", ns, a.plan),
        "delete own plan": named(k, "DELETE", "ConfigMap", ns, a.plan),
        "create a ConfigMap": collection(k, "POST", "ConfigMap", ns, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": b.plan, "namespace": ns}}),
        "delete ConfigMaps": collection(k, "DELETE", "ConfigMap", ns),
        # pods: no executors, so no pod at all; no spec of any pod (its own neither)
        "get B's pod": lambda: k.get("Pod", ns, b.pod),
        "patch B's pod": named(k, "PATCH", "Pod", ns, b.pod,
                               NEW_IMAGE, STRATEGIC),
        "delete B's pod": named(k, "DELETE", "Pod", ns, b.pod),
        "patch own pod": named(k, "PATCH", "Pod", ns, a.pod,
                               NEW_IMAGE, STRATEGIC),
        "get own pod": lambda: k.get("Pod", ns, a.pod),
        "create a pod": collection(k, "POST", "Pod", ns, pod_of(a)),
        "list pods": collection(k, "GET", "Pod", ns),
        "delete pods": collection(k, "DELETE", "Pod", ns),
        "delete B's metrics Service": named(k, "DELETE", "Service", ns, b.ctx.names.metrics_service),
        "delete Services": collection(k, "DELETE", "Service", ns),
        # its own RBAC and the other query's: no escalation, no token of another ServiceAccount
        "patch own Role": named(k, "PATCH", "Role", ns, a.ctx.names.role, {"rules": []}),
        "patch B's RoleBinding": named(k, "PATCH", "RoleBinding", ns, b.ctx.names.role_binding,
                                       {"subjects": []}),
        "token of B's ServiceAccount": named(k, "POST", "ServiceAccount", ns, b.ctx.names.service_account,
                                             TOKEN_REQUEST, "application/json", sub="token"),
        "list Secrets": collection(k, "GET", "Secret", ns),
        "get the Deployment": lambda: k.get("Deployment", ns, b.ctx.names.driver),
    }
    answers = {what: status(call) for what, call in refused.items()}
    assert {what: code for what, code in answers.items() if code != 403} == {}

    # its own Lease: read by name and watched by field selector, as the runtime does
    assert status(lambda: k.get("Lease", ns, a.lease)) == 200
    assert status(lease_watch(k, ns, a.lease)) == 200
    assert status(lambda: k.request("GET", Kube.path("Lease", ns), query={
        "fieldSelector": f"metadata.name={a.lease}"})) == 200

    # What stays namespace-wide (docs/operator.md): the metadata and status of any pod, through
    # pods/status. A pod's name is generated by its ReplicaSet, so the Role cannot name the
    # driver's own; the spec (image, command, volumes) of no pod can change that way.
    assert status(named(k, "PATCH", "Pod", ns, b.pod, {"metadata": {"labels": {"x": "y"}}},
                        sub="status")) == 200


def test_a_driver_with_executors_manages_pods_but_no_other_query_s_state(
        kube: Any, namespace: str, queries: dict[str, Query], tmp_path: Path) -> None:
    admin = Kube(kube.api)
    b, c = queries["bravo"], queries["charlie"]
    k, _ = clients(kube, tmp_path, token_for(admin, c))
    ns = namespace

    # what Spark's scheduler backend does in client mode
    granted: dict[str, Callable[[], Any]] = {
        "get own pod": lambda: k.get("Pod", ns, c.pod),
        "create an executor pod": collection(k, "POST", "Pod", ns, pod_of(c)),
        "list executor pods": collection(k, "GET", "Pod", ns, query=EXECUTORS),
        "watch executor pods": lambda: k.request("GET", Kube.path("Pod", ns), query={
            "watch": "1", "timeoutSeconds": "1", "labelSelector": "spark-role=executor"}),
        "label an executor pod": named(k, "PATCH", "Pod", ns, c.pod,
                                       {"metadata": {"labels": {"spark-exec-id": "1"}}}),
        "delete an executor pod": named(k, "DELETE", "Pod", ns, c.pod),
        "delete executor pods": collection(k, "DELETE", "Pod", ns, query=EXECUTORS),
        "create the executor ConfigMap": collection(k, "POST", "ConfigMap", ns, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "spark-exec-1-conf-map", "namespace": ns}}),
        "create an on-demand claim": collection(k, "POST", "PersistentVolumeClaim", ns, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "charlie-exec-1-pvc-0", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        "list claims (reuse)": collection(k, "GET", "PersistentVolumeClaim", ns),
        "get own Lease": lambda: k.get("Lease", ns, c.lease),
    }
    answers = {what: status(call) for what, call in granted.items()}
    assert {what: code for what, code in answers.items() if code != 200} == {}

    refused: dict[str, Callable[[], Any]] = {
        "get B's Lease": lambda: k.get("Lease", ns, b.lease),
        "patch B's Lease": named(k, "PATCH", "Lease", ns, b.lease, {"spec": {"holderIdentity": "x"}}),
        "delete B's Lease": named(k, "DELETE", "Lease", ns, b.lease),
        "create a Lease": collection(k, "POST", "Lease", ns, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "x", "namespace": ns}}),
        "get B's claim": lambda: k.get("PersistentVolumeClaim", ns, b.claim),
        "patch B's claim": named(k, "PATCH", "PersistentVolumeClaim", ns, b.claim, LABEL),
        "delete B's claim": named(k, "DELETE", "PersistentVolumeClaim", ns, b.claim),
        "delete own claim": named(k, "DELETE", "PersistentVolumeClaim", ns, c.claim),
        "delete claims": collection(k, "DELETE", "PersistentVolumeClaim", ns),
        "get B's plan": lambda: k.get("ConfigMap", ns, b.plan),
        "patch B's plan": named(k, "PATCH", "ConfigMap", ns, b.plan, LABEL),
        "delete B's plan": named(k, "DELETE", "ConfigMap", ns, b.plan),
        "list ConfigMaps": collection(k, "GET", "ConfigMap", ns),
        "delete ConfigMaps": collection(k, "DELETE", "ConfigMap", ns),
        "delete B's metrics Service": named(k, "DELETE", "Service", ns, b.ctx.names.metrics_service),
        "create a Service": collection(k, "POST", "Service", ns, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": ns},
            "spec": {"ports": [{"port": 80}]}}),
        "delete Services": collection(k, "DELETE", "Service", ns),
        "patch own Role": named(k, "PATCH", "Role", ns, c.ctx.names.role, {"rules": []}),
        "list Secrets": collection(k, "GET", "Secret", ns),
    }
    answers = {what: status(call) for what, call in refused.items()}
    assert {what: code for what, code in answers.items() if code != 403} == {}

    # What stays namespace-wide with executors (docs/operator.md): Spark names executor pods itself,
    # so the pod rules name none; they reach every pod of the namespace, the other query's driver
    # too, and a pod may run as any ServiceAccount of its namespace and mount any claim of it. A
    # query with executors is only as isolated as its namespace.
    assert status(lambda: k.get("Pod", ns, b.pod)) == 200
    assert status(named(k, "DELETE", "Pod", ns, b.pod)) == 200
    assert status(collection(k, "POST", "Pod", ns, pod_of(b, claim=b.claim))) == 200


def test_a_driver_role_is_granted_only_by_who_holds_its_rules(
        kube: Any, namespace: str, tmp_path: Path) -> None:
    """RBAC's escalation check, which the operator meets with the chart's rules
    (tests/integration/test_chart.py): whoever holds the driver Role's rules (names included) may
    create it, whoever lacks one of them may not."""
    admin = Kube(kube.api)
    ctx = dataclasses.replace(context(name="delta", cluster=cluster_spec(executors=1)), namespace=namespace)
    role = unowned(builders.role(ctx))
    admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": "granter", "namespace": namespace}})
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                  "metadata": {"name": "granter", "namespace": namespace},
                  "rules": [*role["rules"], {"apiGroups": ["rbac.authorization.k8s.io"],
                                             "resources": ["roles"], "verbs": ["create"]}]})
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                  "metadata": {"name": "granter", "namespace": namespace},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "granter"},
                  "subjects": [{"kind": "ServiceAccount", "name": "granter", "namespace": namespace}]})
    review = admin.request("POST", Kube.path("ServiceAccount", namespace, "granter", "token"), TOKEN_REQUEST)
    k, _ = clients(kube, tmp_path, str(review["status"]["token"]))

    assert status(lambda: k.create(role)) == 200
    lease_rule = next(r for r in role["rules"] if r["resources"] == ["leases"])
    wider = [{**lease_rule, "resourceNames": [*lease_rule["resourceNames"], "bravo-driver"]},
             {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["delete"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["update"]}]
    for n, rule in enumerate(wider):
        more = {**role, "metadata": {**role["metadata"], "name": f"wider-{n}"},
                "rules": [*role["rules"], rule]}
        assert status(lambda more=more: k.create(more)) == 403, rule
