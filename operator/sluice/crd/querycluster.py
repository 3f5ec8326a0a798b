"""The QueryCluster custom resource: shared runtime settings and capacity for StreamingQueries."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from sluice.core import podtemplate, sparkversion
from sluice.core.plan import meaning
from sluice.core.plan.model import SPARK_VERSION
from sluice.core.spec import CleanupPolicy, UpgradePolicy
from sluice.crd.base import (
    QUANTITY_PATTERN,
    CrdKind,
    CrdModel,
    ResourceAmounts,
    Resources,
    StatusModel,
)
from sluice.crd.engine import WORKLOAD_TEMPLATE, Engine, ImagePullPolicy, StandbyExecutors
from sluice.crd.kafka import KafkaSasl, KafkaSettings, KafkaTls
from sluice.crd.objectstore import ObjectStore
from sluice.crd.podtemplate import PodTemplates
from sluice.crd.registry import SchemaRegistry
from sluice.crd.streamingquery import Condition

__all__ = ["ClusterUpgradePolicy", "Engine", "KafkaSasl", "KafkaSettings", "KafkaTls", "LeaseSettings",
           "ObjectStore", "PodTemplates", "QueryCluster", "QueryClusterSpec", "QueryClusterStatus",
           "SchemaRegistry", "Storage"]

SERVICE_ID_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"


class Storage(CrdModel):
    """Where each query's checkpoint lives: a state volume (a PersistentVolumeClaim per query), or an
    object store (objectStore: no claim, the drivers spread over nodes)."""

    storage_class_name: str | None = Field(
        default=None, description="StorageClass of state volumes; absent: the cluster default."
    )
    size: str = Field(default="1Gi", pattern=QUANTITY_PATTERN, description="Size of each state volume.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"] = Field(
        default="ReadWriteOnce", description="Access mode of state volumes. ReadWriteOnce keeps all drivers "
        "of a query on the claim's node (a node loss takes them all) and refuses executors; ReadWriteMany "
        "spreads them over nodes."
    )
    object_store: ObjectStore | None = Field(
        default=None, description="Checkpoints in object storage (s3a) instead of a state volume: no claim "
        "is created and the drivers spread over nodes. Part of the engine; a query keeps the storage it "
        "started on (volume or uri).",
    )

    @property
    def mode(self) -> str:
        """``objectStore`` or the claim's access mode."""
        return "objectStore" if self.object_store is not None else self.access_mode

    @property
    def spreads(self) -> bool:
        """Whether every pod of a query can reach the checkpoint from any node."""
        return self.object_store is not None or self.access_mode == "ReadWriteMany"


class LeaseSettings(CrdModel):
    """The driver Lease of each query (standby drivers compete for it; its holder runs the query)."""

    duration_seconds: int | None = Field(
        default=None, ge=3, le=300,
        description="leaseDurationSeconds of each query's driver Lease (absent: 10; 3 to 300). A standby "
        "takes over a holder that stopped renewing this long after it last saw a renewal; a holder whose "
        "process is gone is taken over at once, whatever the duration. The holder renews every fifth "
        "of it and, with an at-least-once output, stops writing 1.5 s before it could be seen as "
        "expired. With an exactly-once output the holder writes on through an API server outage "
        "(Kafka's transactional fence guards its output), so a longer duration only delays a takeover "
        "from a node or a process that is cut off, such as a node that lost power (a shorter one costs a "
        "Lease write every fifth of it per query).",
    )


class ExactlyOnceSettings(CrdModel):
    """How the queries' exactly-once output (``sink.delivery: exactlyOnce``) is written."""

    writers: Literal["driver", "tasks"] = Field(
        default="driver",
        description="driver: one transactional producer in the active driver writes each batch "
        "(every output record passes through the driver); tasks: each task writes its partition of a "
        "batch in a transaction of its own, with a marker, so output scales with executors (see "
        "docs/runtime.md). A switch takes effect as the drivers are replaced: the first driver "
        "with task writers fences the driver's producer and skips the batches it committed.",
    )


def _default_driver() -> Resources:
    return Resources(
        requests=ResourceAmounts(cpu="500m", memory="1Gi"), limits=ResourceAmounts(memory="2Gi")
    )


def _default_executor() -> Resources:
    return Resources(
        requests=ResourceAmounts(cpu="500m", memory="1Gi"), limits=ResourceAmounts(memory="2Gi")
    )


class ClusterUpgradePolicy(UpgradePolicy):
    """The queries' default upgrade policy, and how a change of the cluster itself is rolled out."""

    max_concurrent_rollouts: int = Field(
        default=1, ge=1, le=1000,
        description="A change of this QueryCluster that reaches the queries' pods or plans (image, "
        "sparkVersion, sparkConf, resources, executors, drainSeconds, Kafka connection) is rolled out "
        "query by query, at most this many at once, each behind its health gate; a failed gate halts "
        "the rollout (status.rollout). So is a change of podTemplate.",
    )


class QueryClusterSpec(CrdModel):
    """Shared settings for the StreamingQueries that refer to this cluster."""

    service_id: str = Field(
        min_length=1, max_length=40, pattern=SERVICE_ID_PATTERN,
        description="Prefix of consumer groups, transactional ids, checkpoint paths and versioned topics.",
    )
    kafka: KafkaSettings = Field(description="The Kafka cluster that queries read and write.")
    image: str | None = Field(
        default=None, description="Runtime image; absent: sluice-runtime:<operator version>."
    )
    image_pull_policy: ImagePullPolicy = Field(
        default="IfNotPresent", description="Pull policy of the runtime image."
    )
    spark_version: str | None = Field(
        default=None, max_length=40,
        description=f"The Spark version the runtime image carries: plans are compiled for it and a change "
        f"is rolled out as an engine upgrade; absent: {SPARK_VERSION}, the Spark of the operator's "
        f"default runtime image. Set it whenever image names an image of another Spark.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="Spark settings applied to every query. Settings that change "
        "results or the state's layout (session time zone, ANSI mode, state store provider and formats, "
        "...) enter each query's plan, so a change of one is classified like a SQL edit; "
        "spark.sql.shuffle.partitions is set per query (spec.shufflePartitions).",
    )
    driver: Resources = Field(default_factory=_default_driver, description="Driver container resources.")
    executor: Resources = Field(
        default_factory=_default_executor, description="Executor container resources."
    )
    executors: int = Field(
        default=0, ge=0, le=1000,
        description="Executor pods per query; 0 runs Spark in local mode inside the driver pod.",
    )
    storage: Storage = Field(default_factory=Storage, description="Checkpoint storage: state volumes, or "
                             "an object store.")
    standby_replicas: int = Field(
        default=0, ge=0, le=3, description="Standby drivers per query waiting to take over."
    )
    standby_executors: StandbyExecutors = Field(
        default="hold", description="With executors: what a standby driver does with executor pods. "
        "hold: every standby runs executors of its own and warms up on the plan through them: the "
        "shortest takeover, for the pods' cost. release: a standby holds none; the driver that takes "
        "the Lease asks Spark for the query's executors, and a driver that stands by again gives them "
        "back (a takeover then waits for the executor pods and runs its first batch on a driver and "
        "executors that did not warm up: several times longer).",
    )
    cleanup: CleanupPolicy = Field(
        default_factory=CleanupPolicy, description="Default clean-up policy of retired plan versions."
    )
    upgrade: ClusterUpgradePolicy = Field(
        default_factory=ClusterUpgradePolicy,
        description="Default upgrade policy of queries, and how changes of this cluster roll out.",
    )
    drain_seconds: int = Field(
        default=120, ge=10, le=3600,
        description="Time a driver gets to finish its micro-batch and commit when stopped.",
    )
    lease: LeaseSettings = Field(default_factory=LeaseSettings, description="The queries' driver Lease.")
    exactly_once: ExactlyOnceSettings | None = Field(
        default=None, description="How exactly-once output is written (absent: by the driver).",
    )
    schema_registry: SchemaRegistry | None = Field(
        default=None, description="The schema registry of the queries' avro sources and sinks (needed by "
        "any query with one).",
    )
    pod_template: PodTemplates | None = Field(
        default=None, description="Pod templates of the queries' driver and executor pods: labels, "
        "annotations, nodeSelector, tolerations, affinity, topologySpreadConstraints, priorityClassName, "
        "imagePullSecrets, schedulerName, runtimeClassName. A query's spec.podTemplate is laid over them; "
        "what the operator sets itself is refused. A change is rolled out to the queries like an engine "
        "upgrade.",
    )

    @field_validator("spark_version")
    @classmethod
    def _spark_version(cls, value: str | None) -> str | None:
        if value is not None:
            sparkversion.parse(value)
        return value

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf(cls, value: dict[str, str]) -> dict[str, str]:
        problems = meaning.conf_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    def engine(self, default_image: str) -> Engine:
        """The engine this cluster gives its queries now (``default_image`` when it names none)."""
        return Engine(
            image=self.image or default_image, image_pull_policy=self.image_pull_policy,
            spark_version=self.spark_version or SPARK_VERSION, spark_conf=dict(self.spark_conf),
            driver=self.driver, executor=self.executor, executors=self.executors,
            drain_seconds=self.drain_seconds, kafka_bootstrap_servers=self.kafka.bootstrap_servers,
            kafka_tls=self.kafka.tls, kafka_sasl=self.kafka.sasl,
            kafka_client_settings=self.kafka.pinned_client_settings(), template=WORKLOAD_TEMPLATE,
            pod_template=self._pod_template(), lease_seconds=self.lease.duration_seconds,
            object_store=self.storage.object_store,
            standby_executors=None if self.standby_executors == "hold" else self.standby_executors,
        )

    def _pod_template(self) -> PodTemplates | None:
        """The pod templates without their empty parts (None when nothing is left: an empty template
        is no template, and leaves the engine's digest as it was)."""
        if self.pod_template is None:
            return None
        kept = podtemplate.compact(self.pod_template.wire())
        return PodTemplates.model_validate(kept) if kept else None

    def with_engine(self, engine: Engine) -> QueryClusterSpec:
        """This cluster as ``engine`` sees it: what reaches the pods and plans from the engine."""
        kafka = self.kafka.model_copy(update={"bootstrap_servers": engine.kafka_bootstrap_servers,
                                              "tls": engine.kafka_tls, "sasl": engine.kafka_sasl,
                                              "client_settings": engine.kafka_client_settings})
        return self.model_copy(update={
            "image": engine.image, "image_pull_policy": engine.image_pull_policy,
            "spark_version": engine.spark_version, "spark_conf": dict(engine.spark_conf),
            "driver": engine.driver, "executor": engine.executor, "executors": engine.executors,
            "drain_seconds": engine.drain_seconds, "kafka": kafka, "pod_template": engine.pod_template,
            "lease": LeaseSettings(duration_seconds=engine.lease_seconds),
            "storage": self.storage.model_copy(update={"object_store": engine.object_store}),
            "standby_executors": engine.standby_executors or "hold",
        })


class FleetFailure(StatusModel):
    query: str = Field(description="The query whose upgrade failed.")
    message: str = Field(default="", description="Why.")


class FleetRollout(StatusModel):
    """How far the change of this cluster has reached its queries (rolled out in waves)."""

    target: str = Field(description="Digest of the engine the queries are moved to.")
    image: str | None = Field(default=None, description="Its runtime image.")
    spark_version: str | None = Field(default=None, description="Its Spark version.")
    started: str | None = Field(default=None, description="When this rollout began.")
    state: Literal["Progressing", "Halted", "Complete"] = Field(description="Progressing, Halted (a query's "
                                                                "upgrade failed) or Complete.")
    total: int = Field(default=0, description="Queries of this cluster.")
    updated: list[str] = Field(default_factory=list, description="Queries on the new engine.")
    in_progress: list[str] = Field(default_factory=list, description="Queries whose upgrade runs.")
    admitted: list[str] = Field(default_factory=list, description="Queries that may roll now.")
    pending: list[str] = Field(default_factory=list, description="Queries waiting for their turn.")
    refused: list[str] = Field(default_factory=list, description="Queries whose upgrade was refused (they "
                               "stay on their engine; their status says why).")
    failure: FleetFailure | None = Field(default=None, description="The failure that halted the rollout.")
    message: str = Field(default="", description="How far it got, or why it stopped.")


class QueryClusterStatus(StatusModel):
    observed_generation: int | None = Field(
        default=None, description="The generation of the spec the operator last reconciled.")
    phase: Literal["Ready", "Degraded"] | None = Field(
        default=None, description="Ready, or Degraded (Kafka unreachable or the cluster invalid).")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready and Degraded (reason KafkaReachable, KafkaUnreachable or "
        "ClusterInvalid).")
    image: str | None = Field(default=None, description="Resolved runtime image.")
    rollout: FleetRollout | None = Field(default=None, description="The rollout of the last change that "
                                         "reached the queries.")


class QueryCluster(CrdModel, CrdKind):
    """A QueryCluster: Kafka connection, runtime image, Spark settings and capacity shared by queries."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    kind: ClassVar[str] = "QueryCluster"  # type: ignore[misc]
    plural: ClassVar[str] = "queryclusters"
    singular: ClassVar[str] = "querycluster"
    short_names: ClassVar[list[str]] = ["qc"]
    printer_columns: ClassVar[list[dict[str, Any]]] = [
        {"name": "Service", "type": "string", "jsonPath": ".spec.serviceId"},
        {"name": "Kafka", "type": "string", "jsonPath": ".spec.kafka.bootstrapServers"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    api_version: Literal["sluice.dev/v1alpha1"] = Field(default="sluice.dev/v1alpha1", alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: QueryClusterSpec
    status: QueryClusterStatus = Field(default_factory=QueryClusterStatus)
