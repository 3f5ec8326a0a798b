"""The task-side exactly-once sink's decisions: what a partition marker says, whether a task writes
or skips its partition of a batch, and the refusal when a replayed batch's layout changed."""

from __future__ import annotations

import pytest
from sluice_runtime import eos_markers as em


def test_a_marker_round_trips_through_the_committed_offset_and_its_metadata() -> None:
    marker = em.PartitionMarker(7, 3, "run-a")
    assert em.PartitionMarker.parse(8, marker.metadata()) == marker


@pytest.mark.parametrize("offset", [None, -1001, -1, 0])
def test_a_group_without_a_commit_has_no_batch(offset: int | None) -> None:
    assert em.PartitionMarker.parse(offset, None).batch is None


def test_a_marker_with_metadata_it_cannot_read_still_names_its_batch() -> None:
    assert em.PartitionMarker.parse(5, "not json") == em.PartitionMarker(4)
    assert em.PartitionMarker.parse(5, '["a list"]') == em.PartitionMarker(4)


@pytest.mark.parametrize(("marker", "expected"), [
    (em.PartitionMarker(None), em.Decision.WRITE),        # never written
    (em.PartitionMarker(4, 3, "r"), em.Decision.WRITE),   # the previous batch
    (em.PartitionMarker(5, 3, "r"), em.Decision.SKIP),    # this batch: a replay
    (em.PartitionMarker(6, 2, "r"), em.Decision.SKIP),    # a later batch (a replay of an old one)
    (em.PartitionMarker(5), em.Decision.SKIP),            # this batch, layout not recorded
])
def test_a_partition_is_written_unless_its_marker_holds_the_batch(
        marker: em.PartitionMarker, expected: em.Decision) -> None:
    assert em.decide(marker, batch=5, partitions=3, partition=1) is expected


def test_a_replay_with_another_partition_count_is_refused_with_both_counts() -> None:
    with pytest.raises(em.LayoutChanged, match=r"partition 1 of batch 5 .* 3 output partitions .* now has 2"):
        em.decide(em.PartitionMarker(5, 3, "r1"), batch=5, partitions=2, partition=1)


def test_ids_and_groups_are_per_output_partition() -> None:
    assert em.task_transactional_id("sluice-q", 2) == "sluice-q-p2"
    assert em.marker_group_of("g.eos.ck", 0) == "g.eos.ck.p0"
    assert em.marker_group_of("g.eos.ck", 0) != em.marker_group_of("g.eos.ck", 1)


def test_a_fenced_task_is_told_apart_from_other_failures() -> None:
    assert em.is_fenced_failure(f"py4j ... RuntimeError: {em.FENCED_TEXT}: batch 3")
    assert em.is_fenced_failure("KafkaError{code=FENCED_INSTANCE_ID,val=82}")
    assert not em.is_fenced_failure("KafkaError{code=_MSG_TIMED_OUT}")


@pytest.mark.parametrize(("task_batch", "last_commit", "expected"), [
    (None, None, None),  # the previous version wrote nothing
    (None, 3, 3),        # its batches were empty of output
    (3, 3, 3),           # drained: its checkpoint records the last batch its tasks wrote
    (2, 3, 3),
])
def test_a_hand_off_starts_after_the_previous_version_s_last_recorded_batch(
        task_batch: int | None, last_commit: int | None, expected: int | None) -> None:
    assert em.hand_off_batch(task_batch, last_commit) == expected


@pytest.mark.parametrize(("task_batch", "last_commit"), [(4, 3), (0, None)])
def test_a_hand_off_after_a_batch_only_the_tasks_know_of_is_refused(task_batch: int,
                                                                   last_commit: int | None) -> None:
    with pytest.raises(em.PartialBatch, match=f"batch {task_batch}, which its checkpoint does not record"):
        em.hand_off_batch(task_batch, last_commit)
