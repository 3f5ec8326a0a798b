"""Node agent: probe scheduling, thresholds and handlers."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest
from sluice_dev.nodeagent.probes import LIVENESS, READINESS, STARTUP, ProbeState, resolve_port, run_probe


def test_initial_results_and_initial_delay() -> None:
    spec = {"initialDelaySeconds": 5, "periodSeconds": 2}
    readiness, liveness, startup = (ProbeState(k, spec) for k in (READINESS, LIVENESS, STARTUP))
    for probe in (readiness, liveness, startup):
        probe.reset(started_at=100.0)
    assert (readiness.result, liveness.result, startup.result) == (False, True, False)
    assert not readiness.due(104.9) and readiness.due(105.0)
    readiness.record(True, 105.0)
    assert readiness.next_due == 107.0


def test_thresholds_flip_results_only_after_consecutive_outcomes() -> None:
    probe = ProbeState(READINESS, {"successThreshold": 2, "failureThreshold": 3, "periodSeconds": 1})
    probe.reset(0.0)
    assert not probe.record(True, 1.0)
    assert probe.record(True, 2.0) and probe.result
    assert not probe.record(False, 3.0) and not probe.record(False, 4.0)
    assert probe.record(False, 5.0) and not probe.result and probe.failed
    assert not probe.record(True, 6.0) and not probe.result  # one success is not enough


def test_liveness_failure_verdict_and_reset_on_restart() -> None:
    probe = ProbeState(LIVENESS, {"failureThreshold": 2})
    probe.reset(0.0)
    probe.record(False, 1.0)
    assert not probe.failed and probe.result
    probe.record(False, 2.0)
    assert probe.failed and not probe.result
    probe.reset(10.0)
    assert not probe.failed and probe.result and probe.period == 10.0 and probe.timeout == 1.0


def test_named_ports() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", container) == 8080
    assert resolve_port(81, container) == 81 and resolve_port("82", container) == 82
    with pytest.raises(ValueError):
        resolve_port("nope", container)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/ok" else 500
        self.send_response(code)
        self.end_headers()
        self.wfile.write(self.headers.get("X-Probe", "").encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.10.0.77", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield int(httpd.server_address[1])
    httpd.shutdown()


def test_http_and_tcp_probes_target_the_pod_ip(server: int) -> None:
    container = {"ports": [{"name": "web", "containerPort": server}]}
    never = lambda argv, timeout: (1, "")  # noqa: E731
    ok, msg = run_probe(
        {"httpGet": {"path": "/ok", "port": "web", "httpHeaders": [{"name": "X-Probe", "value": "v"}]}},
        container,
        "127.10.0.77",
        never,
    )
    assert ok and "200" in msg and "v" in msg
    assert not run_probe({"httpGet": {"path": "/bad", "port": server}}, container, "127.10.0.77", never)[0]
    assert not run_probe({"httpGet": {"path": "/ok", "port": server}}, container, "127.10.0.78", never)[0]
    assert run_probe({"tcpSocket": {"port": server}}, container, "127.10.0.77", never)[0]
    with socket.socket() as free:
        free.bind(("127.10.0.79", 0))
        closed_port = free.getsockname()[1]
    assert not run_probe({"tcpSocket": {"port": closed_port}}, container, "127.10.0.79", never)[0]


def test_exec_probe_uses_the_runner_and_unknown_handlers_fail() -> None:
    calls = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str]:
        calls.append((argv, timeout))
        return (0 if argv == ["true"] else 1), "out"

    assert run_probe({"exec": {"command": ["true"]}, "timeoutSeconds": 3}, {}, "", runner) == (True, "out")
    assert not run_probe({"exec": {"command": ["false"]}}, {}, "", runner)[0]
    assert calls[0] == (["true"], 3.0)
    assert run_probe({"grpc": {"port": 1}}, {}, "", runner) == (False, "unsupported probe handler (grpc?)")
