"""The driver Deployment (the active driver plus warm standbys, all competing for the query's
Lease; Kubernetes keeps them running while the operator is down) and its PDB."""

from __future__ import annotations

import json
from typing import Any

from sluice.core import election, podtemplate
from sluice.core.gate import ENGINE_LABEL
from sluice.core.naming import (
    EXECUTOR_POD_TEMPLATE_ENV,
    PLAN_FILE,
    PLAN_MOUNT,
    STANDBY_EXECUTORS_ENV,
    STATE_MOUNT,
)
from sluice.core.replace import OUTPUT_TOPIC_ENV, PREVIOUS_VERSION_ENV, START_FROM_ENV
from sluice.crd.base import SecretKeyRef
from sluice.crd.objectstore import ACCESS_KEY, SECRET_KEY
from sluice.operator.builders import memory
from sluice.operator.builders.context import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    HTTP_PORT,
    MANAGED_BY,
    RUN_AS_USER,
    QueryContext,
)

TMP_MOUNT = "/tmp"
SPARK_LOCAL_MOUNT = "/var/lib/sluice/spark-local"
#: time on top of the drain budget for the JVM to exit after the last commit
EXIT_MARGIN_SECONDS = 30
EXECUTOR_STATE_VOLUME = "spark.kubernetes.executor.volumes.persistentVolumeClaim.state"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
#: the engine digest a driver runs on (the runtime echoes it in its Lease records)
ENGINE_ENV = "SLUICE_ENGINE"
#: Spark's setting of an environment variable of the executor pods from a Secret key (``<secret>:<key>``)
EXECUTOR_SECRET_KEY_REF = "spark.kubernetes.executor.secretKeyRef"
#: the variables the AWS SDK (S3A's default credentials chain) reads an access key pair from
AWS_CREDENTIALS_ENV = (("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY))
#: how long a driver pod stays bound to a node that is not ready or unreachable before it is evicted
#: (Kubernetes' default is 300 s): a query without a standby elsewhere comes back in under a minute
NODE_LOSS_TOLERATION_SECONDS = 10
NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def lease_seconds(ctx: QueryContext) -> int:
    """leaseDurationSeconds of the query's driver Lease (the runtime's SLUICE_LEASE_SECONDS)."""
    return ctx.cluster.lease.duration_seconds or election.DEFAULT_LEASE_SECONDS


def spark_conf(ctx: QueryContext) -> dict[str, str]:
    """Spark settings for the driver: cluster defaults, then what the operator must control."""
    conf = dict(ctx.cluster.spark_conf)
    conf["spark.local.dir"] = SPARK_LOCAL_MOUNT
    conf["spark.app.name"] = ctx.identity.query_id
    if ctx.executors > 0:
        res = ctx.executor_resources
        conf.update({
            "spark.executor.instances": str(ctx.executors),
            "spark.kubernetes.namespace": ctx.namespace,
            "spark.kubernetes.container.image": ctx.image,
            "spark.kubernetes.container.image.pullPolicy": ctx.cluster.image_pull_policy,
            # client mode inside the driver pod: Spark talks to the API server with the pod's
            # service account; executor pods are owned by the driver pod (garbage-collected with it)
            "spark.kubernetes.driver.pod.name": "$(POD_NAME)",
            # executor pods named after their driver pod (``<driver pod>-exec-<n>``): every driver
            # of the query counts its executors from 1, and a driver that takes over while its
            # predecessor's pod (and its finished executor pods) remains must not collide with them
            "spark.kubernetes.executor.podNamePrefix": "$(POD_NAME)",
            "spark.kubernetes.executor.label.sluice.dev/query": ctx.names.base,
            "spark.kubernetes.executor.label.app.kubernetes.io/component": "executor",
            "spark.kubernetes.executor.label.app.kubernetes.io/managed-by": MANAGED_BY,
            # executors connect back to the pod IP (expanded by the kubelet): it needs no DNS, and
            # the executors live exactly as long as this pod
            "spark.driver.host": "$(POD_IP)",
            "spark.driver.bindAddress": "$(POD_IP)",
            "spark.driver.port": str(DRIVER_PORT),
            "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        })
        store = ctx.object_store
        if store is None:
            # state store files are written by the executors: they mount the state claim at the
            # driver's path, so the checkpoint stays one directory (the claim's access mode must
            # let executor pods mount it: ReadWriteMany across nodes)
            conf.update({
                f"{EXECUTOR_STATE_VOLUME}.options.claimName": ctx.names.state_claim,
                f"{EXECUTOR_STATE_VOLUME}.mount.path": STATE_MOUNT,
                f"{EXECUTOR_STATE_VOLUME}.mount.readOnly": "false",
            })
        elif store.credentials_secret is not None:
            # the executors write state store files to the object store too: the same key pair
            for var, key in AWS_CREDENTIALS_ENV:
                conf[f"{EXECUTOR_SECRET_KEY_REF}.{var}"] = f"{store.credentials_secret}:{key}"
        else:
            # workload identity: the executors run as the query's ServiceAccount (Spark's default is
            # the namespace's ``default``), whose token they do not mount (executor_pod_template)
            conf["spark.kubernetes.authenticate.executor.serviceAccountName"] = ctx.names.service_account
        if res.requests and res.requests.cpu:
            conf["spark.kubernetes.executor.request.cores"] = res.requests.cpu
        if res.limits and res.limits.cpu:
            conf["spark.kubernetes.executor.limit.cores"] = res.limits.cpu
        # heap + overhead (what Spark asks each executor pod for) = the executor container
        conf.update(memory.executor_conf(ctx))
    return dict(sorted(conf.items()))


def master(ctx: QueryContext) -> str:
    """Local mode in the driver pod, or Spark's Kubernetes scheduler against the API server the
    pod runs under (the kubelet expands the in-cluster service variables)."""
    if ctx.executors == 0:
        return "local[*]"
    return "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"


def pod_security_context() -> dict[str, Any]:
    """The pod-level securityContext of every pod the query runs (the ``restricted`` standard)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


#: the container-level part of the ``restricted`` standard
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def executor_pod_template(ctx: QueryContext | None = None) -> dict[str, Any]:
    """What Spark's executor pods start from (``spark.kubernetes.executor.podTemplateFile``):
    the pods' user and the ``restricted`` securityContext, which Spark has no setting for. The
    root file system stays writable: Spark's executors write outside their local dirs. Executors
    running as the query's ServiceAccount (an object store reached by workload identity) do not
    mount its API token: they never call the API server."""
    spec: dict[str, Any] = {
        "securityContext": pod_security_context(),
        "containers": [{"name": "executor", "securityContext": dict(CONTAINER_SECURITY_CONTEXT)}],
    }
    store = ctx.object_store if ctx is not None else None
    if store is not None and store.credentials_secret is None:
        spec["automountServiceAccountToken"] = False
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec}


def _secret_env(name: str, ref: Any) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def object_store_env(ctx: QueryContext) -> list[dict[str, Any]]:
    """The object store's settings for the runtime, which derives Spark's s3a settings from them
    (none for a checkpoint on the state claim). Keys only as Secret references."""
    store = ctx.object_store
    if store is None:
        return []
    env: list[dict[str, Any]] = []
    if store.endpoint:
        env.append({"name": "SLUICE_S3_ENDPOINT", "value": store.endpoint})
    env.append({"name": "SLUICE_S3_PATH_STYLE", "value": "true" if store.path_style_access else "false"})
    if store.region:
        env.append({"name": "SLUICE_S3_REGION", "value": store.region})
    if store.credentials_secret is not None:
        env += [_secret_env(var, SecretKeyRef(name=store.credentials_secret, key=key))
                for var, key in AWS_CREDENTIALS_ENV]
    return env


def registry_env(ctx: QueryContext, plan_hash: str | None) -> list[dict[str, Any]]:
    """The schema registry of a plan that reads or writes avro (the runtime's contract): its URL, the
    basic-auth credentials and CA certificate from their Secrets, and the ids the operator got
    registering the plan's avro sink schema and avro sink key schema. Nothing for any other plan (its
    pods stay as they were)."""
    settings = ctx.cluster.schema_registry
    if plan_hash is None or plan_hash not in ctx.sink_schema_ids or settings is None:
        return []
    env: list[dict[str, Any]] = [{"name": "SLUICE_SCHEMA_REGISTRY_URL", "value": settings.url}]
    for var, ref in (("SLUICE_SCHEMA_REGISTRY_USERNAME", settings.username_ref()),
                     ("SLUICE_SCHEMA_REGISTRY_PASSWORD", settings.password_ref()),
                     ("SLUICE_SCHEMA_REGISTRY_CA", settings.ca_ref())):
        if ref is not None:
            env.append(_secret_env(var, ref))
    schema_id = ctx.sink_schema_ids[plan_hash]
    if schema_id is not None:
        env.append({"name": "SLUICE_SINK_SCHEMA_ID", "value": str(schema_id)})
    key_schema_id = ctx.sink_key_schema_ids.get(plan_hash)
    if key_schema_id is not None:
        env.append({"name": "SLUICE_SINK_KEY_SCHEMA_ID", "value": str(key_schema_id)})
    return env


def driver_env(ctx: QueryContext, plan_hash: str | None = None) -> list[dict[str, Any]]:
    """The driver container's environment (``plan_hash``: the plan it runs, for what depends on it)."""
    ident = ctx.identity
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # Spark binds and advertises the pod IP, never whatever interface the hostname maps to
        {"name": "SPARK_LOCAL_IP", "value": "$(POD_IP)"},
        {"name": "SLUICE_PLAN", "value": f"{PLAN_MOUNT}/{PLAN_FILE}"},
        {"name": "SLUICE_CHECKPOINT", "value": ident.checkpoint_path},
        {"name": "SLUICE_BOOTSTRAP", "value": ctx.cluster.kafka.bootstrap_servers},
        {"name": "SLUICE_MASTER", "value": master(ctx)},
        {"name": "SLUICE_SPARK_CONF", "value": json.dumps(spark_conf(ctx), sort_keys=True)},
        {"name": "SLUICE_HTTP_ADDR", "value": f"$(POD_IP):{HTTP_PORT}"},
        {"name": "SLUICE_QUERY_ID", "value": ident.query_id},
        {"name": "SLUICE_CONSUMER_GROUP", "value": ident.consumer_group},
        {"name": "SLUICE_TRANSACTIONAL_ID", "value": ident.transactional_id},
        {"name": "HOME", "value": TMP_MOUNT},
        # driver election: every driver pod competes for this Lease; the holder runs the query
        {"name": "SLUICE_LEASE_NAME", "value": ctx.lease},
        {"name": "SLUICE_LEASE_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "SLUICE_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SLUICE_LEASE_SECONDS", "value": str(lease_seconds(ctx))},
        # what the driver reports it runs on (the health gate of an engine upgrade waits for it)
        {"name": ENGINE_ENV, "value": ctx.engine_digest},
        *memory.memory_env(ctx),  # the runtime derives the driver's heap from it (core.sizing)
    ]
    if ctx.executors > 0:  # executor pods pass the namespace's Pod Security Standard too
        executor_pod = podtemplate.apply(executor_pod_template(ctx), ctx.pod_template("executor"))
        template = json.dumps(executor_pod, sort_keys=True)
        env.append({"name": EXECUTOR_POD_TEMPLATE_ENV, "value": template})
    if ctx.previous is not None:  # a replaced version: its first term starts where this one ended
        env.append({"name": PREVIOUS_VERSION_ENV, "value": ctx.previous.to_json()})
    if ctx.output_topic is not None:  # a version on a topic of its own (a backfill's)
        env.append({"name": OUTPUT_TOPIC_ENV, "value": ctx.output_topic})
    if ctx.start_from is not None:  # a backfill's fresh checkpoint starts there
        env.append({"name": START_FROM_ENV, "value": ctx.start_from})
    if ctx.executors > 0 and ctx.cluster.standby_executors != "hold":
        # absent by default (the runtime's default is hold): the pods stay as they were
        env.append({"name": STANDBY_EXECUTORS_ENV, "value": ctx.cluster.standby_executors})
    writers = ctx.cluster.exactly_once.writers if ctx.cluster.exactly_once is not None else "driver"
    if writers != "driver":  # absent by default: the pods of a cluster without it stay as they were
        env.append({"name": "SLUICE_EOS_WRITERS", "value": writers})
    env += object_store_env(ctx)
    env += registry_env(ctx, plan_hash)
    kafka = ctx.cluster.kafka
    if kafka.sasl is not None:
        env.append({"name": "SLUICE_KAFKA_SASL_MECHANISM", "value": kafka.sasl.mechanism})
        for var, ref in (("SLUICE_KAFKA_SASL_USERNAME", kafka.sasl.username_secret),
                         ("SLUICE_KAFKA_SASL_PASSWORD", kafka.sasl.password_secret),
                         ("SLUICE_KAFKA_SASL_OAUTH_TOKEN", kafka.sasl.token_secret)):
            if ref is not None:
                env.append(_secret_env(var, ref))
        if kafka.sasl.token_file is not None:
            env.append({"name": "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE", "value": kafka.sasl.token_file})
    if kafka.tls is not None:
        env.append({"name": "SLUICE_KAFKA_TLS", "value": "true"})
        for var, ref in (("SLUICE_KAFKA_TLS_CA", kafka.tls.ca_secret),
                         ("SLUICE_KAFKA_TLS_CERT", kafka.tls.cert_secret),
                         ("SLUICE_KAFKA_TLS_KEY", kafka.tls.key_secret)):
            if ref is not None:
                env.append(_secret_env(var, ref))
    client = kafka.client()
    if not client.is_empty():  # absent when empty: the pods of a cluster without settings stay as they were
        env.append({"name": "SLUICE_KAFKA_CLIENT_SETTINGS", "value": client.to_json()})
    return env


def termination_grace_seconds(ctx: QueryContext) -> int:
    return ctx.cluster.drain_seconds + EXIT_MARGIN_SECONDS


def update_strategy(ctx: QueryContext) -> dict[str, Any]:
    """Surge: the replacement driver starts first and warms up, then the old one hands off on
    SIGTERM. A ReadWriteOncePod claim admits one pod only, so there the old pod must go first."""
    if ctx.uses_claim and ctx.cluster.storage.access_mode == "ReadWriteOncePod":
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def spreads(ctx: QueryContext) -> bool:
    """Whether the query's drivers may run on different nodes: its checkpoint is in an object store or
    on a ReadWriteMany claim, which every node reaches."""
    return ctx.cluster.storage.spreads


def affinity(ctx: QueryContext) -> dict[str, Any]:
    """Where the drivers go. Checkpoint in an object store or on a ReadWriteMany claim: spread over
    nodes, preferred (soft) anti-affinity, so that a standby survives the active driver's node; soft
    because a required one would leave the surge pod of every rollout Pending where there are no
    more nodes than drivers (``maxUnavailable: 0``). On a ReadWriteOnce(Pod) claim: all on the
    claim's node (required affinity), where a node loss takes every driver."""
    term = {"topologyKey": HOSTNAME_TOPOLOGY, "labelSelector": {"matchLabels": ctx.driver_selector()}}
    if spreads(ctx):
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def tolerations() -> list[dict[str, Any]]:
    """Driver pods leave a node that is not ready or unreachable after
    :data:`NODE_LOSS_TOLERATION_SECONDS` instead of Kubernetes' 300 s (its DefaultTolerationSeconds
    adds none when these are there). A template's toleration of the same taint replaces the
    operator's (``sluice.core.podtemplate.apply``)."""
    return [{"key": key, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": NODE_LOSS_TOLERATION_SECONDS} for key in NODE_LOSS_TAINTS]


def driver_deployment(ctx: QueryContext, plan_hash: str, config_map: str) -> dict[str, Any]:
    """The driver workload running ``sluice-runtime run`` on the plan in ``config_map``.

    ``1 + standbys`` pods (0 when suspended). The runtime labels its own pod with its role
    (``sluice.dev/role``) and deletion cost; neither is in the template, so role changes never
    roll the Deployment.
    """
    labels = ctx.labels(ctx.role)
    pod_annotations = {
        "sluice.dev/plan-hash": plan_hash,
        "sluice.dev/restart-nonce": ctx.spec.restart_nonce or "",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HTTP_PORT),
    }
    container = {
        "name": "driver",
        "image": ctx.image,
        "imagePullPolicy": ctx.cluster.image_pull_policy,
        "command": ["sluice-runtime", "run"],
        "env": driver_env(ctx, plan_hash),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "driver-rpc", "containerPort": DRIVER_PORT, "protocol": "TCP"},
            {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT, "protocol": "TCP"},
        ],
        "resources": ctx.driver_resources.as_k8s(),
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 5, "failureThreshold": 60, "timeoutSeconds": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 3,
        },
        "securityContext": {**CONTAINER_SECURITY_CONTEXT, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "plan", "mountPath": PLAN_MOUNT, "readOnly": True},
            *([{"name": "state", "mountPath": STATE_MOUNT}] if ctx.uses_claim else []),
            {"name": "tmp", "mountPath": TMP_MOUNT},
            # Spark's local dirs; with an object store also RocksDB's working copy of the state
            {"name": "spark-local", "mountPath": SPARK_LOCAL_MOUNT},
        ],
    }
    pod_spec = {
        "serviceAccountName": ctx.names.service_account,
        # the runtime's Lease client (and Spark's scheduler with executors) needs the token
        "automountServiceAccountToken": True,
        "affinity": affinity(ctx),
        "tolerations": tolerations(),
        "terminationGracePeriodSeconds": termination_grace_seconds(ctx),
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [
            {"name": "plan", "configMap": {"name": config_map}},
            *([{"name": "state", "persistentVolumeClaim": {"claimName": ctx.names.state_claim}}]
              if ctx.uses_claim else []),
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "spark-local", "emptyDir": {"sizeLimit": "10Gi"}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": ctx.metadata(ctx.workload_name, ctx.role,
                                 extra_labels={"sluice.dev/plan-hash": plan_hash[:12]}),
        "spec": {
            "replicas": ctx.driver_replicas,
            "strategy": update_strategy(ctx),
            "minReadySeconds": 0,
            "revisionHistoryLimit": 2,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": ctx.selector()},
            "template": podtemplate.apply({
                "metadata": {
                    "labels": {**labels, "sluice.dev/plan-hash": plan_hash[:12],
                               ENGINE_LABEL: ctx.engine_digest[:12]},
                    "annotations": pod_annotations,
                },
                "spec": pod_spec,
            }, ctx.pod_template("driver")),
        },
    }


def disruption_budget(ctx: QueryContext) -> dict[str, Any]:
    """At most one driver pod (active or standby) voluntarily disrupted at a time.

    The driver drains on SIGTERM and resumes from its checkpoint, so node drains are allowed;
    unhealthy pods may always be evicted so a broken pod never blocks a drain.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": ctx.metadata(ctx.names.pdb, "driver"),
        "spec": {
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": ctx.selector()},
        },
    }


def driver_lease(ctx: QueryContext) -> dict[str, Any]:
    """No holder: the first warm driver takes it. Owned by the query (garbage-collected with it).

    Create-only: the drivers write its spec and the holder's annotations, so the operator never
    replaces it (``kube.MUTABLE_KINDS`` leaves it out).
    """
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": ctx.metadata(ctx.lease, ctx.role),
        "spec": {"leaseDurationSeconds": lease_seconds(ctx)},
    }
