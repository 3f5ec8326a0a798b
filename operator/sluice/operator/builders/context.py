"""Everything a builder needs to know about one StreamingQuery, gathered once per reconcile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice import __version__
from sluice.core import election, podtemplate
from sluice.core.naming import QueryIdentity, QueryNames
from sluice.core.replace import PreviousVersion
from sluice.crd.base import API_VERSION, Resources
from sluice.crd.engine import Engine
from sluice.crd.objectstore import ObjectStore
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

MANAGED_BY = "sluice-operator"
DEFAULT_IMAGE_REPO = "sluice-runtime"
HTTP_PORT = 8080
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
RUN_AS_USER = 10001
BACKFILL_ROLE = "backfill"


def default_image(version: str = __version__) -> str:
    return f"{DEFAULT_IMAGE_REPO}:{version}"


@dataclass(frozen=True)
class QueryContext:
    namespace: str
    name: str
    uid: str
    spec: StreamingQuerySpec
    cluster: QueryClusterSpec
    plan_version: int = 1
    #: a version started by a replace with hand-off: the version before it (its drivers' first term
    #: starts where that one's output ends)
    previous: PreviousVersion | None = None
    #: the topic this version writes when it is not the plan's sink topic (SLUICE_OUTPUT_TOPIC)
    output_topic: str | None = None
    #: a backfill's start on its fresh checkpoint: ``earliest`` or an RFC 3339 time (SLUICE_START_FROM)
    start_from: str | None = None
    #: ``driver`` (the query's drivers) or ``backfill`` (a replace's new version running beside them)
    role: str = "driver"
    #: the engine the workload is built for (None: the cluster's own, as it is now)
    engine: Engine | None = None
    #: the driver Deployment is left as it is (only scaled): its engine was deployed with an older pod
    #: template of the operator, which reaches it through the QueryCluster's rollout only
    freeze_driver: bool = False
    #: the plans (by hash) that read or write avro, with the id of each one's avro sink schema in the
    #: registry (None: its sink writes json): their drivers get the registry and SLUICE_SINK_SCHEMA_ID
    sink_schema_ids: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    #: the same for their sink's avro key schema (``keyFormat: avro``; SLUICE_SINK_KEY_SCHEMA_ID)
    sink_key_schema_ids: Mapping[str, int | None] = dataclasses.field(default_factory=dict)

    def on_engine(self, engine: Engine, *, freeze: bool = False) -> QueryContext:
        """This context on ``engine``: the cluster's fields that reach the pods come from it."""
        return dataclasses.replace(self, cluster=self.cluster.with_engine(engine), engine=engine,
                                   freeze_driver=freeze)

    @property
    def engine_digest(self) -> str:
        """The digest of the engine the workload runs (``SLUICE_ENGINE``, label ``sluice.dev/engine``)."""
        engine = self.engine or self.cluster.engine(default_image())
        return engine.compute_digest()

    @property
    def names(self) -> QueryNames:
        return QueryNames.for_query(self.name)

    @property
    def identity(self) -> QueryIdentity:
        store = self.object_store
        return QueryIdentity(
            service_id=self.cluster.service_id, namespace=self.namespace, name=self.name,
            uid=self.uid, plan_version=self.plan_version,
            **({"checkpoint_root": store.root} if store is not None else {}),
        )

    @property
    def object_store(self) -> ObjectStore | None:
        """The object store the checkpoints live in (from the engine the workload is built for), or
        None: on the state claim."""
        return self.cluster.storage.object_store

    @property
    def uses_claim(self) -> bool:
        """Whether the query's checkpoint is on its state claim (mounted by the drivers, and by the
        executors)."""
        return self.object_store is None

    @property
    def backfill(self) -> bool:
        return self.role == BACKFILL_ROLE

    @property
    def workload_name(self) -> str:
        """The Deployment (and its Lease): ``<base>-driver``, or ``<base>-backfill``."""
        return self.names.backfill if self.backfill else self.names.driver

    @property
    def lease(self) -> str:
        return self.workload_name if self.backfill else election.lease_name(self.names.base)

    @property
    def image(self) -> str:
        return self.cluster.image or default_image()

    @property
    def executors(self) -> int:
        override = self.spec.resources.executors if self.spec.resources else None
        return self.cluster.executors if override is None else override

    @property
    def driver_resources(self) -> Resources:
        return self.cluster.driver.merged(self.spec.resources.driver if self.spec.resources else None)

    @property
    def executor_resources(self) -> Resources:
        return self.cluster.executor.merged(self.spec.resources.executor if self.spec.resources else None)

    def pod_template(self, role: str) -> dict[str, Any]:
        """The pod template of ``role`` (``driver``: also a backfill's pods; ``executor``): the
        QueryCluster's (from the engine the workload is built for), the query's laid over it."""
        cluster = self.cluster.pod_template.wire() if self.cluster.pod_template else None
        query = self.spec.pod_template.wire() if self.spec.pod_template else None
        return podtemplate.merge(cluster, query).get(role) or {}

    @property
    def standby_replicas(self) -> int:
        """Standby drivers: the query's override, else the cluster's default."""
        override = self.spec.standby_replicas
        return self.cluster.standby_replicas if override is None else override

    @property
    def driver_replicas(self) -> int:
        """Driver pods: none when suspended, else the active one plus the standbys (a backfill: one)."""
        if self.spec.suspend:
            return 0
        return 1 if self.backfill else 1 + self.standby_replicas

    @property
    def retain_state(self) -> bool:
        return self.spec.deletion_policy == "Retain"

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "StreamingQuery",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def selector(self) -> dict[str, str]:
        """The pods of this workload (the drivers, or the backfill's)."""
        return {"sluice.dev/query": self.names.base, "app.kubernetes.io/component": self.role}

    def driver_selector(self) -> dict[str, str]:
        """The query's driver pods (whatever this context's role)."""
        return {"sluice.dev/query": self.names.base, "app.kubernetes.io/component": "driver"}

    def labels(self, component: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "sluice-query",
            "app.kubernetes.io/instance": self.names.base,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": "sluice",
            "sluice.dev/query": self.names.base,
        }

    def metadata(self, name: str, component: str, *, owned: bool = True,
                 extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": {**self.labels(component), **(extra_labels or {})},
            "annotations": {"sluice.dev/query-name": self.name},
        }
        if owned:
            meta["ownerReferences"] = [self.owner_reference()]
        return meta
