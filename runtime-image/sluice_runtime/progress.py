"""A streaming query's progress reports, each fetched once.

PySpark's ``StreamingQuery.recentProgress`` converts every report Spark retains (100 by default:
``spark.sql.streaming.numRecentProgressUpdates``), each with Py4J calls into the JVM and a JSON
parse on both sides. A driver's monitor asks every query for its progress every second, so at a batch
a second it converted each report a hundred times, for every query of the driver, for as long as it
runs. :class:`ProgressTail` asks the JVM for the buffer once per poll, reads the timestamps from its
end back to the newest report it already returned, and converts only the reports after it.

The readers below take one report as the JSON shape Spark 4 gives it (``StreamingQueryProgress``:
``timestamp`` when the trigger started, ``durationMs``, ``eventTime.watermark``,
``stateOperators[]``); ``tests/corpus/progress/`` holds reports recorded from real PySpark.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

#: the watermark Spark reports before the first batch moved it (no event time seen yet)
NO_WATERMARK = 0.0


def ran_a_batch(progress: Mapping[str, Any]) -> bool:
    """Whether a progress report is of a micro-batch that ran (and so was committed when it was
    reported), not of an idle trigger. An idle trigger reports the *next* batch id with no input
    and no ``addBatch`` time; a batch without input that ran anyway (a watermark or timeout moved)
    has ``addBatch``."""
    return int(progress.get("numInputRows") or 0) > 0 or "addBatch" in (progress.get("durationMs") or {})


def unix_seconds(stamp: Any) -> float | None:
    """An ISO 8601 time of a progress report (``2026-11-27T03:11:43.000Z``) in seconds since the
    epoch; None when absent or unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # Spark writes UTC
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def commit_time(progress: Mapping[str, Any]) -> float | None:
    """When the batch of a report was committed (unix seconds): its trigger's start plus the
    trigger's execution time (``durationMs.triggerExecution``)."""
    start = unix_seconds(progress.get("timestamp"))
    if start is None:
        return None
    return start + float((progress.get("durationMs") or {}).get("triggerExecution") or 0) / 1000.0


def watermark_delay(progress: Mapping[str, Any]) -> float | None:
    """Seconds from the event-time watermark to the processing time of the report (its trigger's
    start); None for a query without a watermark, or before its first batch moved it."""
    watermark = unix_seconds((progress.get("eventTime") or {}).get("watermark"))
    now = unix_seconds(progress.get("timestamp"))
    if watermark is None or now is None or watermark <= NO_WATERMARK:
        return None
    return now - watermark


def _custom(operator: Mapping[str, Any], name: str) -> int | None:
    value = (operator.get("customMetrics") or {}).get(name)
    return int(value) if isinstance(value, (int, float)) else None


def state_disk_bytes(progress: Mapping[str, Any]) -> int | None:
    """Bytes of state on local disk over the stateful operators of a report: RocksDB's SST files
    (custom metric ``rocksdbSstFileSize``); None when no operator reports it (no state, or the
    in-memory HDFS-backed store)."""
    sizes = [_custom(op, "rocksdbSstFileSize") for op in progress.get("stateOperators") or []]
    known = [size for size in sizes if size is not None]
    return sum(known) if known else None


def first_new(count: int, stamp: Callable[[int], str], last: str | None) -> int:
    """The index of the first report newer than ``last`` among ``count`` reports, oldest first,
    whose timestamps ``stamp(i)`` gives (ISO 8601 of one format: they compare as text); ``count``
    when none is. Reads the timestamps from the newest back, and stops at the first one not newer."""
    index = count
    while index > 0 and (last is None or stamp(index - 1) > last):
        index -= 1
    return index


def counted_once(report: dict[str, Any], scans: Mapping[str, int]) -> dict[str, Any]:
    """A report (JSON shape) with the rows of each Kafka source counted once. ``scans``: topic ->
    how many times the query scans the source per batch; Spark sums the rows of every scan of a
    source into its ``numInputRows`` (a source whose dead letters go with the batch is scanned
    twice, :func:`sluice_runtime.main_output.source_scans`). The query's totals and rates follow."""
    sources = report.get("sources") or []
    if all(times <= 1 for times in scans.values()):
        return report
    fixed = dict(report)
    fixed["sources"] = []
    for source in sources:
        topics = list(_partition_offsets(source.get("endOffset")) or {})
        times = scans.get(topics[0], 1) if len(topics) == 1 else 1
        source = dict(source)
        if times > 1:
            source["numInputRows"] = int(source.get("numInputRows") or 0) // times
            for rate in ("inputRowsPerSecond", "processedRowsPerSecond"):
                if isinstance(source.get(rate), (int, float)):
                    source[rate] = source[rate] / times
        fixed["sources"].append(source)
    before = int(report.get("numInputRows") or 0)
    after = sum(int(s.get("numInputRows") or 0) for s in fixed["sources"])
    fixed["numInputRows"] = after
    for rate in ("inputRowsPerSecond", "processedRowsPerSecond"):
        if before and isinstance(report.get(rate), (int, float)):
            fixed[rate] = report[rate] * after / before
    return fixed


class ProgressTail:
    """The progress reports of one query that :meth:`poll` has not returned before, oldest first
    (converted as ``recentProgress`` converts them), with each source's rows counted once
    (``scans``, :func:`counted_once`)."""

    def __init__(self, query: Any, scans: Mapping[str, int] | None = None) -> None:
        self.query = query
        self.last: str | None = None
        self.scans = dict(scans or {})

    def poll(self) -> list[Any]:
        from pyspark.sql.streaming.listener import StreamingQueryProgress

        reports = self.query._jsq.recentProgress()  # one Py4J call: the JVM's array
        count = len(reports)
        index = first_new(count, lambda i: str(reports[i].timestamp()), self.last)
        fresh = [StreamingQueryProgress.fromJson(counted_once(json.loads(reports[i].json()), self.scans))
                 for i in range(index, count)]
        if fresh:
            self.last = str(fresh[-1]["timestamp"])
        return fresh


def _partition_offsets(value: Any) -> dict[str, dict[str, int]] | None:
    """A Kafka source's offsets in a report (JSON text or mapping): topic -> partition -> offset;
    None when absent (``null`` before the first batch) or unreadable."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    out: dict[str, dict[str, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            return None
        out[str(topic)] = {str(p): int(o) for p, o in parts.items() if isinstance(o, (int, float))}
    return out


def offsets_without_rows(progress: Mapping[str, Any]) -> dict[str, int]:
    """Per topic of a batch's Kafka sources: the offsets of the batch's range that yielded no row,
    ``sum(endOffset - startOffset) - numInputRows`` over the source's partitions.

    Spark's progress does not show a skip in the offsets themselves: a batch starts at the previous
    batch's ``endOffset`` even when the records there are gone, and with ``failOnDataLoss=false``
    its reader jumps to the earliest offset still in the topic, so the rows read fall short of the
    range (Spark counts the jump only in its scan's SQL metric ``offsetOutOfRange``, which progress
    reports leave out). On a plain topic the shortfall is exactly the offsets skipped; on a
    transactional one it also holds the transaction markers (and, read ``read_committed``, the
    aborted records), which Spark skips as invisible. A source without start offsets (the first
    batch) or with a partition new in this batch (read from its earliest offset) is left out."""
    out: dict[str, int] = {}
    for source in progress.get("sources") or []:
        start = _partition_offsets(source.get("startOffset"))
        end = _partition_offsets(source.get("endOffset"))
        if not start or not end:
            continue
        span = 0
        complete = True
        for topic, parts in end.items():
            for partition, until in parts.items():
                begin = start.get(topic, {}).get(partition)
                if begin is None:
                    complete = False
                    break
                span += max(0, until - begin)
        if not complete or len(end) != 1:
            continue
        rows = int(source.get("numInputRows") or 0)
        topic = next(iter(end))
        out[topic] = out.get(topic, 0) + max(0, span - rows)
    return out
