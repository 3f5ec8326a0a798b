"""Steady input for fail-over and hand-off tests: records with consecutive ids at a fixed rate,
and the check that every id came out exactly once."""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any


class Feed:
    """Produces ``rate`` records per second (``record(i)`` for i = 0, 1, ...) until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 20.0,
                 record: Callable[[int], dict[str, Any]] | None = None) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.rate = rate
        self.record = record or (lambda i: {"id": i, "k": f"k{i % 3}"})
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = json.dumps(self.record(self.sent))
            self.producer.produce(self.topic, key=str(self.sent % 7), value=value)
            self.sent += 1
            self.producer.poll(0)
            self._stop.wait(1.0 / self.rate)

    def stop(self) -> int:
        """Stop, flush, and return how many records were sent (ids 0 .. n-1)."""
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)
        return self.sent


def lost_and_duplicated(ids: Iterable[int], sent: int) -> tuple[list[int], list[int]]:
    """The ids of 0 .. sent-1 missing from ``ids``, and those seen more than once."""
    counts = collections.Counter(ids)
    lost = sorted(set(range(sent)) - set(counts))
    dup = sorted(i for i, n in counts.items() if n > 1)
    return lost, dup


def exactly_once_message(ids: Iterable[int], sent: int) -> str | None:
    """None when every id of 0 .. sent-1 is there once; else what is wrong."""
    lost, dup = lost_and_duplicated(ids, sent)
    if not lost and not dup:
        return None
    return f"{len(lost)} lost (first {lost[:10]}), {len(dup)} duplicated (first {dup[:10]}) of {sent}"
