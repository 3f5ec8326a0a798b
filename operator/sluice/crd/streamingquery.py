"""The StreamingQuery custom resource: one pydantic model is the source of the CRD schema."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from sluice.core import records
from sluice.core.formats.registry import SourceSchemaStatus
from sluice.core.records import OutputStatus, PinnedPlan, UpgradeRecord, VersionRecord
from sluice.core.spec import CleanupPolicy, QuerySpec, Sink, Trigger, UpgradePolicy
from sluice.crd.base import CrdKind, CrdModel, Resources, StatusModel
from sluice.crd.engine import Engine
from sluice.crd.podtemplate import PodTemplates

Phase = Literal[
    "Pending", "Starting", "Running", "Upgrading", "UpgradePending", "Suspended", "Degraded", "Deleting"
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]


class ClusterRef(CrdModel):
    name: str = Field(
        min_length=1, max_length=253, description="Name of a QueryCluster in the same namespace."
    )


class QueryResources(CrdModel):
    """Per-query overrides of the QueryCluster's pod resources."""

    driver: Resources | None = Field(default=None, description="Driver container resources.")
    executor: Resources | None = Field(default=None, description="Executor container resources.")
    executors: int | None = Field(
        default=None, ge=0, le=1000,
        description="Number of executor pods; 0 runs Spark in local mode inside the driver pod.",
    )


class StreamingQuerySpec(QuerySpec):
    """A streaming SQL query: Kafka sources, one SELECT, a Kafka sink, and how to run and evolve it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    sql: str = Field(min_length=1, description="One Spark SQL SELECT statement over the sources.")
    sink: Sink = Field(description="The Kafka topic the query writes.")
    trigger: Trigger = Field(default_factory=Trigger, description="When micro-batches run.")
    cluster_ref: ClusterRef | None = Field(
        default=None,
        description="QueryCluster that runs this query; absent: the QueryCluster named 'default' "
        "in the same namespace.",
    )
    upgrade: UpgradePolicy | None = Field(
        default=None, description="What the operator may do on edits; absent: the cluster's defaults."
    )
    cleanup: CleanupPolicy | None = Field(
        default=None, description="What is removed of retired plan versions; absent: the cluster's defaults."
    )
    deletion_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="On delete: Retain keeps the state volume and the output topic; Delete removes both.",
    )
    suspend: bool = Field(
        default=False, description="true: drain and stop the driver, keeping state; false: run."
    )
    restart_nonce: str | None = Field(
        default=None, max_length=63,
        description="Change to any new value to restart the driver (same plan, same checkpoint).",
    )
    resources: QueryResources | None = Field(
        default=None, description="Per-query overrides of the cluster's resources."
    )
    standby_replicas: int | None = Field(
        default=None, ge=0, le=3,
        description="Warm standby drivers waiting on the query's Lease to take over (0 to 3); absent: "
        "the QueryCluster's standbyReplicas.",
    )
    pod_template: PodTemplates | None = Field(
        default=None, description="Pod templates of this query's driver and executor pods, laid over the "
        "QueryCluster's podTemplate (labels, annotations and nodeSelector merged key by key, other fields "
        "replaced); what the operator sets itself is refused.",
    )

    def query(self) -> QuerySpec:
        """The query part alone (what the compiler reads)."""
        return QuerySpec.model_validate(
            self.model_dump(by_alias=True, include=set(QuerySpec.model_fields))
        )


class Condition(StatusModel):
    """One condition of the object (Kubernetes conventions)."""

    type: str = Field(description="Ready, Progressing, Degraded or ReplanAvailable.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The generation of the spec the condition was set for.")


class EngineStatus(Engine):
    """The engine the drivers run on (the last stable one, the one a rollback returns to)."""

    digest: str = Field(default="", description="sha256 of the engine snapshot.")
    #: written by the operator from a valid QueryCluster and read back through ``Engine``: kept as
    #: written (the spec's schema is not repeated in the status, twice, which would double the CRD)
    pod_template: dict[str, Any] | None = Field(  # type: ignore[assignment]
        default=None, description="The QueryCluster's pod templates of the driver and executor pods (as in "
        "its spec.podTemplate).")
    waiting: str | None = Field(
        default=None, description="Why the QueryCluster's newer engine is not applied yet (its rollout "
        "admits queries in waves).")


class Rollout(records.Rollout):
    """An upgrade in flight, written before each step is acted on (a write-ahead log)."""

    target_engine: EngineStatus | None = Field(  # type: ignore[assignment]
        default=None, description="The engine the rollout puts the drivers on, when it changes it.")


class CompileErrorStatus(StatusModel):
    """Why the spec does not compile."""

    message: str = Field(description="The problems, each as 'spec.sql: line L, column C: message' when in "
                         "the SQL.")
    field: str | None = Field(default=None,
                              description="The spec field of the first problem (e.g. spec.sql).")
    line: int | None = Field(default=None,
                             description="Line of the first problem within spec.sql (1-based).")
    column: int | None = Field(default=None, description="Column of the first problem within its line "
                               "(1-based).")


class QueryIdentity(StatusModel):
    """The ids of the running plan version, derived from serviceId, namespace, name and plan version."""

    service_id: str | None = Field(default=None, description="QueryCluster serviceId pinned at creation.")
    query_id: str = Field(description="Id of this incarnation of the query (carries the object's uid; "
                          "SLUICE_QUERY_ID).")
    consumer_group: str = Field(description="Kafka consumer group of the running version.")
    transactional_id: str = Field(description="Kafka transactional id of the running version.")
    checkpoint_path: str = Field(
        description="Checkpoint directory of the running version on the state volume.")


class Failover(StatusModel):
    """The last change of active driver, as the driver that took over recorded it."""

    time: str = Field(description="When the new driver acquired the Lease (RFC 3339).")
    from_: str = Field(alias="from", description="Pod of the driver that was active before.")
    to: str = Field(description="Pod of the driver that took over.")
    reason: Literal["FailedOver", "HandedOff"] = Field(
        description="FailedOver: the old driver died or went silent; HandedOff: it let go on request "
        "or on stop."
    )
    gap_seconds: float | None = Field(
        default=None,
        description="Last commit of the old driver to first commit of the new one, as measured by the "
        "new driver.",
    )


class DriversStatus(StatusModel):
    """The driver pods of the query and which one runs it (holds the query's Lease)."""

    active: str | None = Field(default=None, description="Pod of the driver holding the Lease.")
    standbys: list[str] = Field(default_factory=list, description="Pods of the drivers waiting, warm.")
    last_failover: Failover | None = Field(default=None, description="The last change of active driver.")
    versions: dict[str, str] | None = Field(
        default=None, description="What the active driver runs on, as it reports it: Spark, the connectors, "
        "the runtime.")


class CleanupStatus(StatusModel):
    """Where the clean-up of retired plan versions stands."""

    next_due: str | None = Field(default=None, description="When the next retired version may be cleaned up.")
    message: str | None = Field(default=None, description="What the clean-up waits for.")
    checkpoints_removed: str | None = Field(default=None,
                                            description="Id of the last checkpoint removal done.")


class PurgeStatus(StatusModel):
    """A deleted query's objects in an object store (``deletionPolicy: Delete``): the purge pod."""

    prefix: str = Field(description="The prefix holding every plan version's checkpoint.")
    attempts: int = Field(default=0, description="Purge pods started so far.")
    state: Literal["Running", "Done", "GaveUp"] = Field(
        default="Running", description="Running (a purge pod runs), Done (nothing left) or GaveUp "
        "(the objects stay; a StateCleanupFailed event says why).")


class StreamingQueryStatus(StatusModel):
    observed_generation: int | None = Field(
        default=None, description="The generation of the spec the operator last reconciled.")
    phase: Phase | None = Field(
        default=None, description="Pending, Starting, Running, Upgrading, UpgradePending, Suspended, "
        "Degraded or Deleting (derived from the conditions and the rollout).")
    ready: bool | None = Field(default=None, description="Whether the active driver reports ready.")
    conditions: list[Condition] = Field(default_factory=list,
                                        description="Ready, Progressing and Degraded.")
    plan: PinnedPlan | None = Field(default=None, description="The plan the driver runs.")
    rollout: Rollout | None = Field(default=None, description="The rollout in progress, if any.")
    last_upgrade: UpgradeRecord | None = Field(
        default=None,
        description="The newest classified edit and its outcome (Pending, InProgress or final).")
    history: list[UpgradeRecord] = Field(default_factory=list,
                                         description="The last 10 upgrades, newest first.")
    last_compile_error: CompileErrorStatus | None = Field(
        default=None, description="Why the spec's SQL does not compile (cleared once it does).")
    identity: QueryIdentity | None = Field(default=None, description="The ids the running plan version uses.")
    engine: EngineStatus | None = Field(default=None, description="The engine the drivers run on.")
    cluster: str | None = Field(default=None, description="Name of the QueryCluster in use.")
    drivers: DriversStatus | None = Field(default=None, description="Active and standby driver pods.")
    versions: list[VersionRecord] = Field(
        default_factory=list, description="Every plan version still known: the running one and the retired "
        "ones (what each created).")
    cleanup: CleanupStatus | None = Field(default=None, description="The clean-up of retired versions.")
    output: OutputStatus | None = Field(default=None, description="Where the live result is.")
    source_schemas: list[SourceSchemaStatus] = Field(
        default_factory=list, description="The running plan's avro source subjects: the version it pinned "
        "and the subject's latest (a newer one is reported, not acted on: the next edit pins it).")
    purge: PurgeStatus | None = Field(
        default=None, description="Deletion with an object store: the deletion of its checkpoints.")


class StreamingQuery(CrdModel, CrdKind):
    """A StreamingQuery: Spark SQL over Kafka, compiled into a pinned plan and run by the operator."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    kind: ClassVar[str] = "StreamingQuery"  # type: ignore[misc]
    plural: ClassVar[str] = "streamingqueries"
    singular: ClassVar[str] = "streamingquery"
    short_names: ClassVar[list[str]] = ["sq"]
    #: ``kubectl get sq`` (about 90 columns with common names); ``-o wide`` adds the re-plan on offer and
    #: the active driver pod
    printer_columns: ClassVar[list[dict[str, Any]]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Plan", "type": "string", "jsonPath": ".status.plan.shortHash",
         "description": "Pinned plan hash (first 12 characters)"},
        {"name": "Version", "type": "integer", "jsonPath": ".status.plan.version",
         "description": "Plan version (+1 on every replace)"},
        {"name": "Upgrade", "type": "string", "jsonPath": ".status.lastUpgrade.outcome",
         "description": "Outcome of the last upgrade"},
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Output", "type": "string", "jsonPath": ".status.output.topic",
         "description": "Topic holding the live result"},
        {"name": "Replan", "type": "string", "jsonPath": ".status.plan.replan.decision", "priority": 1,
         "description": "A re-plan this operator's compiler offers for the unchanged spec (what carrying it "
         "out would be); kubectl sluice replan accepts it"},
        {"name": "Active", "type": "string", "jsonPath": ".status.drivers.active", "priority": 1,
         "description": "Driver pod running the query"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    api_version: Literal["sluice.dev/v1alpha1"] = Field(default="sluice.dev/v1alpha1", alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: StreamingQuerySpec
    status: StreamingQueryStatus = Field(default_factory=StreamingQueryStatus)
