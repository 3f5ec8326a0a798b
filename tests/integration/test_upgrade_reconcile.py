"""In-place upgrades, the health gate and rollback, reconciled against the real API server.

The operator's reconcile runs in-process with the product's REST client on the test run's real
kube-apiserver (controller-manager included: Deployments roll out ReplicaSets and pods, which
stay Pending without a kubelet). The drivers' side of the protocol, the Lease records and the pod
error annotation, is written here the way ``sluice_runtime`` writes it (``DriverSide``); the
end-to-end tests (tests/e2e/test_upgrades.py) run the real runtime in pods.

The operator is "killed" by failing one chosen write of the client (the process would die there)
and by continuing with a fresh ``Env`` (a new operator process): after every single write of a
whole rollout it must resume and end exactly where an uninterrupted run ends.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sluice.core.driverreport import RESTORE_REQUEST
from sluice.core.election import HOLDER_PLAN
from sluice.operator.env import Env
from sluice.operator.kube import KubeError
from sluice.operator.metrics import OperatorMetrics
from sluice.operator.reconcile import reconcile_query

from tests.support.drivers import T_ERROR, DriverSide
from tests.support.waiting import eventually
from tests.support.world import SQL, RecordingKube, World

pytestmark = pytest.mark.integration

WHERE_SQL = SQL.replace("FROM orders", "FROM orders WHERE amount > 0")
#: a filter that compiles and fails at run time on a non-numeric string (ANSI cast)
BAD_SQL = SQL.replace("FROM orders", "FROM orders WHERE CAST(order_id AS INT) > 0")


def plan_config_map(w: World) -> str:
    vol = next(v for v in w.deployment()["spec"]["template"]["spec"]["volumes"] if v["name"] == "plan")
    return str(vol["configMap"]["name"])


def outcomes(w: World) -> dict[str, float | None]:
    """The query's ``sluice_operator_upgrade_outcomes_total`` per outcome."""
    labels = {"namespace": w.ns, "streamingquery": "totals"}
    return {outcome: w.env.metrics.registry.get_sample_value(
        "sluice_operator_upgrade_outcomes_total", {**labels, "outcome": outcome})
        for outcome in ("Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled")}


def started(w: World, sql: str = WHERE_SQL, **spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A running query (plan A, one driver term), then an edit reconciled: (pinned A, status)."""
    w.add_query(**spec)
    reconcile_query(w.env, w.current())
    pinned = w.status()["plan"]
    DriverSide(w.k.api, w.ns).take_over(pinned["hash"], batches=10)
    reconcile_query(w.env, w.edit(sql=sql))
    return pinned, w.status()


def test_a_data_selection_edit_is_carried_out_behind_its_own_gate(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    pinned, status = started(w)
    target = status["rollout"]["targetHash"]
    assert status["phase"] == "Upgrading"
    assert status["rollout"]["step"] == "Verifying" and status["rollout"]["category"] == "data-selection"
    assert status["lastUpgrade"]["outcome"] == "InProgress"
    assert plan_config_map(w) == f"totals-plan-{target[:12]}"  # the new driver starts on the new plan
    assert status["plan"] == pinned  # the stable plan stays pinned until the gate passes

    # the old plan running on (even committing batches in a new term) never passes the gate
    drivers.take_over(pinned["hash"], batches=50)
    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "Verifying"

    drivers.take_over(target, batches=2)
    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "Verifying"
    assert "committed 2 of 3 batches" in w.status()["rollout"]["message"]

    drivers.progress(3)
    assert reconcile_query(w.env, w.current()) == "Starting"  # no kubelet: readiness follows the pods
    status = w.status()
    assert "rollout" not in status and status["plan"]["hash"] == target
    last = status["lastUpgrade"]
    assert last["outcome"] == "Succeeded" and last["gapSeconds"] == 0.8 and last["finishedAt"]
    assert last["checkpoint"] == status["identity"]["checkpointPath"]
    assert status["history"][0] == last
    assert "UpgradeStarted" in w.reasons() and "UpgradeSucceeded" in w.reasons()


def test_a_failing_edit_is_rolled_back_onto_the_old_plan(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    pinned, status = started(w, BAD_SQL)
    target = status["rollout"]["targetHash"]
    assert status["rollout"]["category"] == "data-selection"
    drivers.take_over(target)
    drivers.fail(target, "The value 'o1' of the type \"STRING\" cannot be cast to \"INT\"")
    reconcile_query(w.env, w.current())
    status = w.status()
    rollout = status["rollout"]
    assert rollout["step"] == "RollingBack" and rollout["rollback"]["mode"] == "handBack"
    assert rollout["error"] == {"class": "CAST_INVALID_INPUT", "step": "project-1",
                                "message": "The value 'o1' of the type \"STRING\" cannot be cast to \"INT\""}
    assert plan_config_map(w) == pinned["configMap"]  # the old plan's driver starts again
    assert status["phase"] == "Upgrading"

    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "RollingBack"  # until the old plan runs again
    drivers.take_over(pinned["hash"], batches=1)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["plan"] == pinned
    last = status["lastUpgrade"]
    assert last["outcome"] == "RolledBack" and last["rollback"] == "handBack"
    assert status["lastUpgrade"]["error"]["class"] == "CAST_INVALID_INPUT"
    assert "UpgradeRolledBack" in w.reasons()
    # the spec still asks for the failed plan: not tried again until the spec is edited; Degraded says so
    assert reconcile_query(w.env, w.current()) == "Degraded"
    # counted once, per query (what SluiceUpgradeRolledBack alerts on); the other outcomes at 0
    assert outcomes(w) == {"Succeeded": 0, "RolledBack": 1, "Failed": 0, "Rejected": 0, "Cancelled": 0}
    status = w.status()
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "UpgradeRolledBack" and "CAST_INVALID_INPUT" in degraded["message"]
    assert "rollout" not in status and plan_config_map(w) == pinned["configMap"]
    # any edit tries again (here restartNonce: the same target plan, a new generation)
    reconcile_query(w.env, w.edit(restartNonce="retry-1"))
    assert w.status()["rollout"]["step"] == "Verifying" and w.status()["rollout"]["targetHash"] == target


def test_rollback_never_stays_degraded_until_the_next_edit(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    pinned, status = started(w, BAD_SQL, upgrade={"rollback": "Never"})
    target = status["rollout"]["targetHash"]
    drivers.take_over(target)
    drivers.fail(target, "cannot be cast")
    assert reconcile_query(w.env, w.current()) == "Degraded"
    status = w.status()
    assert status["rollout"]["step"] == "Failed" and status["lastUpgrade"]["outcome"] == "Failed"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "UpgradeFailed"
    assert "CAST_INVALID_INPUT" in degraded["message"]
    assert plan_config_map(w) == f"totals-plan-{target[:12]}"  # stays on the new plan
    assert reconcile_query(w.env, w.current()) == "Degraded"  # and stays so

    # the next edit (back to the old SQL) is classified against the plan the workload is on
    reconcile_query(w.env, w.edit(sql=SQL))
    status = w.status()
    assert status["rollout"]["step"] == "Verifying" and status["rollout"]["fromHash"] == target
    assert status["rollout"]["targetHash"] == pinned["hash"]
    drivers.take_over(pinned["hash"], batches=3)
    assert reconcile_query(w.env, w.current()) == "Starting"  # no kubelet: readiness follows the pods
    assert [h["outcome"] for h in w.status()["history"]] == ["Succeeded", "Failed"]
    assert outcomes(w) == {"Succeeded": 1, "RolledBack": 0, "Failed": 1, "Rejected": 0, "Cancelled": 0}


def test_the_spec_reverted_mid_rollout_cancels_it(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    pinned, status = started(w)
    target = status["rollout"]["targetHash"]
    # the new plan never held the Lease: the old plan's driver, which never stopped, runs it (at once)
    reconcile_query(w.env, w.edit(sql=SQL))
    status = w.status()
    assert "rollout" not in status and status["lastUpgrade"]["outcome"] == "Cancelled"
    assert status["lastUpgrade"]["rollback"] == "handBack"
    assert plan_config_map(w) == pinned["configMap"]
    assert "UpgradeCancelled" in w.reasons()

    # once the new plan ran, going back waits for the old plan to run again in a later term
    reconcile_query(w.env, w.edit(sql=WHERE_SQL))
    assert w.status()["rollout"]["targetHash"] == target
    drivers.take_over(target, batches=1)
    reconcile_query(w.env, w.edit(sql=SQL))
    status = w.status()
    assert status["rollout"]["step"] == "RollingBack" and status["rollout"]["rollback"]["cancelled"]
    drivers.take_over(pinned["hash"], batches=1)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["lastUpgrade"]["outcome"] == "Cancelled"


def test_an_edit_during_a_rollout_waits_for_it_then_starts_from_what_runs(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    _, status = started(w)
    first = status["rollout"]["targetHash"]
    third_sql = WHERE_SQL.replace("amount > 0", "amount > 1")
    reconcile_query(w.env, w.edit(sql=third_sql))
    assert w.status()["rollout"]["targetHash"] == first  # never two rollouts at once
    drivers.take_over(first, batches=3)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["plan"]["hash"] == first
    assert status["rollout"]["step"] == "Verifying" and status["rollout"]["fromHash"] == first
    assert status["rollout"]["targetHash"] != first
    assert status["history"][0]["outcome"] == "Succeeded"


def test_a_rollback_that_is_not_in_place_restores_the_backstop(world: World) -> None:
    """Windowed counts, update -> append is in-place; append -> update is not: restore the epoch."""
    w, drivers = world, DriverSide(world.k.api, world.ns)
    sql = ("SELECT window(ts, '5 minutes') AS w, customer, count(*) AS orders FROM orders "
           "GROUP BY window(ts, '5 minutes'), customer")
    source = w.query_spec()["sources"][0]
    source = {**source, "schema": [*source["schema"], {"name": "ts", "type": "timestamp"}],
              "eventTime": {"column": "ts", "watermark": "1 minute"}}
    w.add_query(sql=sql, sources=[source],
                sink={"topic": w.topic, "key": ["customer"], "outputMode": "update"})
    reconcile_query(w.env, w.current())
    pinned = w.status()["plan"]
    drivers.take_over(pinned["hash"], batches=5)
    reconcile_query(w.env, w.edit(sink={"topic": w.topic, "key": ["customer"], "outputMode": "append"}))
    target = w.status()["rollout"]["targetHash"]
    epoch = drivers.take_over(target)
    lease = w.lease()
    lease["metadata"]["annotations"]["sluice.dev/backstop"] = json.dumps(
        {"epoch": epoch - 1, "planHash": pinned["hash"], "toPlan": target, "time": T_ERROR})
    w.k.replace(lease)
    drivers.fail(target, "boom")
    reconcile_query(w.env, w.current())
    rollout = w.status()["rollout"]
    assert rollout["rollback"]["mode"] == "restore" and rollout["rollback"]["restoreEpoch"] == epoch - 1
    request = json.loads(w.lease()["metadata"]["annotations"][RESTORE_REQUEST])
    assert request == {"id": rollout["id"], "epoch": epoch - 1, "planHash": pinned["hash"]}


def fresh_env(w: World) -> Env:
    """A new operator process: a new client and Env, same API server."""
    k = RecordingKube(w.k.api)
    env = Env(kube=k, events=w.env.events, clock=w.env.clock, metrics=OperatorMetrics(CollectorRegistry()),
              kafka_timeout=3.0)
    w.k, w.env = k, env
    return env


def upgrade_run(w: World, name: str, crash_at: int | None) -> dict[str, Any]:
    """Edit -> switch -> gate -> success, with the operator dying at write ``crash_at`` (counted
    from the edit's first reconcile), restarted, and driven until the rollout ends."""
    fresh_env(w)
    drivers = DriverSide(w.k.api, w.ns, name)
    w.add_query(name)
    reconcile_query(w.env, w.current(name))
    pinned = w.status(name)["plan"]
    drivers.take_over(pinned["hash"], batches=10)
    w.edit(name, sql=WHERE_SQL)
    w.k.calls.clear()
    w.k.fail_write = crash_at
    target: str | None = None
    for _ in range(12):
        try:
            reconcile_query(w.env, w.current(name))
        except KubeError as exc:
            assert "injected" in str(exc)
            fresh_env(w)
            continue
        status = w.status(name)
        rollout = status.get("rollout")
        if rollout is None:
            return status
        target = rollout["targetHash"]
        if rollout["step"] == "Verifying" and plan_config_map_of(w, name) == rollout["targetConfigMap"]:
            lease = w.lease(f"{name}-driver")
            if lease["metadata"]["annotations"].get(HOLDER_PLAN) != target:
                drivers.take_over(target, batches=3)
    raise AssertionError(f"the rollout of {name} never ended (target {target})")


def plan_config_map_of(w: World, name: str) -> str:
    [dep] = w.k.list("Deployment", w.ns, f"sluice.dev/query={name}")
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "plan")
    return str(vol["configMap"]["name"])


def test_the_operator_killed_after_any_write_of_a_rollout_resumes_it(world: World) -> None:
    w = world
    w.k.fail_write = None
    reference = upgrade_run(w, "q0", crash_at=None)
    writes = len([c for c in w.k.calls if c[0] in ("POST", "PUT", "PATCH", "DELETE")])
    assert writes >= 4, w.k.calls
    assert reference["lastUpgrade"]["outcome"] == "Succeeded"
    for n in range(1, writes + 1):
        status = upgrade_run(w, f"q{n}", crash_at=n)
        assert status["plan"]["hash"] == reference["plan"]["hash"], f"crash at write {n}"
        assert status["lastUpgrade"]["outcome"] == "Succeeded", f"crash at write {n}"
        assert [h["outcome"] for h in status["history"]] == ["Succeeded"], f"crash at write {n}"
        assert status["observedGeneration"] == 2, f"crash at write {n}"
        assert plan_config_map_of(w, f"q{n}") == status["plan"]["configMap"]
        assert len(w.k.list("Deployment", w.ns, f"sluice.dev/query=q{n}")) == 1


def test_a_driver_failing_outside_an_upgrade_is_degraded_with_its_error(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    w.add_query()
    reconcile_query(w.env, w.current())
    pinned = w.status()["plan"]
    drivers.take_over(pinned["hash"], batches=4)
    drivers.fail(pinned["hash"], "broker gone", time="2026-01-01T00:00:05Z")  # after the takeover
    assert reconcile_query(w.env, w.current()) == "Degraded"  # not "Starting"
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "DriverFailed" and "CAST_INVALID_INPUT in step project-1: broker gone" in \
        degraded["message"]
    # a driver that took over after the error runs the query again: the problem is history
    lease = drivers.lease()
    takeover = json.loads(lease["metadata"]["annotations"]["sluice.dev/last-takeover"])
    takeover["time"] = "2026-01-01T00:00:09Z"
    lease["metadata"]["annotations"]["sluice.dev/last-takeover"] = json.dumps(takeover)
    drivers.k.replace(lease)
    assert reconcile_query(w.env, w.current()) == "Starting"


BY_ORDER_SQL = "SELECT order_id, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY order_id"


def driver_env(w: World) -> dict[str, str]:
    container = w.deployment()["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def replace_edit(w: World) -> dict[str, Any]:
    return w.edit(sql=BY_ORDER_SQL, sink={"topic": w.topic, "key": ["order_id"], "outputMode": "update"})


def test_a_replace_hands_off_to_a_new_version_on_its_own_checkpoint(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    w.add_query()
    reconcile_query(w.env, w.current())
    pinned, v1 = w.status()["plan"], w.status()["identity"]
    assert [v["version"] for v in w.status()["versions"]] == [1]
    drivers.take_over(pinned["hash"], batches=10)

    reconcile_query(w.env, replace_edit(w))
    status = w.status()
    rollout = status["rollout"]
    target = rollout["targetHash"]
    assert rollout["step"] == "Verifying" and rollout["strategy"] == "replace"
    assert rollout["decision"] == "replace" and rollout["targetPlanVersion"] == 2
    assert rollout["replaceStrategy"] == "handOff"
    assert "state starts empty: running aggregates restart from zero" in status["lastUpgrade"]["message"]
    assert "where version 1's output ends" in status["lastUpgrade"]["message"]
    # the new drivers run version 2: a checkpoint, group and transactional id of their own, and
    # start where version 1's output ends
    env = driver_env(w)
    assert env["SLUICE_CHECKPOINT"].endswith("/totals/v2") and env["SLUICE_CONSUMER_GROUP"].endswith(".v2")
    assert env["SLUICE_TRANSACTIONAL_ID"].endswith(".v2.tx")
    previous = json.loads(env["SLUICE_PREVIOUS_VERSION"])
    assert previous == {"version": 1, "planHash": pinned["hash"], "checkpoint": v1["checkpointPath"],
                        "consumerGroup": v1["consumerGroup"], "transactionalId": v1["transactionalId"],
                        "sinkTopic": w.topic, "exactlyOnce": False}
    assert status["plan"] == pinned and status["identity"] == v1  # until the gate passes

    drivers.take_over(target, batches=3)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status
    assert status["plan"]["hash"] == target and status["plan"]["version"] == 2
    assert status["plan"]["handOffFrom"] == previous
    assert status["identity"]["checkpointPath"] == env["SLUICE_CHECKPOINT"]
    assert status["lastUpgrade"]["outcome"] == "Succeeded"
    assert status["lastUpgrade"]["checkpoint"] == env["SLUICE_CHECKPOINT"]
    [v2_record, v1_record] = status["versions"]
    assert (v2_record["version"], v2_record["state"], v2_record["planHash"]) == (2, "Running", target)
    assert v2_record["transactionalId"] == env["SLUICE_TRANSACTIONAL_ID"]
    assert v2_record["outputTopic"] == w.topic
    assert v2_record["deadLetterTopics"] == [f"{w.topic}.dlq"]
    assert (v1_record["version"], v1_record["state"]) == (1, "Retired") and v1_record["retiredAt"]
    assert v1_record["checkpointPath"] == v1["checkpointPath"]
    # steady from here: the driver template the new version runs with is kept as it is
    template = w.deployment()["spec"]["template"]
    assert driver_env(w) == env
    reconcile_query(w.env, w.current())
    assert driver_env(w) == env
    assert w.deployment()["spec"]["template"] == template
    # a later in-place edit stays on version 2 (same checkpoint, same environment but the plan)
    reconcile_query(w.env, w.edit(sql=BY_ORDER_SQL.replace("FROM orders", "FROM orders WHERE amount > 0")))
    assert w.status()["rollout"]["strategy"] == "in-place"
    assert driver_env(w)["SLUICE_CHECKPOINT"] == env["SLUICE_CHECKPOINT"]
    assert driver_env(w)["SLUICE_PREVIOUS_VERSION"] == env["SLUICE_PREVIOUS_VERSION"]


def test_a_replace_that_fails_its_gate_resumes_the_old_version(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    w.add_query()
    reconcile_query(w.env, w.current())
    pinned = w.status()["plan"]
    drivers.take_over(pinned["hash"], batches=10)
    template = w.deployment()["spec"]["template"]
    reconcile_query(w.env, replace_edit(w))
    target = w.status()["rollout"]["targetHash"]
    drivers.take_over(target)
    drivers.fail(target, "Kafka broker unreachable")
    reconcile_query(w.env, w.current())
    rollout = w.status()["rollout"]
    assert rollout["step"] == "RollingBack" and rollout["rollback"]["mode"] == "handBack"
    assert "previous version's checkpoint was never written" in rollout["rollback"]["reason"]
    # version 1's drivers start again exactly as they ran (same checkpoint, ids and environment)
    assert w.deployment()["spec"]["template"] == template
    assert RESTORE_REQUEST not in (drivers.lease()["metadata"].get("annotations") or {})
    drivers.take_over(pinned["hash"], batches=1)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["plan"] == pinned
    assert status["lastUpgrade"]["outcome"] == "RolledBack"
    # what version 2 left goes at once: its checkpoint (through version 1's active driver) and its
    # groups; the topic both versions wrote stays
    [v2, _] = status["versions"]
    assert [(v["version"], v["state"]) for v in status["versions"]] == [(2, "RolledBack"), (1, "Running")]
    w.commit_groups(v2["consumerGroup"], f"{v2['consumerGroup']}.eos.77aa")
    assert drivers.clean_up() == (v2["checkpointPath"],)
    reconcile_query(w.env, w.current())
    assert [(v["version"], v["state"]) for v in w.status()["versions"]] == [(1, "Running")]
    assert not {v2["consumerGroup"], f"{v2['consumerGroup']}.eos.77aa"} & w.groups()
    assert w.topic in w.topic_partitions()


def test_a_retired_version_is_cleaned_up_after_retention_across_an_operator_restart(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    w.add_query(cleanup={"retainVersions": 0, "retention": "1h", "deleteTopics": "AfterRetention"})
    reconcile_query(w.env, w.current())
    v1 = w.status()["versions"][0]
    w.commit_groups(v1["consumerGroup"], f"{v1['consumerGroup']}.eos.8a0e")
    drivers.take_over(v1["planHash"], batches=5)
    reconcile_query(w.env, replace_edit(w))
    drivers.take_over(w.status()["rollout"]["targetHash"], batches=3)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert [(v["version"], v["state"]) for v in status["versions"]] == [(2, "Running"), (1, "Retired")]
    assert status["cleanup"] == {"nextDue": "2026-01-01T01:00:00Z"}  # retired now, kept for an hour
    assert {v1["consumerGroup"], f"{v1['consumerGroup']}.eos.8a0e"} <= w.groups()

    # the hour has passed: the active driver is asked to remove version 1's checkpoint
    w.env.clock = lambda: "2026-01-01T01:00:01Z"
    reconcile_query(w.env, w.current())
    assert "waiting for the active driver to remove" in w.status()["cleanup"]["message"]
    assert len(w.status()["versions"]) == 2
    assert drivers.clean_up() == (v1["checkpointPath"],)
    # the operator dies after it deleted the groups, at the plan ConfigMap; a new one finishes
    w.k.fail_once = ("DELETE", f"/configmaps/{v1['configMap']}")
    with pytest.raises(KubeError):
        reconcile_query(w.env, w.current())
    env = fresh_env(w)
    env.clock = w.env.clock
    reconcile_query(env, w.current())
    status = w.status()
    assert [(v["version"], v["state"]) for v in status["versions"]] == [(2, "Running")]
    assert not status.get("cleanup")
    assert not {v1["consumerGroup"], f"{v1['consumerGroup']}.eos.8a0e"} & w.groups()
    assert w.topic in w.topic_partitions()  # version 2 writes to it: never deleted
    assert [cm["metadata"]["name"] for cm in w.of_kind("ConfigMap")] == [status["plan"]["configMap"]]
    reasons = w.reasons()
    assert {"CheckpointRemoved", "ConsumerGroupsDeleted", "PlanConfigMapDeleted",
            "VersionCleanedUp"} <= set(reasons)


def pod_env(dep: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


BACKFILL = {"replaceStrategy": "backfill", "maxLagRecords": 100, "healthBatches": 2}


def test_a_backfill_runs_beside_the_old_version_and_switches_once_caught_up(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    filler = DriverSide(world.k.api, world.ns, role="backfill")
    w.add_query(upgrade=BACKFILL)
    reconcile_query(w.env, w.current())
    pinned, v1 = w.status()["plan"], w.status()["identity"]
    assert w.status()["output"]["topic"] == w.topic
    drivers.take_over(pinned["hash"], batches=10)
    template = w.deployment()["spec"]["template"]

    reconcile_query(w.env, replace_edit(w))
    status = w.status()
    rollout = status["rollout"]
    target, versioned = rollout["targetHash"], f"{w.topic}-v2"
    assert (rollout["step"], rollout["replaceStrategy"]) == ("Backfilling", "backfill")
    assert rollout["outputTopic"] == versioned
    assert "re-reads its sources from the earliest offsets" in status["lastUpgrade"]["message"]
    # the old version keeps serving, untouched; the new one runs beside it on its own everything
    assert w.deployment()["spec"]["template"] == template and status["plan"] == pinned
    env = pod_env(w.deployment("backfill"))
    assert env["SLUICE_CHECKPOINT"].endswith("/totals/v2") and env["SLUICE_CONSUMER_GROUP"].endswith(".v2")
    assert env["SLUICE_LEASE_NAME"] == "totals-backfill" and env["SLUICE_OUTPUT_TOPIC"] == versioned
    assert env["SLUICE_START_FROM"] == "earliest" and "SLUICE_PREVIOUS_VERSION" not in env
    assert w.deployment("backfill")["spec"]["replicas"] == 1
    assert versioned in w.topic_partitions()  # created like the sink topic, before the drivers start

    # its gate passed, but it is still far behind: the old version keeps serving
    filler.take_over(target, batches=3, lag=5000)
    reconcile_query(w.env, w.current())
    rollout = w.status()["rollout"]
    assert rollout["step"] == "Backfilling" and rollout["lagRecords"] == 5000
    assert "5000 records behind" in rollout["message"]
    # caught up: the backfill stops first (one writer on version 2's checkpoint), then the drivers move
    filler.progress(batches=5, lag=40)
    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] in ("Applying", "Verifying")
    assert "BackfillCaughtUp" in w.reasons()
    eventually(w.backfill_gone, timeout=60, what="the backfill's Deployment and pods are gone")
    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "Verifying"
    assert w.k.get("Lease", w.ns, "totals-backfill") is None
    env2 = driver_env(w)
    assert env2["SLUICE_CHECKPOINT"] == env["SLUICE_CHECKPOINT"] and env2["SLUICE_OUTPUT_TOPIC"] == versioned
    assert "SLUICE_START_FROM" not in env2 and "SLUICE_PREVIOUS_VERSION" not in env2
    assert w.status()["output"]["topic"] == w.topic  # until the new version passed its gate here

    drivers.take_over(target, batches=2)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["lastUpgrade"]["outcome"] == "Succeeded"
    assert status["plan"]["version"] == 2 and status["plan"]["outputTopic"] == versioned
    assert "handOffFrom" not in status["plan"]
    assert status["output"]["topic"] == versioned and "OutputSwitched" in w.reasons()
    [v2_record, v1_record] = status["versions"]
    assert (v2_record["outputTopic"], v2_record["deadLetterTopics"]) == (versioned, [f"{versioned}.dlq"])
    assert (v1_record["state"], v1_record["outputTopic"], v1_record["checkpointPath"]) == (
        "Retired", w.topic, v1["checkpointPath"])
    # a later in-place edit stays on version 2 and its topic
    reconcile_query(w.env, w.edit(sql=BY_ORDER_SQL.replace("FROM orders", "FROM orders WHERE amount > 0")))
    assert w.status()["rollout"]["strategy"] == "in-place"
    assert driver_env(w)["SLUICE_OUTPUT_TOPIC"] == versioned


def test_a_backfill_that_fails_its_gate_is_removed_with_what_it_left(world: World) -> None:
    w, drivers = world, DriverSide(world.k.api, world.ns)
    filler = DriverSide(world.k.api, world.ns, role="backfill")
    w.add_query(upgrade=BACKFILL)
    reconcile_query(w.env, w.current())
    pinned = w.status()["plan"]
    drivers.take_over(pinned["hash"], batches=10)
    template = w.deployment()["spec"]["template"]
    reconcile_query(w.env, replace_edit(w))
    rollout = w.status()["rollout"]
    target, versioned = rollout["targetHash"], rollout["outputTopic"]
    group = pod_env(w.deployment("backfill"))["SLUICE_CONSUMER_GROUP"]
    w.commit_groups(group, f"{group}.eos.1f2e")
    filler.take_over(target)
    filler.fail(target, "Kafka broker unreachable")
    reconcile_query(w.env, w.current())
    # discarded: done in this pass when the garbage collector already took the backfill's pod (it
    # was never scheduled), else once it is gone
    status = w.status()
    if "rollout" in status:
        assert status["rollout"]["rollback"]["mode"] == "discard"
    eventually(w.backfill_gone, timeout=60, what="the backfill's Deployment and pods are gone")
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["lastUpgrade"]["outcome"] == "RolledBack" and status["plan"] == pinned
    assert status["lastUpgrade"]["rollback"] == "discard"
    assert w.deployment()["spec"]["template"] == template  # version 1 never stopped
    assert [(v["version"], v["state"]) for v in status["versions"]] == [(2, "RolledBack"), (1, "Running")]
    # what version 2 left goes at once, no retention: its checkpoint (through the active driver),
    # its groups and its versioned topic
    assert drivers.clean_up() == (status["versions"][0]["checkpointPath"],)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert [(v["version"], v["state"]) for v in status["versions"]] == [(1, "Running")]
    assert not {group, f"{group}.eos.1f2e"} & w.groups()
    assert versioned not in w.topic_partitions() and w.topic in w.topic_partitions()
    assert status["output"]["topic"] == w.topic
