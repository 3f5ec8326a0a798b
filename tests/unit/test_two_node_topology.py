"""Two nodes on the local platform: names, addresses, commands and configuration (pure parts of
``sluice_dev.platform.node.topology`` and what the second node changes elsewhere)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from sluice_dev import cli
from sluice_dev.platform import kube, orchestrate
from sluice_dev.platform.node import config, provisioner, topology, volumes


def test_node_1_is_the_host_as_with_one_node() -> None:
    first = topology.node_spec(1)
    assert (first.name, first.node_ip, first.pod_subnet, first.bridge) == (
        config.NODE_NAME, config.node_ip(), config.POD_SUBNET, config.BRIDGE
    )
    assert not first.own_netns


def test_node_2_has_its_own_address_on_the_bridge_and_its_own_pod_cidr() -> None:
    second = topology.node_spec(2)
    assert second.name == "sluice-node-2" and second.own_netns
    assert second.node_ip == "10.242.0.2"
    assert ipaddress.ip_address(second.node_ip) in ipaddress.ip_network(config.POD_SUBNET)
    assert (second.pod_subnet, second.gateway) == ("10.242.1.0/24", "10.242.1.1")
    assert len(second.host_veth) <= 15 and len(second.bridge) <= 15  # Linux interface names
    assert second.bridge != config.BRIDGE
    # node IPs are below node 1's pod range; every pod CIDR is in the cluster CIDR
    assert ipaddress.IPv4Address(second.node_ip) < ipaddress.IPv4Address(topology.NODE_RANGE_START)
    cluster = ipaddress.IPv4Network(topology.CLUSTER_CIDR)
    assert all(ipaddress.IPv4Network(s.pod_subnet).subnet_of(cluster) for s in topology.node_specs(2))


def test_nodes_are_named_and_counted() -> None:
    assert [s.name for s in topology.node_specs(2)] == ["sluice-node", "sluice-node-2"]
    assert topology.spec_by_name("sluice-node-2").index == 2
    for bad in (0, 3):
        with pytest.raises(ValueError):
            topology.node_specs(bad)
    with pytest.raises(ValueError, match="sluice-node-2"):
        topology.spec_by_name("sluice-node-3")


def test_node_2_lives_beside_node_1_not_below_it(tmp_path: Path) -> None:
    first, second = (topology.node_dir(tmp_path, s) for s in topology.node_specs(2))
    assert first == tmp_path / "node"  # as with one node
    assert second == tmp_path / "node-2"
    assert not second.is_relative_to(first)  # node 1's teardown takes everything under its dir
    assert topology.netns_file(config.Layout(second)).is_relative_to(second)


def test_the_network_commands_wire_the_namespace_to_the_bridge(tmp_path: Path) -> None:
    spec = topology.node_spec(2)
    netns = tmp_path / "node-2" / "netns"
    commands = topology.network_commands(spec, netns)
    joined = [" ".join(c) for c in commands]
    assert joined[0] == "ip link add sluice-n2 type veth peer name sluice-n2p"
    assert f"ip link set sluice-n2p netns {netns}" in joined
    assert f"ip link set sluice-n2 master {config.BRIDGE}" in joined
    inside = [c[3:] for c in commands if c[:3] == ["nsenter", f"--net={netns}", "--"]]
    assert ["ip", "addr", "add", "10.242.0.2/24", "dev", "eth0"] in inside
    assert ["ip", "route", "add", "default", "via", "10.242.0.1"] in inside
    assert ["ip", "addr", "add", "10.242.1.1/24", "dev", spec.bridge] in inside
    assert ["ip", "link", "set", "lo", "up"] in inside
    assert commands[-1] == ["ip", "route", "add", "10.242.1.0/24", "via", "10.242.0.2", "dev", config.BRIDGE]
    assert topology.host_route_command("del", spec)[:3] == ["ip", "route", "del"]
    # nsenter switches the network namespace only (ip netns exec would hide the host's cgroups)
    assert topology.in_netns(netns, ["kubelet"]) == ["nsenter", f"--net={netns}", "--", "kubelet"]


def test_cni_ranges_one_node_unchanged_two_nodes_keep_node_addresses(tmp_path: Path) -> None:
    lay = config.Layout(tmp_path / "node")
    first, second = topology.node_specs(2)
    assert topology.cni_conflist(lay, first, 1) == config.cni_conflist(lay)

    def ipam(conflist: dict[str, Any]) -> dict[str, Any]:
        plugin: dict[str, Any] = conflist["plugins"][0]
        return plugin

    assert ipam(topology.cni_conflist(lay, first, 2))["ipam"]["ranges"] == [[
        {"subnet": "10.242.0.0/24", "gateway": "10.242.0.1", "rangeStart": "10.242.0.10"}
    ]]
    other = config.Layout(tmp_path / "node-2")
    bridge = ipam(topology.cni_conflist(other, second, 2))
    assert bridge["bridge"] == second.bridge
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.242.1.0/24", "gateway": "10.242.1.1"}]]
    assert bridge["ipam"]["dataDir"] == str(other.cni_data_dir)


def test_pod_cidr_matches_the_cni_range() -> None:
    for spec in topology.node_specs(2):
        expected = {"spec": {"podCIDR": spec.pod_subnet, "podCIDRs": [spec.pod_subnet]}}
        assert topology.pod_cidr_patch(spec) == expected


def test_a_node_in_its_own_namespace_serves_health_on_its_ip(tmp_path: Path) -> None:
    lay = config.Layout(tmp_path / "node-2")
    kubelet = config.kubelet_config(
        lay, ca=tmp_path / "ca", serving_cert=tmp_path / "c", serving_key=tmp_path / "k",
        ports=config.KubeletPorts(1, 2), address="10.242.0.2", healthz_address="10.242.0.2",
        node_lease_seconds=topology.NODE_LEASE_SECONDS,
    )
    assert kubelet["healthzBindAddress"] == "10.242.0.2"
    assert kubelet["nodeLeaseDurationSeconds"] == 20
    single = config.kubelet_config(
        lay, ca=tmp_path / "ca", serving_cert=tmp_path / "c", serving_key=tmp_path / "k",
        ports=config.KubeletPorts(1, 2), address="10.242.0.1",
    )
    assert single["healthzBindAddress"] == "127.0.0.1" and "nodeLeaseDurationSeconds" not in single
    proxy = config.kube_proxy_config(
        kubeconfig=tmp_path / "k", ports=config.ProxyPorts(1, 2), node_name="sluice-node-2",
        cluster_cidr=topology.CLUSTER_CIDR, bind_address="10.242.0.2",
    )
    assert proxy["healthzBindAddress"] == "10.242.0.2:1" and proxy["metricsBindAddress"] == "10.242.0.2:2"
    assert proxy["hostnameOverride"] == "sluice-node-2"


def test_the_grace_period_is_short_only_when_asked_for() -> None:
    assert kube.controller_manager_node_args(None) == []
    args = kube.controller_manager_node_args(topology.NODE_MONITOR_GRACE_PERIOD)
    assert "--node-monitor-grace-period=20s" in args
    # the lease is renewed (every quarter of its duration) well within the grace period
    assert topology.NODE_LEASE_SECONDS / 4 * 3 <= int(topology.NODE_MONITOR_GRACE_PERIOD.rstrip("s"))


def test_volumes_are_pinned_to_their_node_only_when_told(tmp_path: Path) -> None:
    pvc = {
        "metadata": {"name": "d", "namespace": "ns", "uid": "u"},
        "spec": {"storageClassName": "sluice-local", "resources": {"requests": {"storage": "1Gi"}}},
    }
    cls = provisioner.storage_class()
    assert "nodeAffinity" not in provisioner.pv_for(pvc, cls, tmp_path)["spec"]
    pinned = provisioner.pv_for(pvc, cls, tmp_path, "sluice-node")["spec"]["nodeAffinity"]
    (term,) = pinned["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["sluice-node"]}
    ]
    argv = volumes.argv("/py", kubeconfig=tmp_path / "k", root=tmp_path / "pv", node="sluice-node")
    assert argv[-1] == "--node=sluice-node"
    unpinned = volumes.argv("/py", kubeconfig=tmp_path / "k", root=tmp_path)
    assert not any(a.startswith("--node") for a in unpinned)


def test_cli_nodes_and_power(monkeypatch: pytest.MonkeyPatch) -> None:
    ups: list[dict[str, object]] = []
    powers: list[tuple[str, bool]] = []
    monkeypatch.setattr(orchestrate, "up", lambda state_dir, **kwargs: ups.append(kwargs))
    monkeypatch.setattr(orchestrate, "node_power", lambda state_dir, name, on: powers.append((name, on)))
    assert cli.main(["platform", "up"]) == 0
    assert cli.main(["platform", "up", "--nodes", "2"]) == 0
    assert ups == [{"with_node": True}, {"with_node": True, "nodes": 2}]
    assert cli.main(["node", "stop", "sluice-node-2"]) == 0
    assert cli.main(["node", "start", "sluice-node-2"]) == 0
    assert powers == [("sluice-node-2", False), ("sluice-node-2", True)]
    with pytest.raises(SystemExit):
        cli.main(["platform", "up", "--nodes", "3"])


def test_orchestrate_restarts_for_another_node_count() -> None:
    assert orchestrate._mismatch("node", {"info": {"nodes": "2"}}, 2) is None
    assert orchestrate._mismatch("node", {"info": {}}, 1) is None
    assert orchestrate._mismatch("node", {"info": {}}, 2)
    assert orchestrate._mismatch("kube", {"info": {}}, 1) is None
    assert orchestrate._mismatch("kube", {"info": {"node_monitor_grace_period": "20s"}}, 2) is None
    assert orchestrate._mismatch("kube", {"info": {}}, 2)
    assert orchestrate._mismatch("kafka", {"info": {}}, 2) is None
    assert orchestrate._nodes_alive({"info": {}}, 1)
    assert not orchestrate._nodes_alive({"info": {}}, 2)


def test_up_with_two_nodes_starts_the_control_plane_with_a_short_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from sluice_dev.platform import common

    starts: list[tuple[str, dict[str, Any]]] = []

    def component(name: str) -> Any:
        def start(state_dir: Path, **kwargs: Any) -> common.Started:
            starts.append((name, kwargs))
            info = {"probe": "127.0.0.1:1", **{k: str(v) for k, v in kwargs.items() if v is not None}}
            if name == "kube":
                info.pop("advertise_address", None)
            return common.Started(name, info=info)

        return SimpleNamespace(
            provision=lambda log=print: None, stop=lambda state_dir, **kwargs: None, start=start,
            node_ip=lambda: "10.242.0.1", network_up=lambda state_dir: "10.242.0.1",
            NODE_MONITOR_GRACE_PERIOD=topology.NODE_MONITOR_GRACE_PERIOD,
        )

    fakes = {name: component(name) for name in orchestrate.SERVICES}
    fakes["sparkjars"] = SimpleNamespace(provision=lambda log=print: None)
    monkeypatch.setattr(orchestrate, "_module", lambda name: fakes[name])
    monkeypatch.setattr(orchestrate, "_healthy", lambda name, entry, state_dir=None: True)
    monkeypatch.setattr(orchestrate, "_nodes_alive", lambda entry, nodes: True)
    orchestrate.up(tmp_path, log=lambda _: None, nodes=2)
    kwargs = dict(starts)
    assert kwargs["kube"]["node_monitor_grace_period"] == "20s"
    assert kwargs["node"] == {"nodes": 2}
    starts.clear()
    orchestrate.up(tmp_path, log=lambda _: None, nodes=2)
    assert starts == []  # as asked for: nothing restarts
    orchestrate.up(tmp_path, log=lambda _: None)  # back to one node: the control plane and the node
    assert [name for name, _ in starts] == ["kube", "node"]
    assert dict(starts)["kube"] == {"advertise_address": "10.242.0.1"}
    with pytest.raises(common.PlatformError):
        orchestrate.up(tmp_path, log=lambda _: None, with_node=False, nodes=2)
