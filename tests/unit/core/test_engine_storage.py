"""Where checkpoints live never changes under a running query: an engine change that moves them is
``unsupported`` (the query stays on its engine); the store's other settings are ``transparent``."""

from __future__ import annotations

from typing import Any

from sluice.core.engine import EngineFacts, engine_changes


def facts(**workload: Any) -> EngineFacts:
    return EngineFacts(
        digest=str(sorted(workload.items())),
        image="img",
        spark_version="4.0.1",
        workload={"executors": 0, **workload},
    )


def test_moving_checkpoints_between_volume_and_object_store_is_unsupported() -> None:
    volume, store = facts(), facts(**{"objectStore.uri": "s3a://b-1/x"})
    for old, new in ((volume, store), (store, volume)):
        [moved] = engine_changes(old, new)
        assert str(moved.category) == "unsupported" and moved.field == "storage.objectStore.uri"
        assert "stays where it started, so the query stays on its engine" in moved.message
    [other] = engine_changes(store, facts(**{"objectStore.uri": "s3a://b-2/x"}))
    assert str(other.category) == "unsupported"
    assert "s3a://b-1/x" in other.message and "s3a://b-2/x" in other.message


def test_the_stores_connection_settings_change_in_place() -> None:
    old = facts(**{"objectStore.uri": "s3a://b-1/x", "objectStore.endpoint": "http://a:9000"})
    new = facts(**{"objectStore.uri": "s3a://b-1/x", "objectStore.endpoint": "http://b:9000"})
    [changed] = engine_changes(old, new)
    assert str(changed.category) == "transparent" and changed.field == "objectStore.endpoint"
