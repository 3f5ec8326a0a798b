"""The lag of the active driver's queries measured at the brokers, every few seconds.

The progress reports give a lag only when a batch starts (Spark's ``latestOffset``): a driver whose
JVM hangs, or a batch that never ends, reports nothing new, and a query that had caught up keeps
reporting a lag of 0 while records pile up. This thread asks the brokers for the latest offsets
(``read_committed``: the last stable offsets, what the sources can read) of the partitions the
queries' last reports ended at, and sets ``sluice_kafka_lag_records`` from them. It runs in the
runtime's Python process and never calls into the JVM, so it goes on when the JVM hangs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from sluice_runtime.kafka_security import KafkaSecurity
from sluice_runtime.metrics import PartitionLag, RuntimeMetrics

log = logging.getLogger(__name__)

#: seconds between two measurements
INTERVAL = 10.0


def lags(ends: Mapping[str, Mapping[tuple[str, int], int]],
         latest: Mapping[tuple[str, int], int]) -> dict[str, list[PartitionLag]]:
    """Query -> its partitions' lag: the latest offset at the brokers minus the offset the query's
    last report ended at (a partition the brokers did not answer for is left out)."""
    out: dict[str, list[PartitionLag]] = {}
    for query, parts in ends.items():
        out[query] = [PartitionLag(topic, str(partition), max(0, latest[(topic, partition)] - end))
                      for (topic, partition), end in sorted(parts.items()) if (topic, partition) in latest]
    return out


class BrokerLag:
    """Measures the lag at the brokers every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, metrics: RuntimeMetrics, bootstrap: str, security: KafkaSecurity | None,
                 interval: float = INTERVAL) -> None:
        self.metrics = metrics
        self.bootstrap = bootstrap
        self.security = security
        self.interval = interval
        self._stop = threading.Event()
        self._admin: Any = None
        self._thread = threading.Thread(target=self._run, name="sluice-broker-lag", daemon=True)

    def start(self) -> BrokerLag:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.measure()
            except Exception as exc:  # a measurement, never a reason to stop a driver
                log.debug("broker lag: %s", exc)

    def measure(self) -> None:
        """One measurement (also called by tests)."""
        ends = self.metrics.partition_ends()
        partitions = {tp for parts in ends.values() for tp in parts}
        if not partitions:
            return
        latest = self._latest(partitions)
        for query, found in lags(ends, latest).items():
            self.metrics.set_lag(query, found)

    def _latest(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        from sluice_runtime.kafka_admin import connect

        if self._admin is None:
            self._admin, _ = connect(self.bootstrap, self.security, timeout=10.0)
        request = {TopicPartition(topic, partition): OffsetSpec.latest() for topic, partition in partitions}
        futures = self._admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                           request_timeout=10)
        out: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(future.result(10).offset)
            except Exception as exc:  # a partition without an answer is left out
                log.debug("broker lag of %s-%s: %s", tp.topic, tp.partition, exc)
        return out
