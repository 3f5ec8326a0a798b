"""Node agent: /etc/hosts, in-cluster variables, the no-namespace fallback and the final status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice_dev.nodeagent import sandbox
from sluice_dev.nodeagent.status import ContainerView, pod_status


def test_hosts_file_names_the_pod_its_subdomain_the_api_server_and_aliases() -> None:
    pod = {
        "metadata": {"name": "driver-0", "namespace": "ns"},
        "spec": {
            "hostname": "driver",
            "subdomain": "svc",
            "hostAliases": [{"ip": "127.10.0.9", "hostnames": ["a", "b"]}],
        },
    }
    lines = sandbox.hosts_file(pod, "127.10.0.4").splitlines()
    assert "127.10.0.4\tdriver.svc.ns.svc.cluster.local driver" in lines
    assert "127.10.0.9\ta b" in lines
    assert any(
        line.startswith("127.0.0.1\tkubernetes ") and "kubernetes.default.svc" in line for line in lines
    )


def test_in_cluster_env_points_at_the_local_api_server() -> None:
    env = sandbox.in_cluster_env("p", 6443)
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["HOSTNAME"] == "p"


def test_symlink_fallback_points_free_mount_paths_at_volumes(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    taken = tmp_path / "taken"
    taken.mkdir()
    sandbox.symlink_fallback(
        [{"src": str(one), "dst": str(tmp_path / "m" / "data")}, {"src": str(one), "dst": str(taken)}]
    )
    assert (tmp_path / "m" / "data").resolve() == one and not taken.is_symlink()
    sandbox.symlink_fallback([{"src": str(two), "dst": str(tmp_path / "m" / "data")}])
    assert (tmp_path / "m" / "data").resolve() == two


def test_final_status_after_deletion_is_terminal() -> None:
    running = ContainerView(
        name="c", image="i", state="running", reason="", started_at=1.0, ready=True, started=True
    )
    body = pod_status(
        restart_policy="Always",
        init_done=True,
        init_failed=False,
        views=[running],
        init_views=[],
        previous=[],
        ip="127.10.0.1",
        start_time="T",
        final=True,
        now=5.0,
    )
    assert body["phase"] == "Failed"
    state = body["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 137 and state["reason"] == "Error"
    assert body["containerStatuses"][0]["ready"] is False
    assert body["podIPs"] == [{"ip": "127.10.0.1"}]


def _pod(name: str, ns: str, ip: str, labels: dict[str, str], ready: bool = True, **spec: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": dict(spec),
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_service_hosts_resolve_services_to_a_selected_pod_ready_first() -> None:
    services: list[dict[str, Any]] = [
        {"metadata": {"name": "driver-svc", "namespace": "ns"}, "spec": {"selector": {"app": "driver"}}},
        {"metadata": {"name": "other", "namespace": "other"}, "spec": {"selector": {"app": "x"}}},
        {"metadata": {"name": "kubernetes", "namespace": "default"}, "spec": {}},  # no selector
        {"metadata": {"name": "empty", "namespace": "ns"}, "spec": {"selector": {"app": "none"}}},
    ]
    pods = [
        _pod("a-unready", "ns", "127.10.0.5", {"app": "driver"}, ready=False),
        _pod("b-ready", "ns", "127.10.0.6", {"app": "driver"}),
        _pod("x", "other", "127.10.0.7", {"app": "x"}),
        _pod("x-in-ns", "ns", "127.10.0.8", {"app": "x"}, hostname="h", subdomain="sub"),
    ]
    lines = sandbox.service_hosts("ns", services, pods)
    assert "127.10.0.6\tdriver-svc.ns.svc.cluster.local driver-svc.ns.svc driver-svc.ns driver-svc" in lines
    assert "127.10.0.7\tother.other.svc.cluster.local other.other.svc other.other" in lines
    assert "127.10.0.8\th.sub.ns.svc.cluster.local h.sub.ns.svc" in lines
    assert not any("kubernetes" in line or "empty" in line for line in lines)
