"""Probes: scheduling and thresholds (pure ``ProbeState``) and execution (``run_probe``).

Like the kubelet: a probe first runs ``initialDelaySeconds`` after the container started, then
every ``periodSeconds``; its result flips to success after ``successThreshold`` consecutive
successes and to failure after ``failureThreshold`` consecutive failures. Readiness starts as
failed, liveness as succeeded, startup as not-yet; liveness and readiness wait for startup.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

READINESS, LIVENESS, STARTUP = "readiness", "liveness", "startup"


@dataclass
class ProbeState:
    kind: str
    spec: Obj
    next_due: float = 0.0
    successes: int = 0
    failures: int = 0
    result: bool = False
    last_message: str = ""

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds") or 10)

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds") or 1)

    @property
    def success_threshold(self) -> int:
        return int(self.spec.get("successThreshold") or 1)

    @property
    def failure_threshold(self) -> int:
        return int(self.spec.get("failureThreshold") or 3)

    def reset(self, started_at: float) -> None:
        """A (re)started container: wait the initial delay, forget the history."""
        self.next_due = started_at + float(self.spec.get("initialDelaySeconds") or 0)
        self.successes = self.failures = 0
        self.result = self.kind == LIVENESS
        self.last_message = ""

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def record(self, ok: bool, now: float, message: str = "") -> bool:
        """Count one probe outcome; returns True when the probe's result changed."""
        before = self.result
        self.next_due = now + self.period
        self.last_message = message
        if ok:
            self.successes += 1
            self.failures = 0
            if self.successes >= self.success_threshold:
                self.result = True
        else:
            self.failures += 1
            self.successes = 0
            if self.failures >= self.failure_threshold:
                self.result = False
        return before != self.result

    @property
    def failed(self) -> bool:
        """Liveness/startup verdict: the container must be restarted."""
        return self.failures >= self.failure_threshold


def resolve_port(port: Any, container: Obj) -> int:
    """An int port, or a named port looked up in the container's ``ports``."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for item in container.get("ports", []) or []:
        if item.get("name") == port:
            return int(item["containerPort"])
    raise ValueError(f"unknown named port {port!r}")


ExecFn = Callable[[list[str], float], "tuple[int, str]"]


def run_probe(spec: Obj, container: Obj, pod_ip: str, exec_fn: ExecFn) -> tuple[bool, str]:
    """Run one probe; returns (success, message). Never raises."""
    timeout = float(spec.get("timeoutSeconds") or 1)
    try:
        if "httpGet" in spec:
            return _http(spec["httpGet"], container, pod_ip, timeout)
        if "tcpSocket" in spec:
            tcp = spec["tcpSocket"]
            host = tcp.get("host") or pod_ip
            with socket.create_connection((host, resolve_port(tcp["port"], container)), timeout=timeout):
                return True, ""
        if "exec" in spec:
            code, output = exec_fn(list(spec["exec"].get("command") or []), timeout)
            return code == 0, output[-500:]
        return False, "unsupported probe handler (grpc?)"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _http(get: Obj, container: Obj, pod_ip: str, timeout: float) -> tuple[bool, str]:
    host = get.get("host") or pod_ip
    port = resolve_port(get.get("port", 80), container)
    headers: Mapping[str, str] = {h["name"]: h.get("value", "") for h in get.get("httpHeaders", []) or []}
    headers = {"User-Agent": "kube-probe/sluice-nodeagent", "Accept": "*/*", **headers}
    conn: http.client.HTTPConnection
    if str(get.get("scheme", "HTTP")).upper() == "HTTPS":
        conn = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl._create_unverified_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", get.get("path") or "/", headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read(1024).decode("utf-8", "replace")
        return 200 <= resp.status < 400, f"HTTP {resp.status} {body[:200]}"
    finally:
        conn.close()


def exec_in(pid: int | None, env: Mapping[str, str], use_nsenter: bool) -> ExecFn:
    """An exec-probe runner entering the container's mount namespace (when it has one)."""

    def run(command: list[str], timeout: float) -> tuple[int, str]:
        if not command:
            return 1, "empty exec command"
        argv = ["nsenter", "--mount", f"--target={pid}", "--", *command] if use_nsenter and pid else command
        try:
            proc = subprocess.run(argv, env=dict(env), capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 1, f"timed out after {timeout}s"
        except OSError as exc:
            return 127, str(exc)
        return proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace")

    return run
