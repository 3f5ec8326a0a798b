"""Clean-up of retired plan versions (pure decisions, and the driver's removal of checkpoints)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pydantic import ValidationError
from sluice.core.cleanup import (
    CLEANUP_DONE,
    CLEANUP_REQUEST,
    CleanupRequest,
    config_maps_to_delete,
    groups_to_delete,
    pending_cleanup,
    plan_cleanup,
    refusal,
)
from sluice.core.cleanup import topics_to_delete as topics
from sluice.core.records import VersionRecord
from sluice.core.spec import CleanupPolicy, parse_duration
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice_runtime.cleanup import remove

from tests.support import records

NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
BASE = "/var/lib/sluice/state/s/ns/q"


def version(n: int, state: str = "Retired", retired: dt.datetime | None = None,
            **extra: object) -> VersionRecord:
    out: dict[str, object] = {
        "checkpointPath": f"{BASE}/v{n}", "consumerGroup": f"s.ns.q.v{n}", "outputTopic": "out",
        "deadLetterTopics": ["out.dlq"], "configMap": f"q-plan-{n:012d}", **extra}
    if state == "Retired":
        out["retiredAt"] = (retired or NOW - dt.timedelta(hours=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return records.version(n, state, **out)


def test_durations() -> None:
    assert parse_duration("30s") == 30 and parse_duration("24h") == 86400 and parse_duration("1h30m") == 5400
    assert parse_duration("7d") == 7 * 86400
    for bad in ("", "1w", "h", "-5s", "5 s"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_a_bad_retention_is_refused_naming_the_field() -> None:
    spec = {"sources": [{"name": "a", "topic": "a", "schema": [{"name": "x", "type": "int"}]}],
            "sql": "SELECT x FROM a", "sink": {"topic": "o"}, "cleanup": {"retention": "a day"}}
    with pytest.raises(ValidationError, match=r"cleanup\.retention"):
        StreamingQuerySpec.model_validate(spec)
    assert CleanupPolicy().retain_versions == 1 and CleanupPolicy().delete_topics == "Never"


def test_the_newest_retired_versions_are_kept_the_older_ones_fall_due_after_retention() -> None:
    versions = [version(4, "Running"), version(3), version(2),
                version(1, retired=NOW - dt.timedelta(hours=1))]
    decided = plan_cleanup(versions, CleanupPolicy(retain_versions=1, retention="24h"), NOW)
    assert [v.version for v in decided.kept] == [4, 3]
    assert [v.version for v in decided.due] == [2]  # version 1 retired an hour ago: not yet
    assert decided.next_due == NOW + dt.timedelta(hours=23)
    # nothing retired is kept with retainVersions 0; nothing is due before its retention
    decided = plan_cleanup(versions, CleanupPolicy(retain_versions=0, retention="2h"), NOW)
    assert [v.version for v in decided.due] == [2, 3] and decided.next_due == NOW + dt.timedelta(hours=1)
    # the running version is never due, whatever the policy
    only = plan_cleanup([version(1, "Running")], CleanupPolicy(retain_versions=0, retention="0s"), NOW)
    assert only.due == [] and only.next_due is None


def test_topics_are_deleted_only_after_retention_and_never_one_a_kept_version_uses() -> None:
    due = version(2, outputTopic="out.v2", deadLetterTopics=["out.dlq"])
    kept = [version(3, "Running")]
    assert topics(due, kept, CleanupPolicy()) == []  # deleteTopics: Never
    assert topics(due, kept, CleanupPolicy(delete_topics="AfterRetention")) == ["out.v2"]


def test_groups_of_the_due_version_and_its_markers_only() -> None:
    existing = ["s.ns.q.v2", "s.ns.q.v2.eos.1234", "s.ns.q.v20.eos.9", "s.ns.q.v3.eos.55", "other"]
    deleted = groups_to_delete(version(2), existing, [version(3, "Running")])
    assert deleted == ["s.ns.q.v2", "s.ns.q.v2.eos.1234"]
    assert config_maps_to_delete(["a", "b", "c"], {"b"}) == ["a", "c"]


def test_the_request_on_the_lease_and_its_answer() -> None:
    request = CleanupRequest.for_paths([f"{BASE}/v2", f"{BASE}/v1", f"{BASE}/v2"])
    assert request.paths == (f"{BASE}/v1", f"{BASE}/v2")
    assert CleanupRequest.for_paths([f"{BASE}/v1", f"{BASE}/v2"]).id == request.id  # stable
    annotations = {CLEANUP_REQUEST: request.to_json()}
    assert pending_cleanup(annotations) == request
    assert pending_cleanup({**annotations, CLEANUP_DONE: request.id}) is None
    assert pending_cleanup({CLEANUP_REQUEST: "{oops"}) is None


@pytest.mark.parametrize(("path", "why"), [
    (f"{BASE}/v1", None),
    (f"{BASE}/v3", "own checkpoint"),
    (BASE, "own checkpoint"),
    (f"{BASE}/v3/epochs/1", "own checkpoint"),
    ("/var/lib/sluice/state/s/ns/other/v1", "not a checkpoint of this query"),
    (f"{BASE}/v3/../v1", "without '..'"),
    ("v1", "without '..'"),
])
def test_a_driver_removes_only_another_version_of_its_own_query(path: str, why: str | None) -> None:
    result = refusal(path, f"{BASE}/v3")
    assert (result is None) if why is None else (result is not None and why in result)


def test_the_driver_removes_what_it_may_and_keeps_the_rest(tmp_path: Path) -> None:
    base = tmp_path / "q"
    for name in ("v1", "v2", "v3"):
        (base / name / "epochs" / "1").mkdir(parents=True)
        (base / name / "epochs" / "1" / "metadata").write_text("{}")
    removed = remove((str(base / "v1"), str(base / "v3"), str(base / "v9")), str(base / "v3"))
    assert removed == [str(base / "v1"), str(base / "v9")]  # gone already counts as removed
    assert not (base / "v1").exists() and (base / "v2").exists() and (base / "v3" / "epochs").exists()


def test_the_cleanup_timer_runs_while_a_clean_up_is_pending_and_reconciles_once_it_is_due() -> None:
    from sluice.operator.handlers.query_reconcile import cleanup_due, cleanup_pending

    later = {"cleanup": {"nextDue": "2999-01-01T00:00:00Z"}}
    # kopf evaluates a timer's filter on the object's events only: it must not wait for the time
    assert cleanup_pending(status=later) and not cleanup_due(later)
    assert cleanup_due({"cleanup": {"nextDue": "2000-01-01T00:00:00Z"}})
    assert not cleanup_pending(status={}) and not cleanup_pending(status={"cleanup": None})
