"""What the real node is configured with: pure functions from paths and ports to files and argv.

Nothing here touches the machine, so all of it is unit-tested. Why the settings are what they
are (docs/platform.md has the long form):

- ``restrict_oom_score_adj = true`` (containerd CRI) and kube-proxy's ``oomScoreAdj: 0``: lowering
  a process' oom_score_adj is not permitted on our machines; the CRI plugin and kube-proxy would
  otherwise try and fail.
- ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``, ``cgroupsPerQOS: false``,
  ``enforceNodeAllocatable: []``: the machines run cgroup v1 without systemd; the kubelet would
  refuse v1, and the per-QoS hierarchy and allocatable enforcement need cgroup controls we lack.
- The node IP is the gateway address of our own bridge (the kubelet refuses a loopback one);
  kube-apiserver advertises it, so that the ``kubernetes`` Service has an endpoint pods can reach.
- containerd keeps its root, state, socket and runc root under the state dir, never the system's
  ``/var/lib/containerd`` or ``/run/containerd`` (except the shim sockets, see ``teardown``).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_NAME = "sluice-node"
BRIDGE = "sluice0"
CNI_NETWORK = "sluice-pods"
#: the pod network; its first address is the bridge gateway and the node IP
POD_SUBNET = "10.242.0.0/24"
CNI_BIN_DIR = Path("/usr/lib/cni")
#: local image names (``localhost/`` never resolves to a registry); pods use ``imagePullPolicy:
#: Never`` or ``IfNotPresent``
PAUSE_IMAGE = "localhost/sluice/pause:1"
TEST_IMAGE = "localhost/sluice/nodetest:1"
COREDNS_IMAGE = "localhost/sluice/coredns:1"
#: the ``kube-dns`` Service (``dns.py``), in the control plane's service range
DNS_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
CONTAINERD_NAMESPACE = "k8s.io"


def node_ip(subnet: str = POD_SUBNET) -> str:
    """The bridge gateway: the subnet's first host address."""
    return str(next(ipaddress.ip_network(subnet).hosts()))


@dataclass(frozen=True)
class Layout:
    """Where every file and directory of the node lives, under ``<state_dir>/node/``."""

    dir: Path

    @property
    def containerd_root(self) -> Path:
        return self.dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd" / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.dir / "containerd" / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.dir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet-config.json"

    @property
    def pod_logs(self) -> Path:
        return self.dir / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        return self.dir / "kube-proxy-config.json"

    def pid(self, process: str) -> Path:
        return self.dir / f"{process}.pid"

    def log(self, process: str) -> Path:
        return self.dir / f"{process}.log"

    def kubeconfig(self, user: str) -> Path:
        return self.dir / f"{user}.kubeconfig"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML rendering for {value!r}")


def _toml(tables: dict[str, dict[str, object]]) -> str:
    """Render ``{table name: {key: scalar}}``; the table named ``""`` holds the top-level keys."""
    lines: list[str] = []
    for name, entries in tables.items():
        if name:
            lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in entries.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def containerd_config(layout: Layout, *, sandbox_image: str = PAUSE_IMAGE) -> str:
    """containerd 1.6 configuration (version 2) with everything under the state dir."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    runc = f"{cri}.containerd.runtimes.runc"
    return _toml({
        "": {
            "version": 2,
            "root": str(layout.containerd_root),
            "state": str(layout.containerd_state),
            "oom_score": 0,
            "disabled_plugins": [
                "io.containerd.snapshotter.v1.aufs",
                "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.devmapper",
                "io.containerd.snapshotter.v1.zfs",
                "io.containerd.tracing.processor.v1.otlp",
                "io.containerd.internal.v1.tracing",
            ],
        },
        "grpc": {"address": str(layout.containerd_socket)},
        "ttrpc": {"address": f"{layout.containerd_socket}.ttrpc"},
        'plugins."io.containerd.internal.v1.opt"': {"path": str(layout.dir / "containerd" / "opt")},
        cri: {
            "sandbox_image": sandbox_image,
            "restrict_oom_score_adj": True,
            "stream_server_address": "127.0.0.1",
            "stream_server_port": "0",
            "enable_selinux": False,
            # network namespaces under the state dir, not /var/run/netns
            "netns_mounts_under_state_dir": True,
            "max_container_log_line_size": 16384,
        },
        f"{cri}.containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc"},
        runc: {"runtime_type": "io.containerd.runc.v2"},
        f"{runc}.options": {"SystemdCgroup": False, "Root": str(layout.runc_root)},
        f"{cri}.cni": {"bin_dir": str(CNI_BIN_DIR), "conf_dir": str(layout.cni_conf_dir), "max_conf_num": 1},
        f"{cri}.registry": {"config_path": ""},
    })


def cni_conflist(
    layout: Layout, *, subnet: str = POD_SUBNET, bridge: str = BRIDGE, range_start: str | None = None,
) -> dict[str, Any]:
    """Bridge (our own ``sluice0``, the gateway masquerading egress) + host-local IPAM with its
    data under the state dir, then portmap (hostPort) and a hairpin so a pod reaches itself
    through a Service. Loopback is set up by containerd itself.

    ``range_start``: the first address pods get (with two nodes, node 1's range starts after the
    addresses kept for the nodes, ``NODE_ADDRESSES``)."""
    pod_range: dict[str, str] = {"subnet": subnet, "gateway": node_ip(subnet)}
    if range_start is not None:
        pod_range["rangeStart"] = range_start
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_data_dir),
                    "ranges": [[pod_range]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@dataclass(frozen=True)
class KubeletPorts:
    server: int
    healthz: int


def kubelet_config(
    layout: Layout, *, ca: Path, serving_cert: Path, serving_key: Path, ports: KubeletPorts,
    address: str, healthz_address: str = "127.0.0.1", node_lease_seconds: int | None = None,
) -> dict[str, Any]:
    """KubeletConfiguration for a cgroup-v1, systemd-less, unprivileged-OOM machine.

    ``healthz_address``: a node in a network namespace of its own serves /healthz on its node IP
    (the host checks it there). ``node_lease_seconds``: the Node Lease's duration (the kubelet
    renews it at a quarter of that), shorter than the default 40 s when the controller manager's
    node-monitor grace period is (two nodes)."""
    extra: dict[str, Any] = {}
    if node_lease_seconds is not None:
        extra["nodeLeaseDurationSeconds"] = node_lease_seconds
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": address,
        "port": ports.server,
        "readOnlyPort": 0,
        "healthzBindAddress": healthz_address,
        "healthzPort": ports.healthz,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(layout.pod_logs),
        # Local images are imported, not pulled: never garbage-collect them, never evict for disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "runtimeRequestTimeout": "2m",
        "resolvConf": "/etc/resolv.conf",
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "maxPods": 110,
        **extra,
    }


def kubelet_argv(
    kubelet: Path, layout: Layout, *, kubeconfig: Path, node_name: str = NODE_NAME, address: str
) -> list[str]:
    return [
        str(kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.kubelet_root / 'pki'}",
        f"--hostname-override={node_name}",
        f"--node-ip={address}",
        "--v=1",
    ]


@dataclass(frozen=True)
class ProxyPorts:
    healthz: int
    metrics: int


def kube_proxy_config(
    *, kubeconfig: Path, ports: ProxyPorts, node_name: str = NODE_NAME, cluster_cidr: str = POD_SUBNET,
    bind_address: str = "127.0.0.1",
) -> dict[str, Any]:
    """KubeProxyConfiguration, iptables mode, touching no sysctl it would need privileges for
    (``bind_address``: where /healthz and /metrics listen, the node IP for a node in a network
    namespace of its own)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": cluster_cidr,
        "healthzBindAddress": f"{bind_address}:{ports.healthz}",
        "metricsBindAddress": f"{bind_address}:{ports.metrics}",
        "oomScoreAdj": 0,
        # 0 = leave the conntrack sysctls alone
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "1s"},
    }


def kube_proxy_argv(kube_proxy: Path, layout: Layout) -> list[str]:
    return [str(kube_proxy), f"--config={layout.kube_proxy_config}", "--v=1"]


def containerd_argv(containerd: str, layout: Layout) -> list[str]:
    return [containerd, f"--config={layout.containerd_config}", "--log-level=info"]


def image_alias(reference: str) -> str:
    """The name a kubelet resolves the unqualified form of a local image to:
    ``localhost/sluice-runtime:0.1.0`` -> ``docker.io/library/sluice-runtime:0.1.0`` (what
    ``sluice-runtime:0.1.0`` in a pod spec means)."""
    if not reference.startswith("localhost/") or reference.count("/") != 1:
        raise ValueError(f"not a local image of one path component: {reference!r}")
    return "docker.io/library/" + reference.removeprefix("localhost/")


def ctr_argv(ctr: str, layout: Layout, *args: str) -> list[str]:
    """``ctr`` against our containerd in the CRI namespace."""
    return [ctr, f"--address={layout.containerd_socket}", f"--namespace={CONTAINERD_NAMESPACE}", *args]
