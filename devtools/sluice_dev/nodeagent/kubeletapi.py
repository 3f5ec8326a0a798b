"""A sliver of the kubelet's HTTPS API, so that ``kubectl logs`` works: ``/containerLogs``.

The serving certificate is issued by the cluster itself: the agent generates a key and a CSR
(``openssl``), submits it with signer ``kubernetes.io/kubelet-serving``, approves it (it holds
admin credentials) and waits for the controller-manager to sign it. Clients must present a
certificate signed by the cluster CA (the API server's kubelet client certificate does), which
is the authentication the API server's node proxy relies on. Anything else answers 404.
"""

from __future__ import annotations

import base64
import logging
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sluice_dev.nodeagent.kubeapi import Api

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MARKER = b"--- "  # the agent's start-of-instance line in a container log


def instance_log(data: bytes, previous: bool) -> bytes:
    """The current (or previous) container instance's part of a log file written by the agent."""
    starts = [0] if data.startswith(MARKER) else []
    starts += [i + 1 for i in range(len(data)) if data[i : i + 1] == b"\n" and data[i + 1 : i + 5] == MARKER]
    if not starts:
        return b"" if previous else data
    if previous:
        if len(starts) < 2:
            return b""
        chunk = data[starts[-2] : starts[-1]]
    else:
        chunk = data[starts[-1] :]
    return chunk.split(b"\n", 1)[1] if b"\n" in chunk else b""


def tail_lines(data: bytes, count: int | None) -> bytes:
    if count is None:
        return data
    if count <= 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-count:])


def issue_serving_cert(api: Api, node_name: str, directory: Path, timeout: float = 60.0) -> tuple[Path, Path]:
    """Key and certificate for ``127.0.0.1``/``node_name``, signed through the CSR API."""
    directory.mkdir(parents=True, exist_ok=True)
    key, csr = directory / "kubelet.key", directory / "kubelet.csr"
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            f"/O=system:nodes/CN=system:node:{node_name}",
            "-addext",
            f"subjectAltName=IP:127.0.0.1,DNS:{node_name},DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    key.chmod(0o600)
    name = f"sluice-nodeagent-{node_name}-{int(time.time())}"
    obj = api.create(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(csr.read_bytes()).decode(),
                "signerName": "kubernetes.io/kubelet-serving",
                "usages": ["digital signature", "key encipherment", "server auth"],
            },
        },
    )
    obj.setdefault("status", {})["conditions"] = [
        {
            "type": "Approved",
            "status": "True",
            "reason": "SluiceNodeAgent",
            "message": "approved by the sluice node agent for its own serving certificate",
        }
    ]
    api.put(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval", obj)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cert = (
            api.get(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}")
            .get("status", {})
            .get("certificate")
        )
        if cert:
            crt = directory / "kubelet.crt"
            crt.write_bytes(base64.b64decode(cert))
            return key, crt
        time.sleep(0.5)
    raise TimeoutError(f"certificate signing request {name} was not signed within {timeout:.0f}s")


LogLocator = Callable[[str, str, str], "tuple[Path, Callable[[], bool]] | None"]


def serve(api: Api, key: Path, crt: Path, locate: LogLocator) -> ThreadingHTTPServer:
    """Start the HTTPS server on 127.0.0.1 (free port); ``locate(ns, pod, container)`` finds a log
    file and a "still running" check (for ``follow``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if len(parts) != 4 or parts[0] != "containerLogs":
                self.send_error(404, "only /containerLogs is served by the sluice node agent")
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            found = locate(parts[1], parts[2], parts[3])
            if found is None:
                self.send_error(404, f"container {parts[3]} of pod {parts[1]}/{parts[2]} not found")
                return
            path, running = found
            data = path.read_bytes() if path.exists() else b""
            previous = query.get("previous") == "true"
            body = instance_log(data, previous)
            tail = int(query["tailLines"]) if query.get("tailLines", "").lstrip("-").isdigit() else None
            body = tail_lines(body, tail)
            if query.get("limitBytes", "").isdigit():
                body = body[: int(query["limitBytes"])]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            if query.get("follow") != "true" or previous:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            offset = len(data)
            try:
                while True:
                    size = path.stat().st_size if path.exists() else 0
                    if size > offset:
                        with open(path, "rb") as handle:
                            handle.seek(offset)
                            chunk = handle.read(size - offset)
                        offset = size
                        if MARKER in chunk:  # a new instance started: stop like the kubelet does
                            chunk = chunk.split(b"\n" + MARKER, 1)[0]
                            self.wfile.write(chunk)
                            return
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    elif not running():
                        return
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                return

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(crt), str(key))
    if api.ca_file:
        context.load_verify_locations(api.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True).start()
    return server
