"""Rollback to an earlier plan's query (pure): the plan returned to, the kept query, the spec patch,
and the request annotation the Argo CD action writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.core import rollback
from sluice.core.compiler import compile_query
from sluice.core.records import QueryRecords, UpgradeRecord
from sluice.core.rollback import RollbackError
from sluice.core.spec import QuerySpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import builders

from tests.support import records
from tests.support.operator_fixtures import SQL, context, query_spec

SQL_WHERE = SQL.replace("FROM orders", "FROM orders WHERE amount > 10")
A, B, C = "a" * 64, "b" * 64, "c" * 64
T1 = "2026-01-01T00:05:00Z"


def record(from_hash: str, to_hash: str, outcome: str = "Succeeded") -> UpgradeRecord:
    return records.upgrade(to_hash, outcome, fromHash=from_hash, category="data-selection", time=T1)


def test_a_request_waits_until_the_operator_marks_it_done() -> None:
    assert rollback.pending_request(None) is None
    assert rollback.pending_request({}) is None
    asked = {rollback.ROLLBACK_REQUEST: "2026-03-07T12:00:00Z"}
    assert rollback.pending_request(asked) == "2026-03-07T12:00:00Z"
    done = {**asked, rollback.ROLLBACK_DONE: "2026-03-07T12:00:00Z"}
    assert rollback.pending_request(done) is None
    # a new request (the action run again) waits again
    assert rollback.pending_request({**done, rollback.ROLLBACK_REQUEST: "2026-03-07T12:00:00Z-2"}) == (
        "2026-03-07T12:00:00Z-2")


def test_every_step_whose_edit_can_be_undone_returns_to_the_plan_it_started_from() -> None:
    for step in sorted(rollback.UNDONE_STEPS):
        status = QueryRecords(plan=records.pinned(B), rollout=records.rollout(step, C, fromHash=B),
                              history=[record(A, B)])
        assert rollback.choose_target(status)[0] == B, step
    # a rollout that is deploying a first plan or done undoes nothing: back before the newest upgrade
    status = QueryRecords(plan=records.pinned(B), rollout=records.rollout("Deploying", B, fromHash=None),
                          history=[record(A, B)])
    assert rollback.choose_target(status)[0] == A


def test_why_a_plan_config_map_is_missing() -> None:
    status = QueryRecords(plan=records.pinned(B), history=[record(A, B)])
    gone = rollback.missing_config_map(A, "m", status, "totals")
    assert "is gone: the clean-up of retired versions" in gone
    assert "names no such plan" in rollback.missing_config_map(C, "m", status, "totals")



def test_the_plan_to_return_to() -> None:
    status = QueryRecords(plan=records.pinned(B), history=[record(A, B), record(C, A)])
    assert rollback.choose_target(status, None)[0] == A
    assert rollback.choose_target(status, "cccc")[0] == C
    assert rollback.choose_target(status, "d" * 12)[0] == "d" * 12  # looked up by its ConfigMap anyway
    # an upgrade in flight or waiting: back to the plan that ran when it began (the edit back cancels it)
    flight = status.model_copy(update={"rollout": records.rollout("Verifying", C, fromHash=B)})
    target, why = rollback.choose_target(flight, None)
    assert target == B and "Verifying" in why
    with pytest.raises(RollbackError, match="no upgrade history"):
        rollback.choose_target(QueryRecords(plan=records.pinned(B)), None)
    with pytest.raises(RollbackError, match="expected a plan hash"):
        rollback.choose_target(status, "not-a-hash")
    with pytest.raises(RollbackError, match="no plan of the query's status"):
        rollback.choose_target(status, "dddd")
    with pytest.raises(RollbackError, match="several plans"):
        rollback.choose_target(QueryRecords(history=[record("abcd1" + "1" * 59, "abcd2" + "2" * 59)]),
                               "abcd")


def kept_of(spec: dict[str, Any]) -> dict[str, Any]:
    """What the operator keeps in a plan ConfigMap for ``spec`` (through the real builder)."""
    ctx = context(spec=spec)
    plan = compile_query(ctx.spec.query())
    return rollback.kept_spec(builders.plan_config_map(ctx, plan.hash, plan.to_json()))


def test_the_rollback_patch_sets_the_query_fields_back_and_nothing_else() -> None:
    old = query_spec()
    kept = kept_of(old)
    assert sorted(kept) == sorted(rollback.query_fields()) == sorted(
        ["sources", "sql", "sink", "trigger", "shufflePartitions"])
    edited = query_spec(sql=SQL_WHERE, trigger={}, sink={"topic": "totals", "key": ["customer"],
                        "outputMode": "update", "partitions": 6}, suspend=True,
                        upgrade={"allowReplace": False}, resources={"executors": 2})
    patch = rollback.spec_patch(edited, kept)
    assert patch["sql"] == SQL
    assert patch["trigger"] == {"processingTime": "5 seconds"}
    assert patch["sink"] == {"partitions": None}
    assert not {"suspend", "upgrade", "resources", "cleanup"} & set(patch)
    back = rollback.apply_merge_patch(edited, patch)
    assert back["suspend"] is True and back["upgrade"] == {"allowReplace": False}  # untouched
    assert "partitions" not in back["sink"]
    # what the patched spec compiles to is the old plan
    assert compile_query(StreamingQuerySpec.model_validate(back).query()).hash == compile_query(
        QuerySpec.model_validate(old)).hash
    assert rollback.spec_patch(back, kept) == {}  # nothing left to patch


def test_defaults_written_out_on_one_side_only_are_no_difference() -> None:
    kept = kept_of(query_spec())  # the model's dump: every default written out
    assert rollback.spec_patch(query_spec(), kept) == {}
    assert rollback.spec_patch(query_spec(shufflePartitions=8), kept) == {}
    assert rollback.spec_patch(query_spec(shufflePartitions=4), kept) == {"shufflePartitions": 8}


def test_a_field_the_old_spec_did_not_have_is_removed() -> None:
    kept = {"sources": [], "sql": "x", "sink": {"topic": "t"}}
    patch = rollback.spec_patch({"sql": "y", "sink": {"topic": "t"}, "shufflePartitions": 4, "suspend": True},
                                kept)  # (a kept spec the model refuses: compared as written)
    assert patch == {"sql": "x", "sources": [], "shufflePartitions": None}
    sources = query_spec()["sources"]
    kept = {"sources": sources, "sql": "x", "sink": {"topic": "t"}}
    patch = rollback.spec_patch({"sources": sources, "sql": "x", "sink": {"topic": "t", "key": ["k"]},
                                 "trigger": {"processingTime": "1 second"}}, kept)
    assert patch == {"sink": {"key": None}, "trigger": None}


def test_a_config_map_without_a_usable_spec_is_refused_naming_it() -> None:
    cm = {"metadata": {"name": "totals-plan-aaaaaaaaaaaa"}, "data": {"plan.json": "{}"}}
    with pytest.raises(RollbackError, match=r"-aaaaaaaaaaaa has no spec\.json: .*operator version"):
        rollback.kept_spec(cm)
    with pytest.raises(RollbackError, match="not JSON"):
        rollback.kept_spec({**cm, "data": {"spec.json": "{"}})
    bad = json.dumps({"sources": [], "sql": "SELECT 1", "sink": {"topic": "t"}})
    with pytest.raises(RollbackError, match=r"spec.sources: List should have at least 1 item"):
        rollback.kept_spec({**cm, "data": {"spec.json": bad}})
