"""HTTP endpoint of a runtime (stdlib ``http.server`` in a thread) and the readiness logic.

* ``GET /healthz``: 200 while the process runs.
* ``GET /readyz``: 200 when the main query is active, has no exception and made progress (a batch
  completed, or it found no new data) within the readiness bound; 503 with the reason otherwise.
* ``GET /metrics``: Prometheus text format.
* ``GET /role``: JSON ``{identity, role, planHash, epoch, ready, reason}`` (standbys probe the
  active driver's identity with it).
* ``POST /drain``: start a graceful drain (202); the process exits 0 once it is done.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sluice_runtime.metrics import RuntimeMetrics

log = logging.getLogger(__name__)

#: readiness never asks for a batch more often than this (seconds)
READINESS_FLOOR = 120.0
#: a query is late when no batch completed in this many trigger intervals
READINESS_INTERVALS = 3

_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}


def parse_interval(text: str | None) -> float:
    """Seconds of a Spark interval such as ``'5 seconds'``, ``'1 minute'``, ``'500 ms'`` (None: 0)."""
    if not text:
        return 0.0
    total = 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([A-Za-z]+)", text.strip().lower().removeprefix("interval "))
    if not parts:
        raise ValueError(f"not an interval: {text!r}")
    for number, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"unknown interval unit {unit!r} in {text!r}")
        total += float(number) * _UNITS[unit]
    return total


def readiness_bound(trigger_interval: float, floor: float = READINESS_FLOOR) -> float:
    """Seconds within which a ready query must have made progress."""
    return max(floor, READINESS_INTERVALS * trigger_interval)


@dataclass
class QueryHealth:
    """What readiness is decided from (updated by the monitor)."""

    active: bool = False
    exception: str | None = None
    last_progress_at: float | None = None  # monotonic time of the last batch or idle check
    draining: bool = False


def evaluate_readiness(health: QueryHealth, now: float, bound: float) -> tuple[bool, str]:
    if health.draining:
        return False, "draining"
    if health.exception:
        return False, f"query failed: {health.exception}"
    if not health.active:
        return False, "query not active"
    if health.last_progress_at is None:
        return False, "no batch completed yet"
    age = now - health.last_progress_at
    if age > bound:
        return False, f"no batch completed for {age:.0f}s (bound {bound:.0f}s)"
    return True, "ok"


@dataclass
class RuntimeState:
    """Shared between the monitor, the HTTP server and the drain."""

    metrics: RuntimeMetrics = field(default_factory=RuntimeMetrics)
    health: QueryHealth = field(default_factory=QueryHealth)
    bound: float = READINESS_FLOOR
    on_drain: Callable[[], None] | None = None
    clock: Callable[[], float] = time.monotonic
    #: this process's election identity (``<pod>/<incarnation>``) and role: ``active`` runs the
    #: query; ``standby`` waits warm (``warming`` until its pipeline is built)
    identity: str = ""
    role: str = "active"
    plan_hash: str = ""
    epoch: int | None = None

    def readiness(self) -> tuple[bool, str]:
        if self.role == "warming":
            ok, reason = False, "warming up"
        elif self.role == "standby":
            ok, reason = (False, "draining") if self.health.draining else (True, "standby: warm")
        else:
            ok, reason = evaluate_readiness(self.health, self.clock(), self.bound)
        self.metrics.ready.set(1 if ok else 0)
        return ok, f"{reason} (role {self.role}, plan {self.plan_hash[:12]})" if self.plan_hash else reason

    def describe(self) -> dict[str, Any]:
        """What ``GET /role`` answers (standbys ask the holder this to know it is alive)."""
        ok, reason = self.readiness()
        return {"identity": self.identity, "role": self.role, "planHash": self.plan_hash,
                "epoch": self.epoch, "ready": ok, "reason": reason}


def make_handler(state: RuntimeState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                ok, reason = state.readiness()
                self._send(200 if ok else 503, (reason + "\n").encode())
            elif path == "/role":
                self._send(200, json.dumps(state.describe()).encode(), "application/json")
            elif path == "/metrics":
                state.readiness()
                self._send(200, state.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, b"not found\n")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] == "/drain":
                if state.on_drain is not None:
                    state.on_drain()
                self._send(202, b"draining\n")
            else:
                self._send(404, b"not found\n")

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    return Handler


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--http-addr must be HOST:PORT, got {addr!r}")
    return host.strip("[]"), int(port)


def serve(state: RuntimeState, addr: str) -> ThreadingHTTPServer:
    """Start the HTTP server in a daemon thread."""
    server = ThreadingHTTPServer(parse_addr(addr), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="sluice-http", daemon=True).start()
    log.info("http endpoint on %s:%s", *server.server_address[:2])
    return server
