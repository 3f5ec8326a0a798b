"""The wave planner of a QueryCluster's rollout (pure): who may move to the cluster's engine now."""

from __future__ import annotations

from sluice.core.fleet import QueryFleetState, plan_wave

T, OLD = "t" * 64, "o" * 64


def q(name: str, engine: str | None = OLD, **kw: object) -> QueryFleetState:
    return QueryFleetState(name=name, engine=engine, **kw)  # type: ignore[arg-type]


def test_queries_are_admitted_in_name_order_at_most_n_at_a_time() -> None:
    wave = plan_wave(T, [q("c"), q("a"), q("b")], max_concurrent=2)
    assert wave.state == "Progressing" and wave.admitted == ["a", "b"] and wave.pending == ["a", "b", "c"]
    assert wave.total == 3 and "0 of 3" in wave.message


def test_queries_in_progress_keep_their_slot_and_finished_ones_free_it() -> None:
    queries = [q("a", engine=T), q("b", rollout_engine=T), q("c"), q("d")]
    wave = plan_wave(T, queries, max_concurrent=2)
    assert wave.updated == ["a"] and wave.in_progress == ["b"] and wave.admitted == ["b", "c"]
    wave = plan_wave(T, [q("a", engine=T), q("b", engine=T), q("c", rollout_engine=T), q("d")], 1)
    assert wave.admitted == ["c"]


def test_a_failure_halts_the_rollout_and_the_halt_sticks() -> None:
    failed = q("a", last_engine=T, last_outcome="RolledBack", last_message="PlanIncompatible: Spark 4.4")
    wave = plan_wave(T, [failed, q("b"), q("c")], max_concurrent=1)
    assert wave.state == "Halted" and wave.admitted == [] and wave.failed == ["a"]
    assert "a failed its upgrade (PlanIncompatible: Spark 4.4)" in wave.message
    # the failed query was edited since (its lastUpgrade moved on): the halt stays for this target
    wave = plan_wave(T, [q("a"), q("b"), q("c")], 1, failure=("a", "PlanIncompatible: Spark 4.4"))
    assert wave.state == "Halted" and wave.admitted == []
    # a query in progress when the halt came goes on (its own gate decides it)
    wave = plan_wave(T, [failed, q("b", rollout_engine=T)], 2)
    assert wave.state == "Halted" and wave.admitted == ["b"]


def test_an_older_failure_does_not_halt_a_new_target() -> None:
    other = q("a", last_engine="x" * 64, last_outcome="RolledBack")
    assert plan_wave(T, [other], 1).admitted == ["a"]


def test_refused_queries_stay_where_they_are_and_the_rest_goes_on() -> None:
    queries = [q("a", rollout_engine=T, rollout_waiting=True), q("b", last_engine=T, last_outcome="Rejected"),
               q("c")]
    wave = plan_wave(T, queries, 1)
    assert wave.refused == ["a", "b"] and wave.admitted == ["c"]
    wave = plan_wave(T, [*queries[:2], q("c", engine=T)], 1)
    assert wave.state == "Complete" and "2 refused it" in wave.message


def test_new_and_updated_queries_complete_it() -> None:
    wave = plan_wave(T, [q("a", engine=None), q("b", engine=T)], 1)
    assert wave.state == "Complete" and wave.admitted == [] and wave.updated == ["a", "b"]
    assert plan_wave(T, [], 1).state == "Complete"
