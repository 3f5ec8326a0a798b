"""Fetching a query's progress reports once each (``sluice_runtime.progress``)."""

from __future__ import annotations

from collections.abc import Callable

from sluice_runtime.progress import first_new

STAMPS = ["2026-11-26T10:00:01.000Z", "2026-11-26T10:00:02.000Z", "2026-11-26T10:00:03.500Z"]


def reader(stamps: list[str], log: list[int]) -> Callable[[int], str]:
    def stamp(i: int) -> str:
        log.append(i)
        return stamps[i]

    return stamp


def test_first_poll_takes_every_report() -> None:
    log: list[int] = []
    assert first_new(len(STAMPS), reader(STAMPS, log), None) == 0
    assert log == []  # nothing returned before: no timestamp read at all


def test_only_reports_after_the_last_returned_and_reads_back_from_the_newest() -> None:
    log: list[int] = []
    assert first_new(len(STAMPS), reader(STAMPS, log), STAMPS[0]) == 1
    assert log == [2, 1, 0]
    log.clear()
    assert first_new(len(STAMPS), reader(STAMPS, log), STAMPS[2]) == 3  # nothing new
    assert log == [2]  # one timestamp read, whatever the buffer's length


def test_reports_dropped_from_the_buffer_meanwhile() -> None:
    # Spark keeps the newest reports only: the last one returned may have left the buffer
    newer = ["2026-11-26T10:00:04.000Z", "2026-11-26T10:00:05.000Z"]
    assert first_new(len(newer), reader(newer, []), STAMPS[2]) == 0


def test_empty_buffer() -> None:
    assert first_new(0, reader([], []), None) == 0
    assert first_new(0, reader([], []), STAMPS[0]) == 0
