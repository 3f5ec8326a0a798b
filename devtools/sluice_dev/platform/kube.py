"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, controller-manager, scheduler.

This is the envtest recipe plus the controller-manager and the scheduler, so that garbage
collection, service-account tokens, PVC binding, workload controllers and scheduling are real.
The kubelet is not part of it: the real node (``sluice_dev.platform.node``) registers against it.

Everything lives under ``<state_dir>/kube/``: ``pki/`` (certificates, reused across restarts),
``*.kubeconfig``, ``<process>.pid``, ``<process>.log`` and ``etcd-data/``. The etcd data is wiped
on every ``start``: each start is a fresh, empty cluster, which also makes recovery after a crash
trivial (leftover processes are stopped first).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform import kube_build
from sluice_dev.platform.common import (
    PlatformError,
    Started,
    free_port,
    read_pid,
    spawn,
    stop_pid,
    tail,
)
from sluice_dev.platform.kube_certs import Pki, ensure_pki, write_kubeconfig

VERSION: str = kube_build.VERSION
COMPONENT = "kubernetes"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Start order; stopped in reverse.
PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

ETCD_TIMEOUT = 60.0
APISERVER_TIMEOUT = 240.0
CONTROLLERS_TIMEOUT = 180.0


def provision(log: Callable[[str], None] = print) -> Path:
    """Build (once per version) kube-*, kubectl, etcd and helm; return the dir holding them all."""
    return kube_build.provision(log)


def kube_dir(state_dir: Path) -> Path:
    return state_dir / "kube"


def _pid_path(state_dir: Path, name: str) -> Path:
    return kube_dir(state_dir) / f"{name}.pid"


def _log_path(state_dir: Path, name: str) -> Path:
    return kube_dir(state_dir) / f"{name}.log"


def stop(state_dir: Path) -> None:
    """Stop every control-plane process named by a pid file; idempotent."""
    for name in reversed(PROCESSES):
        stop_pid(_pid_path(state_dir, name))


def stop_apiserver(state_dir: Path) -> list[str]:
    """Stop the running kube-apiserver (SIGTERM, as a node's supervisor would) and return its
    command line, for :func:`start_apiserver` (an outage, in end-to-end tests)."""
    pid = read_pid(_pid_path(state_dir, "kube-apiserver"))
    if pid is None:
        raise PlatformError("kube-apiserver", "not running", _log_path(state_dir, "kube-apiserver"))
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    stop_pid(_pid_path(state_dir, "kube-apiserver"))
    return argv


def start_apiserver(state_dir: Path, argv: list[str], server: str) -> None:
    """Start the kube-apiserver again with ``argv`` (its etcd kept everything) and wait until
    ``server`` reports ready."""
    group = _Group(state_dir)
    group.spawn("kube-apiserver", argv)
    pki = ensure_pki(kube_dir(state_dir))
    group.wait("kube-apiserver", lambda: _https_get(f"{server}/readyz", pki)[0] == 200,
               timeout=APISERVER_TIMEOUT, what="report /readyz ok")


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _https_get(url: str, pki: Pki | None, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url``; with ``pki`` verify the server and present the admin client certificate."""
    if pki is not None:
        context = ssl.create_default_context(cafile=str(pki.ca_crt))
        context.load_cert_chain(str(pki.crt("admin")), str(pki.key("admin")))
    else:
        context = ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


class _Group:
    """The processes started so far, watched together while waiting for readiness."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, argv: list[str]) -> None:
        log_path = _log_path(self.state_dir, name)
        with open(log_path, "ab") as handle:
            handle.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} $ {' '.join(argv)}\n".encode())
        self.procs[name] = spawn(name, argv, log_path=log_path, pid_path=_pid_path(self.state_dir, name))

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log_path = _log_path(self.state_dir, name)
                raise PlatformError(
                    name,
                    f"process exited with code {proc.returncode}; last log lines:\n{tail(log_path)}",
                    log_path,
                )

    def wait(self, name: str, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll ``check`` until true; fail at once if any started process dies."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            self.check_alive()
            try:
                if check():
                    return
            except Exception as exc:  # any failure means "not yet"
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                log_path = _log_path(self.state_dir, name)
                detail = f" (last check error: {last_error})" if last_error else ""
                raise PlatformError(
                    name,
                    f"did not {what} within {timeout:.0f}s{detail}; last log lines:\n{tail(log_path)}",
                    log_path,
                )
            time.sleep(0.5)


def _require_binaries(bin_dir: Path) -> None:
    for name in kube_build.BINARIES:
        if not os.access(bin_dir / name, os.X_OK):
            raise PlatformError(
                COMPONENT,
                f"{bin_dir / name} is missing; run sluice_dev.platform.kube.provision() first",
            )


def start(
    state_dir: Path, *, advertise_address: str | None = None, node_monitor_grace_period: str | None = None
) -> Started:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1.

    With ``advertise_address`` (the real node's IP, see ``sluice_dev.platform.node``; its bridge
    must exist, ``node.network_up``) the API server listens on that address only and publishes it
    as the ``kubernetes`` Service's endpoint, so that pods reach it through the Service; every
    kubeconfig (admin, controllers, node) then uses it too (the host reaches the bridge).

    Returns once the apiserver is ready and the controller-manager has created the ``default``
    ServiceAccount. Leftovers of an earlier run in ``state_dir`` are stopped first; on failure every
    process started here is stopped again and ``PlatformError`` names the failing process and its log.

    ``node_monitor_grace_period`` (such as ``20s``; the controller manager's default is 50 s): how
    long a node may miss its heartbeats before it is NotReady (two nodes, for node-loss tests).
    """
    state_dir = state_dir.resolve()
    directory = kube_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stop(state_dir)
    bin_dir = kube_build.bin_dir()
    _require_binaries(bin_dir)
    pki = ensure_pki(directory)
    for attempt in range(2):
        try:
            return _start(
                state_dir, bin_dir, pki, _Group(state_dir), advertise_address, node_monitor_grace_period
            )
        except PlatformError as exc:
            stop(state_dir)
            # Free ports are picked up front; another process may grab one before we bind it.
            busy = exc.log_path is not None and "address already in use" in tail(exc.log_path, 5)
            if attempt == 0 and busy:
                continue
            raise
        except BaseException:
            stop(state_dir)
            raise
    raise AssertionError("unreachable")


def apiserver_network_args(advertise_address: str | None) -> list[str]:
    """Where kube-apiserver listens and what it publishes as the ``kubernetes`` endpoint."""
    if advertise_address is None:
        # The `kubernetes` Service cannot get endpoints: Endpoints reject loopback addresses.
        # In-cluster clients get the server address directly (KUBERNETES_SERVICE_HOST/PORT).
        return [
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"
        ]
    # The node's name does not resolve: logs/exec/port-forward go to its InternalIP. Only our
    # bridge's address: nothing of the platform listens on the machine's other interfaces.
    return [
        f"--bind-address={advertise_address}",
        f"--advertise-address={advertise_address}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
    ]


def controller_manager_node_args(node_monitor_grace_period: str | None) -> list[str]:
    """How soon a silent node is NotReady: the default (50 s), or ``node_monitor_grace_period``."""
    if node_monitor_grace_period is None:
        return []
    return [f"--node-monitor-grace-period={node_monitor_grace_period}", "--node-monitor-period=2s"]


def _start(
    state_dir: Path, bin_dir: Path, pki: Pki, group: _Group, advertise_address: str | None = None,
    node_monitor_grace_period: str | None = None,
) -> Started:
    directory = kube_dir(state_dir)
    etcd_client, etcd_peer, apiserver_port, kcm_port, scheduler_port = _ports(5)

    # etcd: a fresh single-member cluster, plain HTTP on loopback only.
    data_dir = directory / "etcd-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    etcd_url = f"http://127.0.0.1:{etcd_client}"
    peer_url = f"http://127.0.0.1:{etcd_peer}"
    group.spawn("etcd", [
        str(bin_dir / "etcd"),
        "--name=sluice-dev",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={etcd_url}",
        f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=sluice-dev={peer_url}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ])
    group.wait(
        "etcd",
        lambda: json.loads(_http_get(f"{etcd_url}/health")[1]).get("health") == "true",
        timeout=ETCD_TIMEOUT, what="report healthy",
    )

    server = f"https://{advertise_address or '127.0.0.1'}:{apiserver_port}"
    group.spawn("kube-apiserver", [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        *apiserver_network_args(advertise_address),
        f"--secure-port={apiserver_port}",
        f"--cert-dir={directory / 'apiserver-certs'}",
        f"--tls-cert-file={pki.crt('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--client-ca-file={pki.ca_crt}",
        f"--kubelet-certificate-authority={pki.ca_crt}",
        f"--kubelet-client-certificate={pki.crt('apiserver-kubelet-client')}",
        f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
        f"--requestheader-client-ca-file={pki.ca_crt}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.crt('front-proxy-client')}",
        f"--proxy-client-key-file={pki.key('front-proxy-client')}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ])

    def apiserver_ready() -> bool:
        return _https_get(f"{server}/readyz", pki)[0] == 200

    group.wait("kube-apiserver", apiserver_ready, timeout=APISERVER_TIMEOUT, what="report /readyz ok")

    admin = write_kubeconfig(directory / "admin.kubeconfig", server=server, pki=pki, user="admin")
    kcm_config = write_kubeconfig(
        directory / "kube-controller-manager.kubeconfig", server=server, pki=pki,
        user="kube-controller-manager",
    )
    scheduler_config = write_kubeconfig(
        directory / "kube-scheduler.kubeconfig", server=server, pki=pki, user="kube-scheduler"
    )

    group.spawn("kube-controller-manager", [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kcm_config}",
        f"--authentication-kubeconfig={kcm_config}",
        f"--authorization-kubeconfig={kcm_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={kcm_port}",
        f"--cert-dir={directory / 'kube-controller-manager-certs'}",
        "--controllers=*",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_crt}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        *controller_manager_node_args(node_monitor_grace_period),
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ])
    group.spawn("kube-scheduler", [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={scheduler_config}",
        f"--authentication-kubeconfig={scheduler_config}",
        f"--authorization-kubeconfig={scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={scheduler_port}",
        f"--cert-dir={directory / 'kube-scheduler-certs'}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ])

    def default_service_account() -> bool:
        url = f"{server}/api/v1/namespaces/default/serviceaccounts/default"
        return _https_get(url, pki)[0] == 200

    group.wait(
        "kube-controller-manager", default_service_account, timeout=CONTROLLERS_TIMEOUT,
        what="create the default ServiceAccount",
    )
    group.wait(
        "kube-scheduler",
        lambda: _https_get(f"https://127.0.0.1:{scheduler_port}/healthz", None)[0] == 200,
        timeout=CONTROLLERS_TIMEOUT, what="report /healthz ok",
    )
    group.check_alive()

    return Started(
        component=COMPONENT,
        env={"KUBECONFIG": str(admin)},
        logs=[_log_path(state_dir, name) for name in PROCESSES],
        info={
            "bin_dir": str(bin_dir),
            "server": server,
            "ca": str(pki.ca_crt),
            "ca_key": str(pki.ca_key),
            "admin_kubeconfig": str(admin),
            "etcd": etcd_url,
            "version": VERSION,
            **({"node_monitor_grace_period": node_monitor_grace_period} if node_monitor_grace_period else {}),
        },
    )
