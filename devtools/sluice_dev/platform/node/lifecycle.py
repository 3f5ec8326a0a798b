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
from sluice_dev.platform.common import (
    PlatformError,
    Started,
    free_port,
    pid_alive,
    read_pid,
    spawn,
    stop_pid,
    tail,
)
from sluice_dev.platform.kube import _http_get, _https_get
from sluice_dev.platform.kube_certs import Pki, issue, write_kubeconfig
from sluice_dev.platform.node import config, dns, images, teardown, topology, volumes
from sluice_dev.platform.node.provision import missing_tools

COMPONENT = "node"
PROCESSES = ("containerd", "kubelet", "kube-proxy", "volumes")
#: what each node runs (node 1 runs the volume provisioner besides, a cluster add-on)
NODE_PROCESSES = ("containerd", "kubelet", "kube-proxy")
CONTAINERD_TIMEOUT = 60.0
KUBELET_TIMEOUT = 180.0
PROXY_TIMEOUT = 60.0
DNS_TIMEOUT = 120.0
#: how many nodes the node component was started with (in node 1's dir)
TOPOLOGY_FILE = "topology.json"


def layout(state_dir: Path, spec: topology.NodeSpec | None = None) -> config.Layout:
    """Node 1's layout (``<state>/node``), or ``spec``'s (``<state>/node-<n>``)."""
    return config.Layout(topology.node_dir(state_dir.resolve(), spec or topology.node_spec(1)))


def started_nodes(state_dir: Path) -> int:
    """How many nodes the last ``start`` in ``state_dir`` started (1 when unknown)."""
    try:
        return int(json.loads((layout(state_dir).dir / TOPOLOGY_FILE).read_text())["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


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


def _cert_name(spec: topology.NodeSpec, role: str) -> str:
    """``node-client``/``node-serving`` for node 1 (as with one node), ``node-<n>-...`` else."""
    return f"node-{role}" if spec.index == 1 else f"node-{spec.index}-{role}"


def _certs(
    state_dir: Path, lay: config.Layout, spec: topology.NodeSpec | None = None, *, proxy: bool = True
) -> tuple[Pki, str]:
    """Issue the node's certificates from the control plane's CA; return it and the server URL.
    kube-proxy's (``system:kube-proxy``, one for every node) with ``proxy`` or when missing (not
    while another node's kube-proxy uses it)."""
    spec = spec or topology.node_spec(1)
    kube_dir = state_dir / "kube"
    pki = Pki(kube_dir / "pki")
    try:
        server = json.loads((kube_dir / "admin.kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise PlatformError(COMPONENT, f"the control plane is not running in {state_dir} ({exc})") from exc
    node = spec.name
    lay.dir.mkdir(parents=True, exist_ok=True)
    client, serving = _cert_name(spec, "client"), _cert_name(spec, "serving")
    issue(pki, client, f"system:node:{node}", ("system:nodes",))
    issue(pki, serving, f"system:node:{node}", ("system:nodes",),
          server_sans=(f"DNS:{node}", f"IP:{spec.node_ip}", "IP:127.0.0.1"))
    if proxy or not pki.crt("kube-proxy").is_file():
        issue(pki, "kube-proxy", "system:kube-proxy", ("system:node-proxier",))
    write_kubeconfig(lay.kubeconfig("node-client"), server=server, pki=pki, user=client)
    write_kubeconfig(lay.kubeconfig("kube-proxy"), server=server, pki=pki, user="kube-proxy")
    return pki, server


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def start(state_dir: Path, nodes: int = 1) -> Started:
    """Start the node against the control plane running in ``state_dir``; return once the Node is
    Ready, kube-proxy is healthy and cluster DNS answers. Leftovers of an earlier (crashed) run
    are removed first; on failure everything started here is torn down and ``PlatformError``
    names the process and log.

    ``nodes=2`` starts a second node, ``sluice-node-2``, in a network namespace of its own once
    the first one runs (``topology``); ``start`` returns when it is Ready too."""
    topology.node_specs(nodes)  # refuses a count the platform does not have
    state_dir = state_dir.resolve()
    lay = layout(state_dir)
    stop(state_dir, keep_network=True)
    missing = missing_tools() + [str(p) for p in images.archives() if not p.is_file()]
    if nodes > 1:
        missing += [tool for tool in ("nsenter", "unshare", "sysctl") if shutil.which(tool) is None]
    node_bin = kube_build.NODE_GROUP.bin_dir
    if missing or not kube_build.NODE_GROUP.complete():
        what = ", ".join(missing) or f"kubelet/kube-proxy in {node_bin}"
        raise PlatformError(COMPONENT, f"{what} missing; run sluice_dev.platform.node.provision() first")
    try:
        return _start(state_dir, lay, node_bin, nodes)
    except BaseException:
        stop(state_dir, keep_network=True)  # Kafka and the API server may listen on the node IP
        raise


def _node_network(spec: topology.NodeSpec, lay: config.Layout) -> Path:
    """A fresh network namespace for ``spec``, bind-mounted under its dir, wired to ``sluice0``."""
    netns = topology.netns_file(lay)
    netns.parent.mkdir(parents=True, exist_ok=True)
    netns.touch()
    _sh(COMPONENT, lay, ["unshare", f"--net={netns}", "true"])
    for argv in topology.network_commands(spec, netns):
        _sh(COMPONENT, lay, argv)
    return netns


def _start_node(
    state_dir: Path, spec: topology.NodeSpec, lay: config.Layout, node_bin: Path, *, pki: Pki, server: str,
    nodes: int, import_images: bool = True, procs: dict[str, subprocess.Popen[bytes]] | None = None,
) -> dict[str, str]:
    """containerd, the kubelet and kube-proxy of one node; returns once its Node is Ready and
    kube-proxy healthy. A node in a namespace of its own gets it first (``_node_network``), and
    its processes run in it; with two nodes, the Node's ``podCIDR`` is set to its CNI range."""
    lay.dir.mkdir(parents=True, exist_ok=True)
    netns = _node_network(spec, lay) if spec.own_netns else None
    # a node in a namespace of its own serves its health checks on its node IP (the host's view)
    local = spec.node_ip if netns is not None else "127.0.0.1"
    procs = {} if procs is None else procs  # the processes started so far, watched while waiting

    def run(name: str, argv: list[str]) -> None:
        if netns is not None:
            argv = topology.in_netns(netns, argv)
        with open(lay.log(name), "ab") as handle:
            handle.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} $ {' '.join(argv)}\n".encode())
        procs[name] = spawn(name, argv, log_path=lay.log(name), pid_path=lay.pid(name))

    # containerd, with the CNI config in place and the local images imported
    _write(lay.containerd_config, config.containerd_config(lay))
    conflist = topology.cni_conflist(lay, spec, nodes)
    _write(lay.cni_conf_dir / "10-sluice.conflist", json.dumps(conflist, indent=2))
    containerd = shutil.which("containerd") or "containerd"
    ctr = shutil.which("ctr") or "ctr"
    run("containerd", config.containerd_argv(containerd, lay))
    _wait(
        "containerd", lay,
        lambda: subprocess.run(config.ctr_argv(ctr, lay, "version"), capture_output=True, check=False,
                               timeout=10).returncode == 0,
        timeout=CONTAINERD_TIMEOUT, what="answer `ctr version`", procs=procs,
    )
    teardown.share_cpu_with_pods()
    if import_images:
        for archive in images.archives():
            _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "import", "--no-unpack", str(archive)))

    # kubelet
    kubelet_ports = config.KubeletPorts(server=free_port(), healthz=free_port())
    serving = _cert_name(spec, "serving")
    _write(lay.kubelet_config, json.dumps(config.kubelet_config(
        lay, ca=pki.ca_crt, serving_cert=pki.crt(serving), serving_key=pki.key(serving),
        ports=kubelet_ports, address=spec.node_ip, healthz_address=local,
        node_lease_seconds=topology.NODE_LEASE_SECONDS if nodes > 1 else None,
    ), indent=2))
    run("kubelet", config.kubelet_argv(
        node_bin / "kubelet", lay, kubeconfig=lay.kubeconfig("node-client"), node_name=spec.name,
        address=spec.node_ip,
    ))
    _wait(
        "kubelet", lay, lambda: _http_get(f"http://{local}:{kubelet_ports.healthz}/healthz")[0] == 200,
        timeout=KUBELET_TIMEOUT, what="report /healthz ok", procs=procs,
    )
    node_url = f"{server}/api/v1/nodes/{spec.name}"
    if nodes > 1:
        _wait("kubelet", lay, lambda: _https_get(node_url, pki)[0] == 200, timeout=KUBELET_TIMEOUT,
              what="register its Node", procs=procs)
        _set_pod_cidr(state_dir, spec)

    def node_ready() -> bool:
        status, body = _https_get(node_url, pki)
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
        kubeconfig=lay.kubeconfig("kube-proxy"), ports=proxy_ports, node_name=spec.name,
        cluster_cidr=topology.CLUSTER_CIDR if spec.own_netns else config.POD_SUBNET, bind_address=local,
    ), indent=2))
    run("kube-proxy", config.kube_proxy_argv(node_bin / "kube-proxy", lay))
    _wait(
        "kube-proxy", lay, lambda: _http_get(f"http://{local}:{proxy_ports.healthz}/healthz")[0] == 200,
        timeout=PROXY_TIMEOUT, what="report /healthz ok", procs=procs,
    )
    return {
        "probe": f"{local}:{kubelet_ports.healthz}",
        "node": spec.name,
        "node_ip": spec.node_ip,
        "state_dir": str(lay.dir),
        "containerd_socket": str(lay.containerd_socket),
        "runc_root": str(lay.runc_root),
    }


def _set_pod_cidr(state_dir: Path, spec: topology.NodeSpec) -> None:
    """The Node's ``spec.podCIDR`` = its CNI range, unless already set (it is immutable: a node
    powered on again keeps its object)."""
    from sluice_dev.platform.node.kubeapi import Api

    api = Api(state_dir / "kube" / "admin.kubeconfig")
    path = f"/api/v1/nodes/{spec.name}"
    current = api.get(path)["spec"].get("podCIDR")
    if current is None:
        api.patch(path, topology.pod_cidr_patch(spec))
    elif current != spec.pod_subnet:
        raise PlatformError(COMPONENT, f"Node {spec.name} has podCIDR {current}, not {spec.pod_subnet}")


def _start(state_dir: Path, lay: config.Layout, node_bin: Path, nodes: int) -> Started:
    lay.dir.mkdir(parents=True, exist_ok=True)
    (lay.dir / TOPOLOGY_FILE).write_text(json.dumps({"nodes": nodes}))
    _claim_bridge(lay)
    first = topology.node_spec(1)
    pki, server = _certs(state_dir, lay, first)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    info = _start_node(state_dir, first, lay, node_bin, pki=pki, server=server, nodes=nodes, procs=procs)

    def run(name: str, argv: list[str]) -> None:
        with open(lay.log(name), "ab") as handle:
            handle.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} $ {' '.join(argv)}\n".encode())
        procs[name] = spawn(name, argv, log_path=lay.log(name), pid_path=lay.pid(name))

    # persistent volumes: the default StorageClass and its hostPath provisioner (with two nodes,
    # its volumes are node 1's: they get a node affinity to it)
    admin = state_dir / "kube" / "admin.kubeconfig"
    run("volumes", volumes.argv(sys.executable, kubeconfig=admin, root=lay.dir / "pv",
                                node=first.name if nodes > 1 else None))
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
    info["dns"] = config.DNS_IP
    for spec in topology.node_specs(nodes)[1:]:
        began = time.monotonic()
        other = layout(state_dir, spec)
        _certs(state_dir, other, spec, proxy=False)
        extra = _start_node(state_dir, spec, other, node_bin, pki=pki, server=server, nodes=nodes)
        prefix = f"node_{spec.index}_"
        info.update({prefix + key: value for key, value in extra.items()})
        info[prefix + "start_seconds"] = f"{time.monotonic() - began:.1f}"
    info["nodes"] = str(nodes)
    return Started(
        component=COMPONENT,
        env={},
        logs=[lay.log(name) for name in PROCESSES] + [
            layout(state_dir, spec).log(name)
            for spec in topology.node_specs(nodes)[1:] for name in NODE_PROCESSES
        ],
        info=info,
    )


def _running_layouts(state_dir: Path) -> list[config.Layout]:
    """The layouts of the nodes whose containerd has a socket (node 1 first)."""
    found = [layout(state_dir, spec) for spec in topology.node_specs(topology.MAX_NODES)]
    return [lay for lay in found if lay.containerd_socket.exists()]


def load_images(state_dir: Path, archives: dict[str, Path]) -> None:
    """Import OCI archives (``make images``: the reference each archive carries, such as
    ``localhost/sluice-runtime:0.1.0`` -> archive) into the running nodes' containerd, and tag
    each with the name an unqualified reference means to a kubelet (``config.image_alias``), as
    ``kind load`` does: the operator's default runtime image and the chart's defaults then run
    as they are, never pulled with ``IfNotPresent``. They stay across node restarts
    (containerd's root is kept)."""
    ctr = shutil.which("ctr") or "ctr"
    if not layout(state_dir).containerd_socket.exists():
        lay = layout(state_dir)
        raise PlatformError(COMPONENT, f"no node runs from {state_dir} (no {lay.containerd_socket})")
    for lay in _running_layouts(state_dir):
        for reference, archive in archives.items():
            _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "import", "--no-unpack", str(archive)))
            alias = config.image_alias(reference)
            _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "tag", "--force", reference, alias))


def tag_image(state_dir: Path, image: str, alias: str) -> None:
    """Give a local image already in the nodes' containerd another name (``sluice-runtime:0.1.0`` ->
    ``sluice-runtime:next``: a "new" runtime image with the same content, for engine upgrades)."""
    ctr = shutil.which("ctr") or "ctr"
    source, target = (config.image_alias(f"localhost/{name}") for name in (image, alias))
    for lay in _running_layouts(state_dir) or [layout(state_dir)]:
        _sh("containerd", lay, config.ctr_argv(ctr, lay, "images", "tag", "--force", source, target))


def _stop_isolated(state_dir: Path, spec: topology.NodeSpec, *, power_loss: bool = False) -> None:
    """Stop (or, with ``power_loss``, SIGKILL) a node in a namespace of its own and remove all it
    made on the machine: its namespace with it."""
    lay = layout(state_dir, spec)
    if not power_loss:
        for name in reversed(NODE_PROCESSES):
            stop_pid(lay.pid(name), grace=15.0)
    teardown.teardown_isolated(
        lay, host_link=spec.host_veth, route=topology.host_route_command("del", spec), power_loss=power_loss
    )
    for name in NODE_PROCESSES:
        lay.pid(name).unlink(missing_ok=True)


def stop(state_dir: Path, *, keep_network: bool = False) -> None:
    """Stop kube-proxy, the kubelet and containerd, then remove everything the node created on
    the machine (``teardown.teardown``); idempotent, and works after a crash. A second node
    (``start(..., nodes=2)``) goes first, with its network namespace.

    ``keep_network`` keeps our bridge and the node IP on it (``network_up``), for a node that is
    started again right away under a running Kafka and control plane."""
    lay = layout(state_dir)
    for spec in topology.node_specs(topology.MAX_NODES)[1:]:
        if layout(state_dir, spec).dir.exists():
            _stop_isolated(state_dir, spec)
    for name in reversed(PROCESSES):
        stop_pid(lay.pid(name), grace=15.0)
    if lay.dir.exists() or teardown.bridge_owner() == str(lay.dir):
        kube_proxy = kube_build.NODE_GROUP.bin_dir / "kube-proxy"
        if kube_proxy.exists() and not teardown.owned_elsewhere(lay):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)
        teardown.teardown(lay, keep_bridge=keep_network)


def power_off(state_dir: Path, name: str) -> None:
    """A power loss of node ``name``: its kubelet, containerd, shims, kube-proxy and every
    container of its pods SIGKILLed at once, its mounts and pod network gone (node 2: its whole
    network namespace; node 1: its pods' veths and the host's KUBE-*/CNI chains, while ``sluice0``
    and its address stay). Its disk (containerd's root, the kubelet's dir, pod logs) stays, and
    so does its Node object: the controller manager marks it NotReady after its node-monitor
    grace period. Idempotent."""
    spec = _spec(name)
    state_dir = state_dir.resolve()
    if spec.index > started_nodes(state_dir):
        raise PlatformError(COMPONENT, f"no node {name} here: the platform in {state_dir} has fewer nodes")
    if spec.own_netns:
        _stop_isolated(state_dir, spec, power_loss=True)
        return
    lay = layout(state_dir)
    teardown.power_off(lay)
    for process in NODE_PROCESSES:
        lay.pid(process).unlink(missing_ok=True)


def power_on(state_dir: Path, name: str) -> Started:
    """Start node ``name`` again after ``power_off`` (or a crash of its processes): containerd,
    the kubelet (it finds its Node and reports it Ready) and kube-proxy; returns once the Node
    is Ready. Its pods come back as after a reboot: the kubelet starts new sandboxes for the pods
    still bound to it; the ones the controllers replaced meanwhile are gone."""
    spec = _spec(name)
    state_dir = state_dir.resolve()
    nodes = started_nodes(state_dir)
    if spec.index > nodes:
        raise PlatformError(
            COMPONENT, f"no node {name} here: the platform in {state_dir} has {nodes} node(s)"
        )
    lay = layout(state_dir, spec)
    if any(process_alive(lay.pid(process)) for process in NODE_PROCESSES):
        raise PlatformError(COMPONENT, f"{name} is running; power it off first")
    power_off(state_dir, name)  # what a crash may have left
    node_bin = kube_build.NODE_GROUP.bin_dir
    try:
        pki, server = _certs(state_dir, lay, spec, proxy=False)
        info = _start_node(state_dir, spec, lay, node_bin, pki=pki, server=server, nodes=nodes,
                           import_images=False)
    except BaseException:
        power_off(state_dir, name)
        raise
    return Started(component=COMPONENT, logs=[lay.log(process) for process in NODE_PROCESSES], info=info)


def process_alive(pid_path: Path) -> bool:
    pid = read_pid(pid_path)
    return pid is not None and pid_alive(pid)


def _spec(name: str) -> topology.NodeSpec:
    try:
        return topology.spec_by_name(name)
    except ValueError as exc:
        raise PlatformError(COMPONENT, str(exc)) from exc


def leftovers(state_dir: Path) -> list[str]:
    """What the nodes left on the machine after ``stop`` (empty when nothing)."""
    found = teardown.leftovers(layout(state_dir))
    for spec in topology.node_specs(topology.MAX_NODES)[1:]:
        found += teardown.isolated_leftovers(
            layout(state_dir, spec), host_link=spec.host_veth, route=topology.host_route_command("del", spec)
        )
    return found
