"""The StreamingQuery custom resource: one pydantic model is the source of the CRD schema."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from sluice.core.spec import CleanupPolicy, QuerySpec, Sink, Trigger, UpgradePolicy
from sluice.crd.common import CrdKind, CrdModel, Resources, StatusModel
from sluice.crd.engine import Engine

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
    """One condition of the object (Kubernetes conventions)."""

    type: str = Field(description="Ready, Progressing, Degraded or ReplanAvailable.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The generation of the spec the condition was set for.")


class PreviousVersion(StatusModel):
    """The plan version a replace with hand-off started after (its drivers' SLUICE_PREVIOUS_VERSION)."""

    version: int = Field(description="Its plan version.")
    plan_hash: str = Field(description="sha256 of its plan.")
    checkpoint: str = Field(description="Its checkpoint base path.")
    consumer_group: str = Field(description="Its Kafka consumer group.")
    transactional_id: str = Field(description="Fenced by the new version's first driver.")
    sink_topic: str = Field(description="The topic it wrote.")
    exactly_once: bool = Field(description="Whether it wrote with exactly-once (transactional) delivery.")


class PlanInputs(StatusModel):
    """Digests of what the pinned plan was compiled from: while a reconcile reads the same, the
    plan is kept whatever the operator's compiler makes of the spec now."""

    query: str = Field(description="sha256 of the query part of the spec (fields left at their defaults "
                       "left out).")
    engine: str = Field(description="sha256 of the engine fields that enter plans (the Spark line and the "
                        "pinned Spark settings of the QueryCluster).")


class Replan(StatusModel):
    """What this operator's compiler would make of the unchanged spec, when it differs from the
    pinned plan: offered, never carried out until accepted (annotation sluice.dev/replan)."""

    hash: str = Field(description="sha256 of the plan this operator compiles (empty: it refuses the spec).")
    category: str = Field(description="The classifier's category of the change from the pinned plan.")
    decision: str = Field(description="What carrying it out would be: none, in-place, replace or reject.")
    reasons: list[str] = Field(default_factory=list,
                               description="The classifier's reasons, most severe first.")
    compiler: str = Field(description="The operator version whose compiler made it.")
    message: str = Field(default="", description="What to do about it.")


class PinnedPlan(StatusModel):
    """The plan the drivers run: the last stable plan, the one a rollback returns to."""

    hash: str = Field(description="sha256 of the pinned plan.")
    short_hash: str | None = Field(
        default=None, description="The first 12 characters of hash (the Plan column of kubectl get, the "
        "plan ConfigMap's name and label).")
    version: int = Field(description="Plan version: 1 at creation, +1 on every replace.")
    config_map: str = Field(description="Immutable ConfigMap holding the plan JSON.")
    format_version: int | None = Field(default=None, description="Plan format version.")
    hand_off_from: PreviousVersion | None = Field(
        default=None, description="The version this one replaced with hand-off (where it started).")
    output_topic: str | None = Field(
        default=None, description="The topic this version writes when it is not the plan's sink topic "
        "(a replace with backfill wrote a versioned topic).")
    inputs: PlanInputs | None = Field(default=None, description="What the plan was compiled from.")
    replan: Replan | None = Field(
        default=None, description="A different plan this operator's compiler makes of the unchanged spec "
        "(offered, not carried out).")


class EngineStatus(Engine):
    """The engine the drivers run on (the last stable one, the one a rollback returns to)."""

    digest: str = Field(default="", description="sha256 of the engine snapshot.")
    waiting: str | None = Field(
        default=None, description="Why the QueryCluster's newer engine is not applied yet (its rollout "
        "admits queries in waves).")


class VersionRecord(StatusModel):
    """What one plan version created, kept for clean-up and rollback."""

    version: int = Field(description="Plan version number.")
    plan_hash: str = Field(description="sha256 of the version's current plan (in-place upgrades move it).")
    config_map: str = Field(description="ConfigMap holding that plan.")
    checkpoint_path: str = Field(description="Its checkpoint directory on the state volume.")
    consumer_group: str = Field(description="Its Kafka consumer group.")
    transactional_id: str = Field(description="Its Kafka transactional id.")
    output_topic: str = Field(description="The topic it writes.")
    dead_letter_topics: list[str] = Field(default_factory=list, description="Its dead-letter topics.")
    state: Literal["Running", "Retired", "RolledBack"] = Field(
        description="Running; Retired (a newer version replaced it); RolledBack (a replace to it failed: "
        "what it left is removed at once).")
    since: str = Field(description="When it started serving.")
    retired_at: str | None = Field(default=None, description="When a newer version replaced it.")


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


class UpgradeError(StatusModel):
    """The error that failed an upgrade, as the driver on the new plan reported it."""

    class_: str = Field(alias="class", description="Exception class (Spark's error class where it has one).")
    message: str = Field(default="", description="The error message.")
    step: str | None = Field(default=None, description="The plan step the error points at, if known.")


class RollbackInfo(StatusModel):
    """How a rollout returns to the stable plan."""

    mode: Literal["handBack", "restore", "discard"] = Field(
        description="handBack: the old plan takes over on the current checkpoint; restore: from the "
        "checkpoint snapshot kept before the switch; discard: a backfill that never took over is "
        "removed (the old plan never stopped)."
    )
    reason: str = Field(default="", description="Why this mode.")
    started: str = Field(description="When the rollback began (RFC 3339).")
    start_epoch: int = Field(description="Lease term count when the rollback began.")
    cancelled: bool = Field(default=False, description="The spec went back to the running plan.")
    restore_epoch: int | None = Field(default=None, description="Checkpoint epoch restored.")


OUTCOMES = ("Pending", "InProgress", "Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled")
Outcome = Literal["Pending", "InProgress", "Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled"]


class UpgradeRecord(StatusModel):
    """One classified edit of the spec and its outcome."""

    from_hash: str | None = Field(default=None,
                                  description="sha256 of the plan running when the edit was classified.")
    to_hash: str = Field(description="sha256 of the plan the edit compiles to.")
    category: str = Field(description="none, transparent, data-selection, schema-evolution, topology, "
                          "source-modifying or unsupported.")
    decision: str = Field(description="none, in-place, replace or reject.")
    reasons: list[str] = Field(default_factory=list,
                               description="The classifier's reasons, most severe first.")
    changes: list[str] = Field(default_factory=list, description="Every change found, one sentence each.")
    outcome: Outcome = Field(description="Pending, InProgress, Succeeded, RolledBack, Failed, Rejected or "
                             "Cancelled.")
    time: str = Field(description="When the edit was classified.")
    generation: int | None = Field(default=None, description="The query's generation the edit had.")
    started_at: str | None = Field(default=None, description="When carrying the edit out began.")
    finished_at: str | None = Field(default=None, description="When it reached its final outcome.")
    gap_seconds: float | None = Field(
        default=None, description="Last commit of the old plan to first commit of the new one (runtime)."
    )
    checkpoint: str | None = Field(default=None, description="Checkpoint the new plan ran on.")
    epoch: int | None = Field(default=None, description="Lease term (checkpoint epoch) of the new plan.")
    rollback: str | None = Field(default=None, description="handBack or restore, when rolled back.")
    message: str | None = Field(default=None, description="What the upgrade did or costs (a replace: the "
                                "state it starts without; the gate's last word).")
    error: UpgradeError | None = Field(default=None, description="The error that failed the upgrade.")
    from_engine: str | None = Field(default=None, description="Digest of the engine running before.")
    to_engine: str | None = Field(default=None, description="Digest of the engine the upgrade put the query "
                                  "on (another one: an engine upgrade).")
    cause: Literal["spec", "cluster", "replan"] | None = Field(
        default=None, description="What asked for it: an edit of the spec, of the QueryCluster (an engine "
        "or Spark settings change), or an accepted re-plan.")


class Rollout(StatusModel):
    """An upgrade in flight, written before each step is acted on (a write-ahead log)."""

    id: str | None = Field(default=None, description="Id of the rollout (its start time and target hash).")
    from_hash: str | None = Field(default=None, description="The plan running when the rollout began.")
    target_hash: str = Field(description="sha256 of the plan rolled out.")
    target_plan_version: int = Field(description="Plan version of the target: the running one (in-place) or "
                                     "the next one (replace).")
    target_config_map: str | None = Field(default=None, description="ConfigMap holding the target plan.")
    category: str = Field(description="The edit's category (see lastUpgrade.category); initial at creation.")
    decision: str = Field(description="none, in-place, replace or reject; create at creation.")
    strategy: str = Field(description="create, in-place, replace or none.")
    step: str = Field(description="Deploying, Backfilling, Applying, Verifying, RollingBack, Failed, "
                      "AwaitingUpgrade or Rejected.")
    started: str = Field(description="When the rollout began (RFC 3339).")
    message: str = Field(default="", description="What the rollout does or waits for now.")
    gate_started: str | None = Field(default=None, description="When the health gate started.")
    start_epoch: int | None = Field(default=None, description="Lease term count when the gate started.")
    rollback: RollbackInfo | None = Field(
        default=None, description="The rollback under way (a failed gate, or the spec went back).")
    error: UpgradeError | None = Field(default=None, description="The error that failed the gate.")
    replace_strategy: str | None = Field(default=None, description="handOff or backfill (replace only).")
    previous: PreviousVersion | None = Field(default=None, description="The version a replace starts after.")
    output_topic: str | None = Field(default=None, description="The topic the new version writes (replace).")
    backfill_from: str | None = Field(default=None, description="earliest or an RFC 3339 time (backfill).")
    max_lag_records: int | None = Field(default=None, description="The lag a backfill takes over at.")
    lag_records: int | None = Field(default=None, description="The backfill's lag last seen (records).")
    caught_up: str | None = Field(default=None, description="When the backfill caught up (the switch began).")
    target_engine: EngineStatus | None = Field(
        default=None, description="The engine the rollout puts the drivers on, when it changes it.")
    from_engine: str | None = Field(default=None, description="Digest of the engine running before.")
    target_inputs: PlanInputs | None = Field(default=None, description="What the target plan is compiled "
                                             "from (pinned with it).")


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


class OutputStatus(StatusModel):
    """Where the query's live result is."""

    topic: str = Field(description="The topic holding the live result (a backfill moves it to a versioned "
                       "topic when it takes over).")
    since: str | None = Field(default=None, description="When this topic started holding it.")


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
