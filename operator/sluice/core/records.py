"""The status records of a StreamingQuery, typed (pure): the pinned plan, the rollout, the last
upgrade and its history, the plan versions.

The operator parses them once from the stored status (``from_storage``) and writes them back
(``for_storage``) the way kopf keeps its handler state (``HandlerState.from_storage`` /
``for_storage``); the core's decisions take and return them. They are also the status part of the
CRD schema (``sluice.crd.streamingquery`` composes them), camelCase on the wire.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class StatusModel(BaseModel):
    """Base of status records: camelCase on the wire, unknown fields ignored (a newer operator's)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    @classmethod
    def from_storage(cls, data: Any) -> Self | None:
        """The record as stored in the status (None: none stored)."""
        return cls.model_validate(data) if data else None

    def for_storage(self) -> dict[str, Any]:
        """The record as the status stores it (camelCase, unset optional fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class EngineRef(StatusModel):
    """An engine snapshot as the core sees it: its digest (the operator reads the rest through
    ``sluice.crd.engine.Engine``; every field is kept)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    digest: str = Field(default="", description="sha256 of the engine snapshot.")


#: the driver's environment variable holding the previous version (JSON)
PREVIOUS_VERSION_ENV = "SLUICE_PREVIOUS_VERSION"


class PreviousVersionError(ValueError):
    """The previous version's description is not usable (names the field)."""


#: the fields of a previous version as JSON, and their types (checked strictly: a driver's environment)
_PREVIOUS_FIELDS: dict[str, type] = {"version": int, "planHash": str, "checkpoint": str, "consumerGroup": str,
                                     "transactionalId": str, "sinkTopic": str, "exactlyOnce": bool}


class PreviousVersion(StatusModel):
    """The plan version a replace with hand-off started after (its drivers' SLUICE_PREVIOUS_VERSION)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    version: int = Field(description="Its plan version.")
    plan_hash: str = Field(description="sha256 of its plan.")
    checkpoint: str = Field(description="Its checkpoint base path.")
    consumer_group: str = Field(description="Its Kafka consumer group.")
    transactional_id: str = Field(description="Fenced by the new version's first driver.")
    sink_topic: str = Field(description="The topic it wrote.")
    exactly_once: bool = Field(description="Whether it wrote with exactly-once (transactional) delivery.")

    def to_dict(self) -> dict[str, Any]:
        return self.for_storage()

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any, where: str = PREVIOUS_VERSION_ENV) -> PreviousVersion:
        """Checked field by field (non-empty strings, an int that is not a bool): a driver's
        environment or a stored status; ``where`` names it in the error."""
        if not isinstance(data, dict):
            raise PreviousVersionError(f"{where}: expected an object, got {type(data).__name__}")
        for name, kind in _PREVIOUS_FIELDS.items():
            value = data.get(name)
            if not isinstance(value, kind) or (kind is str and not value) or (
                    kind is int and isinstance(value, bool)):
                raise PreviousVersionError(f"{where}.{name}: expected a {'non-empty ' if kind is str else ''}"
                                           f"{kind.__name__}, got {value!r}")
        return cls.model_validate(data)

    @classmethod
    def from_json(cls, text: str, where: str = PREVIOUS_VERSION_ENV) -> PreviousVersion:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PreviousVersionError(f"{where}: not JSON ({exc})") from None
        return cls.from_dict(data, where)


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


#: the outcomes of an upgrade (``sluice.core.rollout.Outcome`` names the same values)
OutcomeName = Literal["Pending", "InProgress", "Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled"]


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
    outcome: OutcomeName = Field(
        description="Pending, InProgress, Succeeded, RolledBack, Failed, Rejected or Cancelled.")
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
    target_engine: EngineRef | None = Field(
        default=None, description="The engine the rollout puts the drivers on, when it changes it.")
    from_engine: str | None = Field(default=None, description="Digest of the engine running before.")
    target_inputs: PlanInputs | None = Field(default=None, description="What the target plan is compiled "
                                             "from (pinned with it).")


class OutputStatus(StatusModel):
    """Where the query's live result is."""

    topic: str = Field(description="The topic holding the live result (a backfill moves it to a versioned "
                       "topic when it takes over).")
    since: str | None = Field(default=None, description="When this topic started holding it.")


class QueryRecords(StatusModel):
    """The typed records of a StreamingQuery's status, parsed once from it (the conditions and the
    phase stay with the status reducers, ``sluice.core.status``)."""

    plan: PinnedPlan | None = None
    rollout: Rollout | None = None
    last_upgrade: UpgradeRecord | None = None
    history: list[UpgradeRecord] = Field(default_factory=list)
    versions: list[VersionRecord] = Field(default_factory=list)
    engine: EngineRef | None = None
    output: OutputStatus | None = None

    @classmethod
    def of(cls, status: Any) -> QueryRecords:
        """The records of a stored status (empty ones for none)."""
        return cls.model_validate(status or {})
