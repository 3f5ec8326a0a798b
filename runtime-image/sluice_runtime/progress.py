"""A streaming query's progress reports, each fetched once.

PySpark's ``StreamingQuery.recentProgress`` converts every report Spark retains (100 by default:
``spark.sql.streaming.numRecentProgressUpdates``), each with Py4J calls into the JVM and a JSON
parse on both sides. A driver's monitor asks every query for its progress every second, so at a batch
a second it converted each report a hundred times, for every query of the driver, for as long as it
runs. :class:`ProgressTail` asks the JVM for the buffer once per poll, reads the timestamps from its
end back to the newest report it already returned, and converts only the reports after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def first_new(count: int, stamp: Callable[[int], str], last: str | None) -> int:
    """The index of the first report newer than ``last`` among ``count`` reports, oldest first,
    whose timestamps ``stamp(i)`` gives (ISO 8601 of one format: they compare as text); ``count``
    when none is. Reads the timestamps from the newest back, and stops at the first one not newer."""
    index = count
    while index > 0 and (last is None or stamp(index - 1) > last):
        index -= 1
    return index


class ProgressTail:
    """The progress reports of one query that :meth:`poll` has not returned before, oldest first
    (the same objects as ``recentProgress``'s)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.last: str | None = None

    def poll(self) -> list[Any]:
        from pyspark.sql.streaming.listener import StreamingQueryProgress

        reports = self.query._jsq.recentProgress()  # one Py4J call: the JVM's array
        count = len(reports)
        index = first_new(count, lambda i: str(reports[i].timestamp()), self.last)
        fresh = [StreamingQueryProgress.fromJson(json.loads(reports[i].json())) for i in range(index, count)]
        if fresh:
            self.last = str(fresh[-1]["timestamp"])
        return fresh
