"""One loopback address per pod.

All of 127.0.0.0/8 is routed to ``lo`` on Linux, so any 127.x.y.z can be bound and reached
without ``ip addr add``. The allocator hands out addresses from a /16 (default 127.10.0.0/16),
round-robin so that a released address is not reused at once, and persists its table so that a
restarted agent keeps the addresses of the pods it already knows.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from pathlib import Path


class PoolExhausted(RuntimeError):
    pass


def candidates(network: ipaddress.IPv4Network) -> list[str]:
    """Usable addresses of ``network``: no network/broadcast address, no x.y.z.0 or x.y.z.255."""
    return [str(ip) for ip in network.hosts() if int(ip) & 0xFF not in (0, 255)]


def next_free(pool: list[str], used: set[str], after: str | None) -> str:
    """The first address of ``pool`` not in ``used``, searching round-robin after ``after``."""
    start = pool.index(after) + 1 if after in pool else 0
    n = len(pool)
    for i in range(n):
        ip = pool[(start + i) % n]
        if ip not in used:
            return ip
    raise PoolExhausted(f"all {n} pod addresses are in use")


class Allocator:
    """Thread-safe pod uid -> address table, persisted as JSON in ``path`` (if given)."""

    def __init__(self, cidr: str = "127.10.0.0/16", path: Path | None = None) -> None:
        network = ipaddress.IPv4Network(cidr)
        if not network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"pod CIDR {cidr} must be inside 127.0.0.0/8 (loopback only)")
        self._pool = candidates(network)
        self._path = path
        self._lock = threading.Lock()
        self._table: dict[str, str] = {}
        self._last: str | None = None
        if path is not None and path.exists():
            data = json.loads(path.read_text())
            self._table = dict(data.get("pods", {}))
            self._last = data.get("last")

    def _save(self) -> None:
        if self._path is not None:
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pods": self._table, "last": self._last}, indent=1))
            tmp.replace(self._path)

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self._table:
                return self._table[uid]
            ip = next_free(self._pool, set(self._table.values()), self._last)
            self._table[uid] = ip
            self._last = ip
            self._save()
            return ip

    def release(self, uid: str) -> None:
        with self._lock:
            if self._table.pop(uid, None) is not None:
                self._save()

    def known(self) -> dict[str, str]:
        with self._lock:
            return dict(self._table)
