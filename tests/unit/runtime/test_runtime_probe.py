"""A standby's probe of the Lease holder's endpoint (``GET /role``), against loopback sockets that
answer the way a live, a dead and a dying holder does: the probe never raises (a standby that died
of a probe cut short by the holder's kill -9 was seen in CI: it left nobody to take over)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from sluice.core.election import HolderProbe
from sluice_runtime.elector import probe_holder


def serve_once(answer: bytes) -> Iterator[str]:
    """A one-connection server on loopback that reads the request, writes ``answer`` and closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(5)


def http(body: bytes, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return (b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {size}\r\n\r\n".encode() + body)


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from serve_once(request.param)


@pytest.mark.parametrize(("endpoint", "expected"), [
    (http(b'{"identity": "pod-a/1", "role": "active"}'), HolderProbe.ALIVE),
    (http(b'{"identity": "pod-b/2", "role": "active"}'), HolderProbe.GONE),  # a new process in its place
    (http(b'{"identity": "pod-a/1"', length=200), HolderProbe.UNKNOWN),  # body cut: IncompleteRead
    (b"HTTP/1.0 200 OK\r\nContent-Le", HolderProbe.UNKNOWN),  # headers cut
    (b"", HolderProbe.UNKNOWN),  # closed without a word
    (b"garbage\r\n\r\n", HolderProbe.UNKNOWN),  # no HTTP status line
    (http(b'["pod-a/1"]'), HolderProbe.UNKNOWN),  # JSON, but no object
    (http(b"not json"), HolderProbe.UNKNOWN),
], indirect=["endpoint"], ids=["alive", "another-process", "body-cut", "headers-cut", "closed", "no-http",
                               "json-list", "no-json"])
def test_a_probe_of_the_holder_says_what_it_learned_and_never_raises(endpoint: str,
                                                                   expected: HolderProbe) -> None:
    assert probe_holder(endpoint, "pod-a/1", timeout=5) == expected


def test_a_holder_whose_port_refuses_is_gone() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: the connection is refused
        assert probe_holder(f"127.0.0.1:{port}", "pod-a/1", timeout=5) == HolderProbe.GONE


def test_a_holder_without_an_address_is_unknown() -> None:
    assert probe_holder(None, "pod-a/1") == HolderProbe.UNKNOWN
