"""A QueryCluster's rollout across its queries: who may move to the cluster's engine now.

``roll_fleet`` reads the cluster and every query that refers to it, lets the pure planner
(``sluice.core.fleet.plan_wave``) decide which queries are admitted, writes ``status.rollout`` of
the QueryCluster (how far it got, why it stopped) and annotates the queries it newly admitted, so
that each reconciles at once and carries its upgrade out (``sluice.operator.desired.engines`` reads
the admission). It runs when the cluster changes and on a timer while a rollout is in progress.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from sluice.core.fleet import QueryFleetState, Wave, plan_wave
from sluice.core.records import EngineRef, QueryRecords
from sluice.core.status import EventReason
from sluice.crd.engine import Engine
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator.builders.context import default_image
from sluice.operator.cluster import annotate, queries_of
from sluice.operator.desired import engine_of
from sluice.operator.env import Env

log = logging.getLogger("sluice.operator")

#: StreamingQuery annotation the cluster sets when it admits the query to its rollout (the target
#: digest's first 12 characters), or halts the rollout the query waits for (``-halted`` added): the
#: change of the annotation makes the query reconcile
ADMITTED = "sluice.dev/cluster-rollout"
#: the rollout steps during which nothing runs towards the target (the query waits or was refused)
WAITING_STEPS = ("AwaitingUpgrade", "Rejected")


def _digest(record: EngineRef | None) -> str | None:
    if record is None:
        return None
    try:
        engine = engine_of(record)
    except ValidationError:  # a record this operator cannot read: the digest it was written with
        return record.digest or None
    return engine.compute_digest() if engine is not None else None


def fleet_state(query: dict[str, Any]) -> QueryFleetState:
    records = QueryRecords.of(query.get("status"))
    rollout, last = records.rollout, records.last_upgrade
    why = ""
    if last is not None:
        why = f"{last.error.class_}: {last.error.message}" if last.error else last.message or ""
    return QueryFleetState(
        name=str(query["metadata"]["name"]), engine=_digest(records.engine),
        rollout_engine=_digest(rollout.target_engine if rollout else None),
        rollout_waiting=rollout is not None and rollout.step in WAITING_STEPS,
        last_engine=last.to_engine if last else None, last_outcome=last.outcome if last else None,
        last_message=why)


def roll_fleet(env: Env, body: dict[str, Any]) -> str | None:
    """Plan the cluster's rollout now; returns its state (None when the spec is invalid)."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    try:
        spec = QueryClusterSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None  # the cluster's reconcile reports it
    engine = spec.engine(default_image())
    target = engine.compute_digest()
    status = body.get("status") or {}
    previous = status.get("rollout") or {}
    same = previous.get("target") == target
    failure = previous.get("failure") if same else None
    queries = queries_of(env, ns, name)
    wave = plan_wave(target, [fleet_state(q) for q in queries], spec.upgrade.max_concurrent_rollouts,
                     (failure["query"], failure.get("message") or "") if failure else None)
    record = _record(wave, engine, previous.get("started") if same else env.clock(), queries)
    if record != previous:
        env.kube.patch_status("QueryCluster", ns, name, {"rollout": record})
        _announce(env, body, wave, previous if same else {})
    _poke(env, [q for q in queries if q["metadata"]["name"] in wave.admitted], target[:12])
    if wave.state == "Halted":  # the waiting queries say so in their status (status.engine.waiting)
        _poke(env, [q for q in queries if q["metadata"]["name"] in wave.pending], f"{target[:12]}-halted")
    return wave.state


def _record(wave: Wave, engine: Engine, started: str | None, queries: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "target": wave.target, "image": engine.image, "sparkVersion": engine.spark_version,
        "started": started, "state": wave.state, "total": wave.total, "updated": wave.updated,
        "inProgress": wave.in_progress, "admitted": wave.admitted, "pending": wave.pending,
        "refused": wave.refused, "message": wave.message,
    }
    if wave.failed:
        first = wave.failed[0]
        state = next((fleet_state(q) for q in queries if q["metadata"]["name"] == first), None)
        out["failure"] = {"query": first, "message": state.last_message if state else ""}
    return out


def _announce(env: Env, body: dict[str, Any], wave: Wave, previous: dict[str, Any]) -> None:
    if previous.get("state") == wave.state and previous.get("admitted") == wave.admitted:
        return
    if wave.state == "Halted" and previous.get("state") != "Halted":
        env.events(body, "Warning", str(EventReason.ROLLOUT_HALTED), wave.message)
    elif wave.state == "Complete" and previous.get("state") not in (None, "Complete"):
        env.events(body, "Normal", str(EventReason.ROLLOUT_COMPLETE), wave.message)
    elif wave.state == "Progressing" and wave.admitted != previous.get("admitted"):
        env.events(body, "Normal", str(EventReason.ROLLOUT_WAVE),
                   f"admitted {', '.join(wave.admitted)} to engine {wave.target[:12]}: {wave.message}")


def _poke(env: Env, queries: list[dict[str, Any]], value: str) -> None:
    """Set the rollout annotation of ``queries`` to ``value`` (once): each reconciles at once."""
    for query in queries:
        annotate(env, query, ADMITTED, value)
