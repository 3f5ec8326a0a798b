"""Replace with backfill (blue/green), the pure parts: the rollout it records, when it switches,
how it is rolled back, the topics it writes, and what its rollback leaves to the clean-up."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError
from sluice.core.cleanup import plan_cleanup, topics_to_delete
from sluice.core.driverreport import Progress
from sluice.core.gate import backfill_lag
from sluice.core.naming import QueryIdentity
from sluice.core.records import PreviousVersion, Rollout
from sluice.core.replace import backfill_output_topic
from sluice.core.rollout import (
    DISCARD,
    Step,
    caught_up,
    classified_rollout,
    completed_plan,
    is_backfill,
    next_action,
    outcome_of,
    rollback_mode,
)
from sluice.core.spec import CleanupPolicy, UpgradePolicy
from sluice.core.status import Facts, derive_phase
from sluice.core.versions import (
    dead_letter_topic,
    version_record,
    with_rolled_back,
)

from tests.support import records
from tests.support.classify_plans import agg_plan

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
A, B = "a" * 64, "b" * 64
PINNED_A = records.pinned(A)
PREVIOUS = PreviousVersion(version=1, plan_hash=A, checkpoint="/var/lib/sluice/state/s/ns/q/v1",
                           consumer_group="s.ns.q.v1", transactional_id="s.ns.q.v1.tx", sink_topic="out",
                           exactly_once=True)


def backfill(**extra: object) -> Rollout:
    args: dict = {"pinned": PINNED_A, "target_hash": B, "target_config_map": "q-plan-b",
                  "category": "topology",
                  "decision": "replace", "allow_replace": True, "now": T0, "replace_strategy": "backfill",
                  "previous": PREVIOUS, "output_topic": "out-v2", "max_lag_records": 100,
                  "replace_note": "state starts empty", **extra}
    return classified_rollout(**args)


def identity(version: int) -> QueryIdentity:
    return QueryIdentity(service_id="s", namespace="ns", name="q", uid="u" * 8, plan_version=version)


def test_a_backfill_runs_the_next_version_beside_the_running_one_on_a_versioned_topic() -> None:
    r = backfill()
    assert is_backfill(r) and r.step == Step.BACKFILLING and r.target_plan_version == 2
    assert (r.output_topic, r.backfill_from, r.max_lag_records) == ("out-v2", "earliest", 100)
    assert "from the earliest offsets" in r.message and "'out-v2'" in r.message
    assert "serves 'out'" in r.message and "at most 100 records behind" in r.message
    assert outcome_of(r.step) == "InProgress"
    assert derive_phase(Facts(generation=2, plan_pinned=True, rollout_step=r.step)) == "Upgrading"
    since = backfill(backfill_from="2026-11-01T00:00:00Z")
    assert since.backfill_from == "2026-11-01T00:00:00Z" and "from 2026-11-01T00:00:00Z" in since.message
    # the versioned name, unless the edit named a sink topic of its own
    assert identity(2).versioned_topic("out") == "out-v2" and identity(1).versioned_topic("out") == "out"
    assert backfill_output_topic("out", "out", "out-v2") == "out-v2"
    assert backfill_output_topic("totals-by-order", "out", "out-v2") == "totals-by-order"


def test_it_switches_once_it_passed_its_gate_and_its_lag_is_small_enough() -> None:
    assert backfill_lag(None, 100) == (False, "the backfill has not reported its lag yet")
    behind = Progress(B, 1, 3, 3, lag_records=5000)
    done, why = backfill_lag(behind, 100)
    assert not done and "5000 records behind" in why and "100 or fewer" in why
    assert backfill_lag(Progress(B, 1, 3, 3, lag_records=100), 100)[0]
    assert not backfill_lag(Progress(B, 1, 3, 3), 100)[0]  # a driver that never reported its lag
    switching = caught_up(backfill(), now=T1, lag=40)
    assert switching.step == Step.APPLYING and switching.caught_up == T1
    assert "40 records behind" in switching.message
    # once it ran, the version pins its topic (the drivers keep writing there); no hand-off origin
    pinned = completed_plan(switching)
    assert pinned.output_topic == "out-v2" and pinned.hand_off_from is None and pinned.version == 2
    assert "handOffFrom" not in pinned.for_storage()


def test_a_backfill_that_never_took_over_is_discarded_and_a_revert_cancels_it() -> None:
    mode, why = rollback_mode(back_is_in_place=True, target_ran=False, backstop_epoch=None, replace=True,
                              backfilling=True)
    assert mode == DISCARD and "kept serving" in why
    assert next_action(PINNED_A, backfill(), A).kind == "revert"
    assert next_action(PINNED_A, backfill(), B).kind == "resume"


def test_the_policy_fields_and_a_bad_start_time_named() -> None:
    policy = UpgradePolicy.model_validate({"replaceStrategy": "backfill",
                                           "backfillFrom": "2026-11-01T00:00:00Z"})
    assert policy.max_lag_records == 1000 and policy.backfill_from == "2026-11-01T00:00:00Z"
    for bad in ("yesterday", "2026-11-01", "2026-11-01T00:00:00", "1969-12-31T23:59:59Z"):
        with pytest.raises(ValidationError, match="backfillFrom"):
            UpgradePolicy.model_validate({"backfillFrom": bad})
    with pytest.raises(ValidationError, match="maxLagRecords"):
        UpgradePolicy.model_validate({"maxLagRecords": -1})


def test_the_default_dead_letter_topic_follows_the_version_s_topic() -> None:
    assert dead_letter_topic("out.dlq", "out", "out-v2") == "out-v2.dlq"
    assert dead_letter_topic(None, "out", "out-v2") == "out-v2.dlq"
    assert dead_letter_topic("bad-orders", "out", "out-v2") == "bad-orders"
    assert dead_letter_topic("out.dlq", "out") == "out.dlq"
    record = version_record(identity(2), agg_plan(), B, "q-plan-b", T0, output_topic="out-v2")
    assert (record.output_topic, record.dead_letter_topics) == ("out-v2", ["out-v2.dlq"])


def test_a_rolled_back_version_is_due_at_once_with_its_own_topics_and_never_kept() -> None:
    plan = agg_plan()
    v1 = version_record(identity(1), plan, A, "q-plan-a", T0)
    v2 = version_record(identity(2), plan, B, "q-plan-b", T0, output_topic="out-v2")
    versions = with_rolled_back([v1], v2, T1)
    assert [(v.version, v.state) for v in versions] == [(2, "RolledBack"), (1, "Running")]
    policy = CleanupPolicy(retain_versions=3, retention="7d", delete_topics="Never")
    now = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    decided = plan_cleanup(versions, policy, now)
    assert [v.version for v in decided.due] == [2] and [v.version for v in decided.kept] == [1]
    assert decided.next_due is None
    # deleteTopics Never is about retired versions kept for rollback; a rolled-back one's topic goes,
    # but never a topic the running version writes (a hand-off's new version shares it)
    assert topics_to_delete(decided.due[0], decided.kept, policy) == sorted(
        {"out-v2", *v2.dead_letter_topics} - {v1.output_topic, *v1.dead_letter_topics})
    shared = with_rolled_back([v1], version_record(identity(2), plan, B, "q-plan-b", T0), T1)
    assert topics_to_delete(plan_cleanup(shared, policy, now).due[0], [v1], policy) == []


def test_the_classification_says_what_a_backfill_will_do_before_it_happens() -> None:
    from sluice.core.classify import classify

    old, new = agg_plan(group="customer"), agg_plan(group="region")
    result = classify(old, new, UpgradePolicy(replace_strategy="backfill", max_lag_records=50))
    assert str(result.decision) == "replace"
    text = " ".join(str(r) for r in result.reasons)
    assert "re-reads its sources from the earliest offsets" in text and "out-v<next plan version>" in text
    assert "at most 50 records behind" in text and "state starts empty" in text
    policy = UpgradePolicy(replace_strategy="backfill", backfill_from="2026-11-01T00:00:00Z")
    since = classify(old, new, policy)
    assert "from 2026-11-01T00:00:00Z" in " ".join(str(r) for r in since.reasons)
