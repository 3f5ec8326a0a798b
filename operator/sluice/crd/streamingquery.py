"""The StreamingQuery custom resource: one pydantic model is the source of the CRD schema."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from sluice.core.spec import CleanupPolicy, QuerySpec, Sink, Trigger, UpgradePolicy
from sluice.crd.common import CrdKind, CrdModel, Resources, StatusModel

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

    def query(self) -> QuerySpec:
        """The query part alone (what the compiler reads)."""
        return QuerySpec.model_validate(
            self.model_dump(by_alias=True, include=set(QuerySpec.model_fields))
        )


class Condition(StatusModel):
    type: str = Field(description="Ready, Progressing or Degraded.")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="CamelCase reason.")
    message: str = ""
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = None


class PreviousVersion(StatusModel):
    """The plan version a replace with hand-off started after (its drivers' SLUICE_PREVIOUS_VERSION)."""

    version: int
    plan_hash: str
    checkpoint: str = Field(description="Its checkpoint base path.")
    consumer_group: str
    transactional_id: str = Field(description="Fenced by the new version's first driver.")
    sink_topic: str
    exactly_once: bool


class PinnedPlan(StatusModel):
    hash: str = Field(description="sha256 of the pinned plan.")
    version: int = Field(description="Plan version: 1 at creation, +1 on every replace.")
    config_map: str = Field(description="Immutable ConfigMap holding the plan JSON.")
    format_version: int | None = Field(default=None, description="Plan format version.")
    hand_off_from: PreviousVersion | None = Field(
        default=None, description="The version this one replaced with hand-off (where it started).")
    output_topic: str | None = Field(
        default=None, description="The topic this version writes when it is not the plan's sink topic "
        "(a replace with backfill wrote a versioned topic).")


class VersionRecord(StatusModel):
    """What one plan version created, kept for clean-up and rollback."""

    version: int
    plan_hash: str
    config_map: str
    checkpoint_path: str
    consumer_group: str
    transactional_id: str
    output_topic: str
    dead_letter_topics: list[str] = Field(default_factory=list)
    state: Literal["Running", "Retired", "RolledBack"] = Field(
        description="Running; Retired (a newer version replaced it); RolledBack (a replace to it failed: "
        "what it left is removed at once).")
    since: str = Field(description="When it started serving.")
    retired_at: str | None = Field(default=None, description="When a newer version replaced it.")


class CompileErrorStatus(StatusModel):
    message: str
    field: str | None = None
    line: int | None = None
    column: int | None = None


class UpgradeError(StatusModel):
    """The error that failed an upgrade, as the driver on the new plan reported it."""

    class_: str = Field(alias="class", description="Exception class (Spark's error class where it has one).")
    message: str = ""
    step: str | None = Field(default=None, description="The plan step the error points at, if known.")


class RollbackInfo(StatusModel):
    mode: Literal["handBack", "restore", "discard"] = Field(
        description="handBack: the old plan takes over on the current checkpoint; restore: from the "
        "checkpoint snapshot kept before the switch; discard: a backfill that never took over is "
        "removed (the old plan never stopped)."
    )
    reason: str = ""
    started: str
    start_epoch: int = Field(description="Lease term count when the rollback began.")
    cancelled: bool = Field(default=False, description="The spec went back to the running plan.")
    restore_epoch: int | None = Field(default=None, description="Checkpoint epoch restored.")


OUTCOMES = ("Pending", "InProgress", "Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled")
Outcome = Literal["Pending", "InProgress", "Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled"]


class UpgradeRecord(StatusModel):
    from_hash: str | None = None
    to_hash: str
    category: str = Field(description="transparent, data-selection, schema-evolution, topology, unsupported.")
    decision: str = Field(description="none, in-place, replace or reject.")
    reasons: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)
    outcome: Outcome = Field(description="Pending, InProgress, Succeeded, RolledBack, Failed, Rejected or "
                             "Cancelled.")
    time: str = Field(description="When the edit was classified.")
    generation: int | None = Field(default=None, description="The query's generation the edit had.")
    started_at: str | None = None
    finished_at: str | None = None
    gap_seconds: float | None = Field(
        default=None, description="Last commit of the old plan to first commit of the new one (runtime)."
    )
    checkpoint: str | None = Field(default=None, description="Checkpoint the new plan ran on.")
    epoch: int | None = Field(default=None, description="Lease term (checkpoint epoch) of the new plan.")
    rollback: str | None = Field(default=None, description="handBack or restore, when rolled back.")
    message: str | None = None
    error: UpgradeError | None = None


class Rollout(StatusModel):
    id: str | None = None
    from_hash: str | None = Field(default=None, description="The plan running when the rollout began.")
    target_hash: str
    target_plan_version: int
    target_config_map: str | None = None
    category: str
    decision: str
    strategy: str = Field(description="create, in-place, replace or none.")
    step: str = Field(description="Deploying, Backfilling, Applying, Verifying, RollingBack, Failed, "
                      "AwaitingUpgrade or Rejected.")
    started: str
    message: str = ""
    gate_started: str | None = Field(default=None, description="When the health gate started.")
    start_epoch: int | None = Field(default=None, description="Lease term count when the gate started.")
    rollback: RollbackInfo | None = None
    error: UpgradeError | None = None
    replace_strategy: str | None = Field(default=None, description="handOff or backfill (replace only).")
    previous: PreviousVersion | None = Field(default=None, description="The version a replace starts after.")
    output_topic: str | None = Field(default=None, description="The topic the new version writes (replace).")
    backfill_from: str | None = Field(default=None, description="earliest or an RFC 3339 time (backfill).")
    max_lag_records: int | None = Field(default=None, description="The lag a backfill takes over at.")
    lag_records: int | None = Field(default=None, description="The backfill's lag last seen (records).")
    caught_up: str | None = Field(default=None, description="When the backfill caught up (the switch began).")


class QueryIdentity(StatusModel):
    service_id: str | None = Field(default=None, description="QueryCluster serviceId pinned at creation.")
    query_id: str
    consumer_group: str
    transactional_id: str
    checkpoint_path: str


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


class CleanupStatus(StatusModel):
    """Where the clean-up of retired plan versions stands."""

    next_due: str | None = Field(default=None, description="When the next retired version may be cleaned up.")
    message: str | None = Field(default=None, description="What the clean-up waits for.")
    checkpoints_removed: str | None = Field(default=None,
                                            description="Id of the last checkpoint removal done.")


class OutputStatus(StatusModel):
    """Where the query's live result is."""

    topic: str = Field(description="The topic holding the live result (a backfill moves it to a versioned "
                       "topic when it takes over).")
    since: str | None = Field(default=None, description="When this topic started holding it.")


class StreamingQueryStatus(StatusModel):
    observed_generation: int | None = None
    phase: Phase | None = None
    ready: bool | None = None
    conditions: list[Condition] = Field(default_factory=list)
    plan: PinnedPlan | None = Field(default=None, description="The plan the driver runs.")
    rollout: Rollout | None = Field(default=None, description="The rollout in progress, if any.")
    last_upgrade: UpgradeRecord | None = None
    history: list[UpgradeRecord] = Field(default_factory=list,
                                         description="The last 10 upgrades, newest first.")
    last_compile_error: CompileErrorStatus | None = None
    identity: QueryIdentity | None = None
    cluster: str | None = Field(default=None, description="Name of the QueryCluster in use.")
    drivers: DriversStatus | None = Field(default=None, description="Active and standby driver pods.")
    versions: list[VersionRecord] = Field(
        default_factory=list, description="Every plan version still known: the running one and the retired "
        "ones (what each created).")
    cleanup: CleanupStatus | None = Field(default=None, description="The clean-up of retired versions.")
    output: OutputStatus | None = Field(default=None, description="Where the live result is.")


class StreamingQuery(CrdModel, CrdKind):
    """A StreamingQuery: Spark SQL over Kafka, compiled into a pinned plan and run by the operator."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    kind: ClassVar[str] = "StreamingQuery"  # type: ignore[misc]
    plural: ClassVar[str] = "streamingqueries"
    singular: ClassVar[str] = "streamingquery"
    short_names: ClassVar[list[str]] = ["sq"]
    printer_columns: ClassVar[list[dict[str, str]]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Plan", "type": "string", "jsonPath": ".status.plan.hash",
         "description": "Pinned plan hash"},
        {"name": "Upgrade", "type": "string", "jsonPath": ".status.lastUpgrade.decision",
         "description": "Last upgrade decision"},
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Output", "type": "string", "jsonPath": ".status.output.topic",
         "description": "Topic holding the live result"},
        {"name": "Active", "type": "string", "jsonPath": ".status.drivers.active",
         "description": "Driver pod running the query"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    api_version: Literal["sluice.dev/v1alpha1"] = Field(default="sluice.dev/v1alpha1", alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: StreamingQuerySpec
    status: StreamingQueryStatus = Field(default_factory=StreamingQueryStatus)
