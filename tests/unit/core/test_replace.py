"""Replace with hand-off (pure): the previous version's description, where the new version starts,
what a new checkpoint costs, the rollout it records and the inventory of versions."""

from __future__ import annotations

import json

import pytest
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.naming import QueryIdentity
from sluice.core.plan.model import Plan
from sluice.core.records import PreviousVersion as PreviousRecord
from sluice.core.replace import (
    PreviousVersion,
    PreviousVersionError,
    last_output_batch,
    merged_offsets,
    parse_offsets_log,
    previous_version,
    starting_offsets,
    state_reset_note,
)
from sluice.core.rollout import (
    HAND_BACK,
    Step,
    classified_rollout,
    completed_plan,
    executes_automatically,
    rollback_mode,
)
from sluice.core.versions import dead_letter_topics, version_record, with_running

from tests.support import paths, records
from tests.support.classify_plans import agg_plan, join_plan, stateless_plan

CORPUS = paths.CORPUS / "compile" / "valid"
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
A, B = "a" * 64, "b" * 64
PINNED_A = records.pinned(A)
PREVIOUS = PreviousVersion(version=1, plan_hash=A, checkpoint="/var/lib/sluice/state/s/ns/q/v1",
                           consumer_group="s.ns.q.v1", transactional_id="s.ns.q.v1.tx", sink_topic="out",
                           exactly_once=True)
#: the same version as the status records it (``status.rollout.previous``, ``status.plan.handOffFrom``)
PREVIOUS_RECORD = PreviousRecord.model_validate(PREVIOUS.to_dict())

# an offsets log as Spark writes it: version, batch metadata, one line per source
OFFSETS_LOG = "\n".join([
    "v1",
    json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": "8"}}),
    json.dumps({"orders": {"1": 17, "0": 42}}),
    json.dumps({"payments": {"0": 5}}),
])


def test_the_previous_version_travels_as_json_and_bad_fields_are_named() -> None:
    assert PreviousVersion.from_json(PREVIOUS.to_json()) == PREVIOUS
    bad = {**PREVIOUS.to_dict(), "transactionalId": ""}
    with pytest.raises(PreviousVersionError, match=r"SLUICE_PREVIOUS_VERSION.transactionalId"):
        PreviousVersion.from_dict(bad)
    with pytest.raises(PreviousVersionError, match=r"status.plan.handOffFrom.version"):
        PreviousVersion.from_dict({**PREVIOUS.to_dict(), "version": True}, "status.plan.handOffFrom")
    with pytest.raises(PreviousVersionError, match="not JSON"):
        PreviousVersion.from_json("{")


def test_previous_version_from_a_plan() -> None:
    plan = agg_plan()
    prev = previous_version(version=3, plan=plan, plan_hash=A, checkpoint="/c/v3", consumer_group="g.v3",
                            transactional_id="g.v3.tx")
    assert prev.sink_topic == plan.sink.topic and prev.exactly_once == (plan.sink.delivery == "exactlyOnce")


def test_an_offsets_log_gives_the_end_offsets_per_source() -> None:
    assert parse_offsets_log(OFFSETS_LOG) == [{"orders": {0: 42, 1: 17}}, {"payments": {0: 5}}]
    assert parse_offsets_log("v1\n{}\n-\n") == [None]
    with pytest.raises(ValueError, match="line 1"):
        parse_offsets_log("")
    with pytest.raises(ValueError, match="line 3: not JSON"):
        parse_offsets_log("v1\n{}\n{oops\n")


def test_a_topic_read_twice_starts_at_the_lower_offset() -> None:
    merged = merged_offsets([{"t": {0: 10, 1: 3}}, None, {"t": {0: 7, 1: 9}}])
    assert merged == {"t": {0: 7, 1: 3}}


def test_starting_offsets_cover_every_partition_and_name_new_topics() -> None:
    found, missing = starting_offsets(["orders", "refunds"], merged_offsets(parse_offsets_log(OFFSETS_LOG)))
    assert json.loads(found["orders"]) == {"orders": {"0": 42, "1": 17}}
    assert missing == ["refunds"]


@pytest.mark.parametrize(("exactly_once", "marker", "last_commit", "expected"), [
    (True, 8, 6, 7),  # the marker is ahead of the checkpoint (crash after the transaction)
    (True, 7, 6, 6),
    (True, None, 6, 6),  # no marker yet read: the commit log
    (True, 0, None, None),
    (False, 9, 4, 4),  # at-least-once has no marker: the commit log
    (False, None, None, None),
])
def test_the_last_batch_with_output(exactly_once: bool, marker: int | None, last_commit: int | None,
                                    expected: int | None) -> None:
    assert last_output_batch(exactly_once=exactly_once, marker=marker, last_commit=last_commit) == expected


def corpus_plan(name: str) -> Plan:
    return compile_query(parse_manifest((CORPUS / f"{name}.yaml").read_text()).spec)


def test_what_an_empty_checkpoint_costs_the_query() -> None:
    assert "windows open at the switch" in state_reset_note(corpus_plan("tumbling_append"))
    assert "deduplication forgets" in state_reset_note(corpus_plan("distinct_dedup"))
    assert "running aggregates restart from zero" in state_reset_note(agg_plan())
    assert "join buffers start empty" in state_reset_note(join_plan())
    assert "keeps no state" in state_reset_note(stateless_plan())


def test_a_replace_with_hand_off_is_carried_out_on_the_next_version() -> None:
    assert executes_automatically("topology", "replace", "handOff")
    assert executes_automatically("topology", "replace", "backfill")
    assert not executes_automatically("topology", "replace", None)
    r = classified_rollout(pinned=PINNED_A, target_hash=B, target_config_map="q-plan-b", category="topology",
                           decision="replace", allow_replace=True, now=T0, previous=PREVIOUS_RECORD,
                           replace_note="state starts empty: running aggregates restart from zero")
    assert r.step == Step.APPLYING and r.strategy == "replace" and r.target_plan_version == 2
    assert r.replace_strategy == "handOff" and r.previous == PREVIOUS_RECORD
    assert r.for_storage()["previous"] == PREVIOUS.to_dict()
    assert "running aggregates restart from zero" in r.message
    assert completed_plan(r).for_storage()["handOffFrom"] == PREVIOUS.to_dict()
    # without the running version's plan there is nothing to start after; a forbidden replace is refused
    waiting = classified_rollout(pinned=PINNED_A, target_hash=B, target_config_map="q-plan-b",
                                 category="topology", decision="replace", allow_replace=True, now=T0,
                                 replace_strategy="backfill", previous=None)
    assert waiting.step == Step.AWAITING_UPGRADE and "missing" in waiting.message
    refused = classified_rollout(pinned=PINNED_A, target_hash=B, target_config_map="q-plan-b",
                                 category="topology", decision="replace", allow_replace=False, now=T0,
                                 previous=PREVIOUS_RECORD)
    assert refused.step == Step.REJECTED


def test_a_failed_replace_resumes_the_old_version_on_its_own_checkpoint() -> None:
    mode, why = rollback_mode(back_is_in_place=False, target_ran=True, backstop_epoch=4, replace=True)
    assert mode == HAND_BACK and "never written by the new one" in why


def identity(version: int) -> QueryIdentity:
    return QueryIdentity(service_id="s", namespace="ns", name="q", uid="u" * 8, plan_version=version)


def test_the_inventory_retires_the_version_a_replace_ends() -> None:
    plan = agg_plan()
    v1 = version_record(identity(1), plan, A, "q-plan-a", T0)
    assert v1.state == "Running" and v1.checkpoint_path.endswith("/q/v1")
    assert v1.dead_letter_topics == dead_letter_topics(plan)
    versions = with_running([v1], version_record(identity(2), plan, B, "q-plan-b", T1), T1)
    assert [(v.version, v.state) for v in versions] == [(2, "Running"), (1, "Retired")]
    assert versions[1].retired_at == T1
    # recording the same version again changes nothing (a resumed reconcile)
    again = with_running(versions, version_record(identity(2), plan, B, "q-plan-b", T1), T1)
    assert again == versions
