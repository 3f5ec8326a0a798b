"""Starting and stopping the real node: bridge, containerd, kubelet, kube-proxy, volumes, DNS.

Everything lives under ``<state_dir>/node/`` (see ``config.Layout``). The node authenticates as
itself: a client certificate for ``system:node:sluice-node`` in ``system:nodes`` (so the Node
authorizer and NodeRestriction apply to it as to any kubelet), a serving certificate for its
IP signed by the cluster CA (so ``kubectl logs/exec`` verify it), and ``system:kube-proxy`` for
kube-proxy; all issued from the control plane's CA in ``<state_dir>/kube/pki`` on every start.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform import kube_build
from sluice_dev.platform.common import PlatformError, Started, free_port, spawn, stop_pid, tail
from sluice_dev.platform.kube import _http_get, _https_get
from sluice_dev.platform.kube_certs import Pki, issue, write_kubeconfig
from sluice_dev.platform.node import config, dns, images, teardown, volumes
from sluice_dev.platform.node.provision import missing_tools

COMPONENT = "node"
PROCESSES = ("containerd", "kubelet", "kube-proxy", "volumes")
CONTAINERD_TIMEOUT = 60.0
KUBELET_TIMEOUT = 180.0
PROXY_TIMEOUT = 60.0
DNS_TIMEOUT = 120.0


def layout(state_dir: Path) -> config.Layout:
    return config.Layout(state_dir.resolve() / COMPONENT)


def _wait(
    process: str, lay: config.Layout, check: Callable[[], bool], *, timeout: float, what: str,
    procs: dict[str, subprocess.Popen[bytes]],
) -> None:
    """Poll ``check``; fail naming ``process`` and its log, at once if a started process dies."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                log_path = lay.log(name)
                raise PlatformError(
                    name, f"exited with code {proc.returncode}; last log lines:\n{tail(log_path)}", log_path
                )
        try:
            if check():
                return
        except Exception as exc:  # any failure means "not yet"
            last = f" (last check error: {type(exc).__name__}: {exc})"
        if time.monotonic() > deadline:
            log_path = lay.log(process)
            message = f"did not {what} within {timeout:.0f}s{last}; last log lines:\n{tail(log_path)}"
            raise PlatformError(process, message, log_path)
        time.sleep(0.5)


def _sh(process: str, lay: config.Layout, argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        with open(lay.log(process), "a") as handle:
            handle.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}\n")
        raise PlatformError(process, f"`{' '.join(argv)}` failed: {result.stderr.strip()}", lay.log(process))
    return result.stdout


def _claim_bridge(lay: config.Layout) -> None:
    """Create our bridge (gateway address = node IP), refusing if another live node owns it.

    The owning state dir is written into the bridge's alias; a bridge left by a crashed node
    (its processes gone) is torn down with that node's leftovers and taken over.
    """
    owner = teardown.bridge_owner()
    if owner is not None and owner != str(lay.dir):
        if teardown.owned_elsewhere(lay):
            raise PlatformError(
                COMPONENT, f"another real node (state {owner}) is running on this machine; stop it first"
            )
        teardown.teardown(config.Layout(Path(owner)))
    if not teardown.bridge_exists():
        _sh(COMPONENT, lay, ["ip", "link", "add", config.BRIDGE, "type", "bridge"])
    _sh(COMPONENT, lay, ["ip", "link", "set", config.BRIDGE, "alias", str(lay.dir)])
    prefix = config.POD_SUBNET.split("/")[1]
    address = f"{config.node_ip()}/{prefix}"
    if address not in _sh(COMPONENT, lay, ["ip", "-o", "-4", "addr", "show", "dev", config.BRIDGE]):
        _sh(COMPONENT, lay, ["ip", "addr", "add", address, "dev", config.BRIDGE])
    _sh(COMPONENT, lay, ["ip", "link", "set", config.BRIDGE, "up"])
    # The bridge plugin turns forwarding on; remember the value to restore on stop.
    saved = lay.dir / "ip_forward.orig"
    if not saved.exists():
        saved.write_text(teardown.IP_FORWARD.read_text())
    teardown.IP_FORWARD.write_text("1\n")


def network_up(state_dir: Path) -> str:
    """Create the node's bridge with the node IP before anything listens on that address (Kafka's
    pod listener, the API server); idempotent. Returns the node IP. ``stop`` removes it."""
    lay = layout(state_dir.resolve())
    lay.dir.mkdir(parents=True, exist_ok=True)
    _claim_bridge(lay)
    return config.node_ip()


def _certs(state_dir: Path, lay: config.Layout) -> tuple[Pki, str]:
    """Issue the node's certificates from the control plane's CA; return it and the server URL."""
    kube_dir = state_dir / "kube"
    pki = Pki(kube_dir / "pki")
    try:
        server = json.loads((kube_dir / "admin.kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise PlatformError(COMPONENT, f"the control plane is not running in {state_dir} ({exc})") from exc
    node = config.NODE_NAME
    issue(pki, "node-client", f"system:node:{node}", ("system:nodes",))
    issue(pki, "node-serving", f"system:node:{node}", ("system:nodes",),
          server_sans=(f"DNS:{node}", f"IP:{config.node_ip()}", "IP:127.0.0.1"))
    issue(pki, "kube-proxy", "system:kube-proxy", ("system:node-proxier",))
    write_kubeconfig(lay.kubeconfig("node-client"), server=server, pki=pki, user="node-client")
    write_kubeconfig(lay.kubeconfig("kube-proxy"), server=server, pki=pki, user="kube-proxy")
    return pki, server


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def start(state_dir: Path) -> Started:
    """Start the node against the control plane running in ``state_dir``; return once the Node is
    Ready, kube-proxy is healthy and cluster DNS answers. Leftovers of an earlier (crashed) run
    are removed first; on failure everything started here is torn down and ``PlatformError``
    names the process and log."""
    state_dir = state_dir.resolve()
    lay = layout(state_dir)
    stop(state_dir, keep_network=True)
    missing = missing_tools() + [str(p) for p in images.archives() if not p.is_file()]
    node_bin = kube_build.NODE_GROUP.bin_dir
    if missing or not kube_build.NODE_GROUP.complete():
        what = ", ".join(missing) or f"kubelet/kube-proxy in {node_bin}"
        raise PlatformError(COMPONENT, f"{what} missing; run sluice_dev.platform.node.provision() first")
    try:
        return _start(state_dir, lay, node_bin)
    except BaseException:
        stop(state_dir, keep_network=True)  # Kafka and the API server may listen on the node IP
        raise


def _start(state_dir: Path, lay: config.Layout, node_bin: Path) -> Started:
    lay.dir.mkdir(parents=True, exist_ok=True)
    _claim_bridge(lay)
    pki, server = _certs(state_dir, lay)
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def run(name: str, argv: list[str]) -> None:
        with open(lay.log(name), "ab") as handle:
            handle.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} $ {' '.join(argv)}\n".encode())
        procs[name] = spawn(name, argv, log_path=lay.log(name), pid_path=lay.pid(name))

    # containerd, with the CNI config in place and the local images imported
    _write(lay.containerd_config, config.containerd_config(lay))
    _write(lay.cni_conf_dir / "10-sluice.conflist", json.dumps(config.cni_conflist(lay), indent=2))
    containerd = shutil.which("containerd") or "containerd"
    ctr = shutil.which("ctr") or "ctr"
    run("containerd", config.containerd_argv(containerd, lay))
    _wait(
        "containerd", lay,
        lambda: subprocess.run(config.ctr_argv(ctr, lay, "version"), capture_output=True, check=False,
                               timeout=10).returncode == 0,
        timeout=CONTAINERD_TIMEOUT, what="answer `ctr version`", procs=procs,
    )
    for archive in images.archives():
        _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "import", "--no-unpack", str(archive)))

    # kubelet
    kubelet_ports = config.KubeletPorts(server=free_port(), healthz=free_port())
    _write(lay.kubelet_config, json.dumps(config.kubelet_config(
        lay, ca=pki.ca_crt, serving_cert=pki.crt("node-serving"), serving_key=pki.key("node-serving"),
        ports=kubelet_ports, address=config.node_ip(),
    ), indent=2))
    run("kubelet", config.kubelet_argv(
        node_bin / "kubelet", lay, kubeconfig=lay.kubeconfig("node-client"), address=config.node_ip()
    ))
    _wait(
        "kubelet", lay, lambda: _http_get(f"http://127.0.0.1:{kubelet_ports.healthz}/healthz")[0] == 200,
        timeout=KUBELET_TIMEOUT, what="report /healthz ok", procs=procs,
    )

    def node_ready() -> bool:
        status, body = _https_get(f"{server}/api/v1/nodes/{config.NODE_NAME}", pki)
        if status != 200:
            return False
        node = json.loads(body)
        conditions = node["status"].get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        taints = node["spec"].get("taints") or []
        return ready and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)

    _wait("kubelet", lay, node_ready, timeout=KUBELET_TIMEOUT, what="have its Node Ready", procs=procs)

    # kube-proxy
    proxy_ports = config.ProxyPorts(healthz=free_port(), metrics=free_port())
    _write(lay.kube_proxy_config, json.dumps(config.kube_proxy_config(
        kubeconfig=lay.kubeconfig("kube-proxy"), ports=proxy_ports,
    ), indent=2))
    run("kube-proxy", config.kube_proxy_argv(node_bin / "kube-proxy", lay))
    _wait(
        "kube-proxy", lay, lambda: _http_get(f"http://127.0.0.1:{proxy_ports.healthz}/healthz")[0] == 200,
        timeout=PROXY_TIMEOUT, what="report /healthz ok", procs=procs,
    )

    # persistent volumes: the default StorageClass and its hostPath provisioner
    admin = state_dir / "kube" / "admin.kubeconfig"
    run("volumes", volumes.argv(sys.executable, kubeconfig=admin, root=lay.dir / "pv"))
    storage_class = f"{server}/apis/storage.k8s.io/v1/storageclasses/{volumes.CLASS_NAME}"
    _wait(
        "volumes", lay, lambda: _https_get(storage_class, pki)[0] == 200,
        timeout=PROXY_TIMEOUT, what=f"create the {volumes.CLASS_NAME} StorageClass", procs=procs,
    )

    # cluster DNS
    kubectl = str(kube_build.bin_dir() / "kubectl")
    applied = subprocess.run(
        [kubectl, f"--kubeconfig={admin}", "apply", "-f", "-"], input=dns.manifest_json(),
        capture_output=True, text=True, check=False, timeout=120,
    )
    with open(lay.log("coredns"), "a") as handle:
        handle.write(applied.stdout + applied.stderr)
    if applied.returncode != 0:
        raise PlatformError("coredns", f"kubectl apply failed: {applied.stderr.strip()}", lay.log("coredns"))

    def dns_ready() -> bool:
        url = f"{server}/apis/apps/v1/namespaces/{dns.NAMESPACE}/deployments/{dns.NAME}"
        status, body = _https_get(url, pki)
        return status == 200 and int(json.loads(body).get("status", {}).get("readyReplicas") or 0) >= 1

    _wait(
        "kubelet", lay, dns_ready, timeout=DNS_TIMEOUT,
        what=f"run cluster DNS (Deployment {dns.NAMESPACE}/{dns.NAME} ready; kubectl output in "
        f"{lay.log('coredns')})",
        procs=procs,
    )
    return Started(
        component=COMPONENT,
        env={},
        logs=[lay.log(name) for name in PROCESSES],
        info={
            "probe": f"127.0.0.1:{kubelet_ports.healthz}",
            "node": config.NODE_NAME,
            "node_ip": config.node_ip(),
            "state_dir": str(lay.dir),
            "containerd_socket": str(lay.containerd_socket),
            "runc_root": str(lay.runc_root),
            "dns": config.DNS_IP,
        },
    )


def load_images(state_dir: Path, archives: dict[str, Path]) -> None:
    """Import OCI archives (``make images``: the reference each archive carries, such as
    ``localhost/sluice-runtime:0.1.0`` -> archive) into the running node's containerd, and tag
    each with the name an unqualified reference means to a kubelet (``config.image_alias``), as
    ``kind load`` does: the operator's default runtime image and the chart's defaults then run
    as they are, never pulled with ``IfNotPresent``. They stay across node restarts
    (containerd's root is kept)."""
    lay = layout(state_dir.resolve())
    ctr = shutil.which("ctr") or "ctr"
    if not lay.containerd_socket.exists():
        raise PlatformError(COMPONENT, f"no node runs from {state_dir} (no {lay.containerd_socket})")
    for reference, archive in archives.items():
        _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "import", "--no-unpack", str(archive)))
        alias = config.image_alias(reference)
        _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "tag", "--force", reference, alias))


def tag_image(state_dir: Path, image: str, alias: str) -> None:
    """Give a local image already in the node's containerd another name (``sluice-runtime:0.1.0`` ->
    ``sluice-runtime:next``: a "new" runtime image with the same content, for engine upgrades)."""
    lay = layout(state_dir.resolve())
    ctr = shutil.which("ctr") or "ctr"
    source, target = (config.image_alias(f"localhost/{name}") for name in (image, alias))
    _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "tag", "--force", source, target))


def stop(state_dir: Path, *, keep_network: bool = False) -> None:
    """Stop kube-proxy, the kubelet and containerd, then remove everything the node created on
    the machine (``teardown.teardown``); idempotent, and works after a crash.

    ``keep_network`` keeps our bridge and the node IP on it (``network_up``), for a node that is
    started again right away under a running Kafka and control plane."""
    lay = layout(state_dir)
    for name in reversed(PROCESSES):
        stop_pid(lay.pid(name), grace=15.0)
    if lay.dir.exists() or teardown.bridge_owner() == str(lay.dir):
        kube_proxy = kube_build.NODE_GROUP.bin_dir / "kube-proxy"
        if kube_proxy.exists() and not teardown.owned_elsewhere(lay):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)
        teardown.teardown(lay, keep_bridge=keep_network)


def leftovers(state_dir: Path) -> list[str]:
    """What the node left on the machine after ``stop`` (empty when nothing)."""
    return teardown.leftovers(layout(state_dir))
