"""The nodes of the local platform: one by default, two with ``platform up --nodes 2`` (pure).

Node 1 (``sluice-node``) is the host: its kubelet, containerd and kube-proxy run in the host's
network namespace, its node IP ``10.242.0.1`` is the gateway of the bridge ``sluice0`` (where
Kafka, the API server and s3proxy listen), its pods are on ``10.242.0.0/24``.

Node 2 (``sluice-node-2``) is a machine of its own on that bridge, like a kind node container: a
network namespace (bind-mounted at ``<state>/node-2/netns``, so that every mount of it is under
its state dir), a veth pair whose host end ``sluice-n2`` is a port of ``sluice0`` and whose other
end ``eth0`` has the node IP ``10.242.0.2/24``, its default route via ``10.242.0.1``; inside, its
own CNI bridge ``sluice1`` (``10.242.1.1/24``, the gateway of its pod CIDR ``10.242.1.0/24``),
its own containerd, kubelet and kube-proxy (so its iptables are its own). The host routes
``10.242.1.0/24`` via ``10.242.0.2``. With two nodes, node 1's pods get addresses from
``10.242.0.10`` on (``NODE_RANGE_START``): ``.2``-``.9`` are kept for node IPs.

Nothing here touches the machine; ``lifecycle`` runs the commands.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from sluice_dev.platform.node import config

MAX_NODES = 2
#: every node's pods: kube-proxy's ``clusterCIDR`` on nodes in a namespace of their own
CLUSTER_CIDR = "10.242.0.0/16"
#: with two nodes, node 1's pods start here: the addresses below are the nodes' own
NODE_RANGE_START = "10.242.0.10"
#: the controller manager's ``--node-monitor-grace-period`` with two nodes (default 50 s): a
#: powered-off node is NotReady about this long (plus up to the 5 s monitor period) after its
#: last heartbeat
NODE_MONITOR_GRACE_PERIOD = "20s"
#: the kubelets' Node Lease with two nodes (default 40 s): renewed every 5 s, well within the grace
NODE_LEASE_SECONDS = 20
#: the interface of a node's namespace on ``sluice0``
NODE_VETH = "eth0"


@dataclass(frozen=True)
class NodeSpec:
    index: int
    name: str
    node_ip: str
    pod_subnet: str
    #: the CNI bridge: ``sluice0`` (shared with the host) for node 1, one inside the namespace else
    bridge: str

    @property
    def own_netns(self) -> bool:
        """Does the node live in a network namespace of its own (every node but the first)?"""
        return self.index > 1

    @property
    def gateway(self) -> str:
        """The pods' gateway: the CNI bridge's address."""
        return config.node_ip(self.pod_subnet)

    @property
    def host_veth(self) -> str:
        """The host end of the node's veth pair, a port of ``sluice0``."""
        return f"sluice-n{self.index}"


def node_spec(index: int) -> NodeSpec:
    if index == 1:
        return NodeSpec(1, config.NODE_NAME, config.node_ip(), config.POD_SUBNET, config.BRIDGE)
    if not 2 <= index <= MAX_NODES:
        raise ValueError(f"no node {index}: the platform has 1 to {MAX_NODES} nodes")
    host_net = ipaddress.ip_network(config.POD_SUBNET)
    node_ip = str(host_net.network_address + index)
    pod_subnet = str(ipaddress.ip_network(f"{host_net.network_address + 256 * (index - 1)}/24"))
    return NodeSpec(index, f"{config.NODE_NAME}-{index}", node_ip, pod_subnet, f"sluice{index - 1}")


def node_specs(count: int) -> list[NodeSpec]:
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"{count} nodes: the platform has 1 to {MAX_NODES}")
    return [node_spec(i) for i in range(1, count + 1)]


def spec_by_name(name: str) -> NodeSpec:
    for spec in node_specs(MAX_NODES):
        if spec.name == name:
            return spec
    names = ", ".join(s.name for s in node_specs(MAX_NODES))
    raise ValueError(f"no node named {name!r} (the nodes: {names})")


def node_dir(state_dir: Path, spec: NodeSpec) -> Path:
    """``<state>/node`` for node 1 (as with one node), ``<state>/node-<n>`` beside it for the
    others: never below node 1's dir, whose teardown takes everything under it."""
    return state_dir / ("node" if spec.index == 1 else f"node-{spec.index}")


def netns_file(layout: config.Layout) -> Path:
    """Where a node's network namespace is bind-mounted (``unshare --net=<file>``)."""
    return layout.dir / "netns"


def in_netns(netns: Path, argv: list[str]) -> list[str]:
    """``argv`` run in the node's network namespace only (``nsenter``, not ``ip netns exec``,
    which would also give it a mount namespace of its own and a fresh /sys without cgroups)."""
    return ["nsenter", f"--net={netns}", "--", *argv]


def network_commands(spec: NodeSpec, netns: Path) -> list[list[str]]:
    """The commands that wire an (empty) namespace at ``netns`` to ``sluice0`` as node ``spec``."""
    prefix = config.POD_SUBNET.split("/")[1]
    peer = f"{spec.host_veth}p"
    ns = [
        ["ip", "link", "set", "lo", "up"],
        ["ip", "link", "set", peer, "name", NODE_VETH],
        ["ip", "addr", "add", f"{spec.node_ip}/{prefix}", "dev", NODE_VETH],
        ["ip", "link", "set", NODE_VETH, "up"],
        ["ip", "route", "add", "default", "via", config.node_ip()],
        ["ip", "link", "add", spec.bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{spec.gateway}/{spec.pod_subnet.split('/')[1]}", "dev", spec.bridge],
        ["ip", "link", "set", spec.bridge, "up"],
        ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
    ]
    return [
        ["ip", "link", "add", spec.host_veth, "type", "veth", "peer", "name", peer],
        ["ip", "link", "set", peer, "netns", str(netns)],
        ["ip", "link", "set", spec.host_veth, "master", config.BRIDGE],
        ["ip", "link", "set", spec.host_veth, "up"],
        *(in_netns(netns, argv) for argv in ns),
        host_route_command("add", spec),
    ]


def host_route_command(action: str, spec: NodeSpec) -> list[str]:
    """The host's route to the node's pods (``add`` or ``del``)."""
    return ["ip", "route", action, spec.pod_subnet, "via", spec.node_ip, "dev", config.BRIDGE]


def pod_cidr_patch(spec: NodeSpec) -> dict[str, object]:
    """The Node's ``spec.podCIDR(s)``, the range its CNI hands out (set once, by the platform:
    the controller manager allocates none)."""
    return {"spec": {"podCIDR": spec.pod_subnet, "podCIDRs": [spec.pod_subnet]}}


def cni_conflist(layout: config.Layout, spec: NodeSpec, nodes: int) -> dict[str, object]:
    """The node's CNI network: with one node, exactly the single-node configuration."""
    if spec.index == 1:
        start = NODE_RANGE_START if nodes > 1 else None
        return config.cni_conflist(layout, range_start=start)
    return config.cni_conflist(layout, subnet=spec.pod_subnet, bridge=spec.bridge)
