"""Status records for unit tests of the pure core: complete records (as the operator writes them)
from just the fields a test cares about."""

from __future__ import annotations

from typing import Any

from sluice.core.records import PinnedPlan, QueryRecords, Rollout, UpgradeRecord, VersionRecord


def pinned(plan_hash: str, version: int = 1, **fields: Any) -> PinnedPlan:
    """A pinned plan (its ConfigMap named like the operator names it)."""
    return PinnedPlan.model_validate({"hash": plan_hash, "version": version,
                                      "configMap": f"q-plan-{plan_hash[:12]}", **fields})


def rollout(step: str, target: str, **fields: Any) -> Rollout:
    """A rollout at ``step`` towards plan ``target`` (camelCase or snake_case ``fields``)."""
    base: dict[str, Any] = {"targetHash": target, "targetPlanVersion": 1,
                            "targetConfigMap": f"q-plan-{target[:12]}", "category": "transparent",
                            "decision": "in-place", "strategy": "in-place", "step": str(step),
                            "started": "2026-01-01T00:00:00Z"}
    return Rollout.model_validate({**base, **fields})


def upgrade(to_hash: str, outcome: str = "Succeeded", **fields: Any) -> UpgradeRecord:
    """An upgrade record towards plan ``to_hash``."""
    base: dict[str, Any] = {"toHash": to_hash, "category": "transparent", "decision": "in-place",
                            "outcome": outcome, "time": "2026-01-01T00:00:00Z"}
    return UpgradeRecord.model_validate({**base, **fields})


def version(number: int, state: str = "Running", **fields: Any) -> VersionRecord:
    """Plan version ``number``'s record."""
    base: dict[str, Any] = {"version": number, "planHash": f"{number:064x}", "configMap": f"q-plan-{number}",
                            "checkpointPath": f"/state/q/v{number}", "consumerGroup": f"g.v{number}",
                            "transactionalId": f"t.v{number}", "outputTopic": "out", "state": state,
                            "since": "2026-01-01T00:00:00Z"}
    return VersionRecord.model_validate({**base, **fields})


def stored(**records: Any) -> dict[str, Any]:
    """A status as stored, from records (``plan=``, ``rollout=``, ``last_upgrade=``, ``history=``,
    ``versions=``): what the operator writes."""
    return QueryRecords.model_validate(records).for_storage()
