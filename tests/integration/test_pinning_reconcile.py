"""Pinned plans and engines, reconciled against the real API server.

What an operator upgrade, an engine change and a QueryCluster edit do to running queries: the
operator's reconcile and the cluster's rollout run in-process with the product's REST client on the
test run's real kube-apiserver (no kubelet: pods stay Pending); the drivers' side (Lease records,
pod errors) is written the way ``sluice_runtime`` writes it (``DriverSide``). The end-to-end tests
(tests/e2e/test_engine_upgrades.py) run the same through driver pods.
"""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.driverreport import BACKSTOP, RESTORE_REQUEST, Backstop, RestoreRequest
from sluice.core.plan.model import Plan
from sluice.core.spec import QuerySpec
from sluice.operator.env import Env
from sluice.operator.reconcile import reconcile_query
from sluice.operator.waves import ADMITTED, roll_fleet

from tests.support.drivers import DriverSide
from tests.support.world import SQL, World

pytestmark = pytest.mark.integration

IMAGE_B = "registry.invalid/sluice-runtime:b"
#: a stateless query (the world's default is a stateful count per customer)
STATELESS = "SELECT order_id, customer, amount FROM orders WHERE amount > 0"


class NewCompilerEnv(Env):
    """An operator whose compiler plans the same SQL differently: every source gets a rate limit
    (as a new default of a later compiler would)."""

    def compile(self, spec: Any, target: Any = None) -> Plan:
        query = spec if isinstance(spec, QuerySpec) else QuerySpec.model_validate(spec)
        limited = query.model_copy(update={"sources": [s.model_copy(update={"max_offsets_per_trigger": 5000})
                                                       for s in query.sources]})
        return compile_query(limited, target)


def new_compiler(w: World) -> NewCompilerEnv:
    env = NewCompilerEnv(kube=w.k, events=w.env.events, clock=w.env.clock, metrics=w.env.metrics,
                         kafka_timeout=3.0)
    return env


def engine_of(w: World, name: str = "totals") -> str:
    return str(w.status(name)["engine"]["digest"])


def container(w: World) -> dict[str, Any]:
    return dict(w.deployment()["spec"]["template"]["spec"]["containers"][0])


def env_of(w: World) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container(w)["env"]}


def running(w: World, name: str = "totals", **spec: Any) -> dict[str, Any]:
    """A query deployed and run by one driver term."""
    w.add_query(name, **spec)
    reconcile_query(w.env, w.current(name))
    status = w.status(name)
    DriverSide(w.k.api, w.ns, name).take_over(status["plan"]["hash"], batches=5,
                                              engine=status["engine"]["digest"])
    return status


def cluster_status(w: World) -> dict[str, Any]:
    obj = w.k.get("QueryCluster", w.ns, "default")
    assert obj is not None
    return dict(obj.get("status") or {})


def roll(w: World) -> dict[str, Any]:
    obj = w.k.get("QueryCluster", w.ns, "default")
    assert obj is not None
    roll_fleet(w.env, obj)
    return cluster_status(w)["rollout"]


# -- an operator upgrade never re-plans ---------------------------------------------------------


def test_a_new_compiler_keeps_the_pinned_plan_and_offers_the_replan(world: World) -> None:
    w = world
    first = running(w)
    pinned, deployment = first["plan"], w.deployment()
    assert first["plan"]["inputs"]["query"] and first["plan"]["inputs"]["engine"]
    assert first["engine"]["image"] == "sluice-runtime:0.1.0" and first["engine"]["sparkVersion"] == "4.3.0"

    upgraded = new_compiler(w)  # the operator restarted with a compiler that plans the SQL differently
    assert reconcile_query(upgraded, w.current()) == "Starting"
    status = w.status()
    assert status["plan"]["hash"] == pinned["hash"] and "rollout" not in status
    assert w.deployment()["spec"] == deployment["spec"]  # no pod of the query moves
    replan = status["plan"]["replan"]
    assert replan["decision"] == "in-place" and replan["category"] == "transparent"
    assert replan["hash"] != pinned["hash"] and "maxOffsetsPerTrigger" in " ".join(replan["reasons"])
    condition = next(c for c in status["conditions"] if c["type"] == "ReplanAvailable")
    assert condition["status"] == "True" and condition["reason"] == "CompilerChanged"
    # reconciling again changes nothing (no rollout, no write of the plan)
    reconcile_query(upgraded, w.current())
    assert w.status()["plan"] == status["plan"]

    # an old answer (a hash this compiler does not make) accepts nothing
    stale = {"metadata": {"annotations": {"sluice.dev/replan": "0" * 12}}}
    w.k.patch("StreamingQuery", w.ns, "totals", stale)
    reconcile_query(upgraded, w.current())
    assert "rollout" not in w.status()

    # the user accepts exactly the offered plan: an in-place upgrade behind the gate
    w.k.patch("StreamingQuery", w.ns, "totals",
              {"metadata": {"annotations": {"sluice.dev/replan": replan["hash"][:12]}}})
    reconcile_query(upgraded, w.current())
    status = w.status()
    assert status["rollout"]["step"] == "Verifying" and status["rollout"]["targetHash"] == replan["hash"]
    assert status["lastUpgrade"]["cause"] == "replan"
    DriverSide(w.k.api, w.ns).take_over(replan["hash"], batches=3, engine=engine_of(w))
    reconcile_query(upgraded, w.current())
    status = w.status()
    assert status["plan"]["hash"] == replan["hash"] and "replan" not in status["plan"]
    assert next(c for c in status["conditions"] if c["type"] == "ReplanAvailable")["status"] == "False"

    # and the old operator (a downgrade) keeps that plan too: it offers its own, does nothing
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["plan"]["hash"] == replan["hash"] and "rollout" not in status
    assert status["plan"]["replan"]["hash"] == pinned["hash"]


def test_a_user_edit_is_planned_by_the_current_compiler(world: World) -> None:
    w = world
    running(w)
    upgraded = new_compiler(w)
    w.edit(sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 0"))
    reconcile_query(upgraded, w.current())
    status = w.status()
    rollout = status["rollout"]
    assert rollout["category"] == "data-selection" and status["lastUpgrade"]["cause"] == "spec"
    # the edit's plan is the current compiler's (with its rate limit), not the old compiler's
    reasons = " ".join(status["lastUpgrade"]["reasons"])
    assert "maxOffsetsPerTrigger" in reasons
    old_compiler = compile_query(QuerySpec.model_validate(w.current()["spec"]), CompileTarget())
    assert old_compiler.hash != rollout["targetHash"]


def test_a_whitespace_edit_keeps_the_plan_and_records_its_inputs(world: World) -> None:
    w = world
    first = running(w)
    w.edit(sql=SQL + "\n   ")
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["plan"]["hash"] == first["plan"]["hash"] and "rollout" not in status
    assert status["plan"]["inputs"]["query"] != first["plan"]["inputs"]["query"]


# -- engine upgrades: a QueryCluster change reaches its queries in waves, each gated ------------


def test_an_image_change_rolls_the_queries_one_by_one_behind_their_gates(world: World) -> None:
    w = world
    for name in ("a", "b"):
        running(w, name)
    old_engine = engine_of(w, "a")
    w.edit_cluster(image=IMAGE_B)
    for name in ("a", "b"):  # the fan-out: nothing moves before the cluster admits the query
        reconcile_query(w.env, w.current(name))
        assert engine_of(w, name) == old_engine and "rollout" not in w.status(name)
        assert "waiting for the QueryCluster's rollout" in w.status(name)["engine"]["waiting"]

    wave = roll(w)  # the default: one query at a time, in name order
    assert wave["state"] == "Progressing" and wave["admitted"] == ["a"] and wave["pending"] == ["a", "b"]
    assert w.current("a")["metadata"]["annotations"][ADMITTED] == wave["target"][:12]
    assert ADMITTED not in (w.current("b")["metadata"].get("annotations") or {})

    reconcile_query(w.env, w.current("a"))
    status = w.status("a")
    rollout = status["rollout"]
    assert rollout["step"] == "Verifying" and rollout["targetEngine"]["image"] == IMAGE_B
    assert rollout["targetHash"] == status["plan"]["hash"]  # the plan stays: an engine upgrade
    assert status["lastUpgrade"]["cause"] == "cluster" and status["lastUpgrade"]["category"] == "transparent"
    deployment = w.k.get("Deployment", w.ns, "a-driver")
    assert deployment is not None
    pod = deployment["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == IMAGE_B
    assert pod["metadata"]["labels"]["sluice.dev/engine"] == wave["target"][:12]
    drivers = DriverSide(w.k.api, w.ns, "a")
    drivers.take_over(status["plan"]["hash"], batches=50, engine=old_engine)  # the old engine: no pass
    reconcile_query(w.env, w.current("a"))
    assert w.status("a")["rollout"]["step"] == "Verifying"
    assert roll(w)["admitted"] == ["a"]  # b waits for a
    drivers.take_over(status["plan"]["hash"], batches=3, engine=wave["target"])
    reconcile_query(w.env, w.current("a"))
    status = w.status("a")
    assert "rollout" not in status and status["engine"]["digest"] == wave["target"]
    assert status["engine"]["image"] == IMAGE_B and status["lastUpgrade"]["outcome"] == "Succeeded"
    assert container_of(w, "a")["image"] == IMAGE_B  # and the drivers stay there
    reconcile_query(w.env, w.current("a"))
    pod = (w.k.get("Deployment", w.ns, "a-driver") or {})["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == IMAGE_B
    assert pod["metadata"]["labels"]["sluice.dev/engine"] == wave["target"][:12]

    wave = roll(w)
    assert wave["updated"] == ["a"] and wave["admitted"] == ["b"]
    reconcile_query(w.env, w.current("b"))
    DriverSide(w.k.api, w.ns, "b").take_over(w.status("b")["plan"]["hash"], batches=3, engine=wave["target"])
    reconcile_query(w.env, w.current("b"))
    wave = roll(w)
    assert wave["state"] == "Complete" and wave["updated"] == ["a", "b"]
    assert ("RolloutComplete" in {reason for reason, _ in w.events})


def test_a_failed_gate_rolls_back_and_halts_the_wave(world: World) -> None:
    w = world
    for name in ("a", "b"):
        running(w, name)
    old_engine = engine_of(w, "a")
    w.edit_cluster(image=IMAGE_B, upgrade={"maxConcurrentRollouts": 1})
    wave = roll(w)
    reconcile_query(w.env, w.current("a"))
    plan_hash = w.status("a")["plan"]["hash"]
    DriverSide(w.k.api, w.ns, "a").fail(plan_hash, "the image is broken", engine=wave["target"],
                                       error_class="PlanIncompatible")
    # the new engine never held the Lease: the old engine's driver, which never stopped, is the
    # stable plan running again (hand back, at once)
    reconcile_query(w.env, w.current("a"))
    status = w.status("a")
    assert status["lastUpgrade"]["outcome"] == "RolledBack"
    assert status["lastUpgrade"]["rollback"] == "handBack"
    assert status["engine"]["digest"] == old_engine
    assert container_of(w, "a")["image"] == "sluice-runtime:0.1.0"

    wave = roll(w)
    assert wave["state"] == "Halted" and wave["failure"]["query"] == "a"
    assert "PlanIncompatible" in wave["failure"]["message"] and wave["admitted"] == []
    assert "RolloutHalted" in {reason for reason, _ in w.events}
    # the queries that wait are told (their status says why they wait: the reconcile the poke starts)
    assert w.current("b")["metadata"]["annotations"][ADMITTED] == f"{wave['target'][:12]}-halted"
    reconcile_query(w.env, w.current("b"))
    assert engine_of(w, "b") == old_engine and "halted" in w.status("b")["engine"]["waiting"]
    # a (held back) is not tried again while the cluster asks for the same engine
    reconcile_query(w.env, w.current("a"))
    assert "rollout" not in w.status("a")

    # the user reverts the cluster: everybody is on its engine again, the rollout is complete
    w.edit_cluster(image=None)
    wave = roll(w)
    assert wave["state"] == "Complete" and wave["updated"] == ["a", "b"]


def container_of(w: World, name: str) -> dict[str, Any]:
    deployment = w.k.get("Deployment", w.ns, f"{name}-driver")
    assert deployment is not None
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_a_rollback_from_an_engine_that_ran_restores_the_backstop(world: World) -> None:
    w = world
    running(w)
    old_engine = engine_of(w)
    w.edit_cluster(image=IMAGE_B)
    wave = roll(w)
    reconcile_query(w.env, w.current())
    plan_hash = w.status()["plan"]["hash"]
    drivers = DriverSide(w.k.api, w.ns)
    epoch = drivers.take_over(plan_hash, batches=1, engine=wave["target"])
    lease = drivers.lease()
    lease["metadata"]["annotations"][BACKSTOP] = Backstop(
        epoch=epoch - 1, plan_hash=plan_hash, to_plan=plan_hash, time="2026-01-01T00:00:02Z",
        engine=old_engine, to_engine=wave["target"]).to_json()
    drivers.k.replace(lease)
    drivers.fail(plan_hash, "broke after its first batch", engine=wave["target"], time="2026-01-01T00:00:03Z")
    reconcile_query(w.env, w.current())
    rollout = w.status()["rollout"]
    assert rollout["step"] == "RollingBack" and rollout["rollback"]["mode"] == "restore"
    request = RestoreRequest.from_json(drivers.lease()["metadata"]["annotations"][RESTORE_REQUEST])
    assert request is not None and request.epoch == epoch - 1 and request.engine == old_engine
    assert container(w)["image"] == "sluice-runtime:0.1.0"


def test_a_spark_conf_change_that_only_tunes_is_an_in_place_engine_upgrade(world: World) -> None:
    w = world
    first = running(w)
    w.edit_cluster(sparkConf={"spark.sql.streaming.minBatchesToRetain": "50"})
    roll(w)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["rollout"]["step"] == "Verifying"
    assert status["rollout"]["targetHash"] == first["plan"]["hash"]
    assert "spark.sql.streaming.minBatchesToRetain" in " ".join(status["lastUpgrade"]["reasons"])


def test_a_pinned_spark_conf_change_is_classified_like_an_edit(world: World) -> None:
    w = world
    running(w, "totals", upgrade={"allowReplace": False})  # stateful (a count per customer)
    running(w, "plain", sql=STATELESS, sink={"topic": f"{w.topic}-plain"})
    w.edit_cluster(sparkConf={"spark.sql.session.timeZone": "Europe/Paris"},
                   upgrade={"maxConcurrentRollouts": 2})
    wave = roll(w)
    assert wave["admitted"] == ["plain", "totals"]
    for name in ("plain", "totals"):
        reconcile_query(w.env, w.current(name))
    refused = w.status("totals")
    assert refused["rollout"]["step"] == "Rejected" and refused["lastUpgrade"]["category"] == "topology"
    assert "spark.sql.session.timeZone" in " ".join(refused["lastUpgrade"]["reasons"])
    carried = w.status("plain")
    assert carried["rollout"]["step"] == "Verifying"
    assert carried["lastUpgrade"]["category"] == "data-selection"
    plan = w.k.get("ConfigMap", w.ns, carried["rollout"]["targetConfigMap"])
    assert plan is not None and '"spark.sql.session.timeZone": "Europe/Paris"' in plan["data"]["plan.json"]
    assert roll(w)["refused"] == ["totals"]


def test_spark_versions_move_up_within_a_major_only(world: World) -> None:
    w = world
    first = running(w)
    w.edit_cluster(sparkVersion="4.4.0")
    roll(w)
    reconcile_query(w.env, w.current())
    status = w.status()
    rollout = status["rollout"]
    assert rollout["step"] == "Verifying" and rollout["targetHash"] != first["plan"]["hash"]
    plan = w.k.get("ConfigMap", w.ns, rollout["targetConfigMap"])
    assert plan is not None and '"sparkVersion": "4.4.0"' in plan["data"]["plan.json"]
    assert status["lastUpgrade"]["category"] == "transparent"



def test_a_spark_downgrade_is_refused(world: World) -> None:
    w = world
    running(w)
    w.edit_cluster(sparkVersion="4.2.0")
    roll(w)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["rollout"]["step"] == "Rejected"
    assert "downgrade" in " ".join(status["lastUpgrade"]["reasons"])
    assert roll(w)["refused"] == ["totals"]


def test_the_new_default_image_of_an_upgraded_operator_is_rolled_out_in_waves(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries whose QueryCluster names no image run the operator's default runtime image; an
    operator of a later version (another default) moves them there like any engine change."""
    import sluice.operator.desired
    import sluice.operator.waves

    w = world
    for name in ("a", "b"):
        running(w, name)
    before = {name: container_of(w, name)["image"] for name in ("a", "b")}
    assert before == {"a": "sluice-runtime:0.1.0", "b": "sluice-runtime:0.1.0"}
    for module in (sluice.operator.desired, sluice.operator.waves):
        monkeypatch.setattr(module, "default_image", lambda: "sluice-runtime:0.2.0")
    for name in ("a", "b"):  # the operator restarted: every query resumes, nothing moves yet
        reconcile_query(w.env, w.current(name))
        assert container_of(w, name)["image"] == "sluice-runtime:0.1.0" and "rollout" not in w.status(name)
    wave = roll(w)
    assert wave["image"] == "sluice-runtime:0.2.0" and wave["admitted"] == ["a"]
    reconcile_query(w.env, w.current("a"))
    assert w.status("a")["rollout"]["targetEngine"]["image"] == "sluice-runtime:0.2.0"
    assert container_of(w, "a")["image"] == "sluice-runtime:0.2.0"
    assert container_of(w, "b")["image"] == "sluice-runtime:0.1.0"
