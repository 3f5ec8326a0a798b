"""`platform up` starts the real node by default, none with `--no-node`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sluice_dev.platform import common, orchestrate


class FakeComponent:
    def __init__(self, name: str, calls: list[tuple[str, str, Any]]) -> None:
        self.name = name
        self.calls = calls

    def provision(self, log: Any = print) -> None:
        pass

    def stop(self, state_dir: Path, **kwargs: Any) -> None:
        self.calls.append((self.name, "stop", kwargs.get("keep_network")))

    def start(self, state_dir: Path, *args: Any, **kwargs: Any) -> common.Started:
        address = kwargs.get("advertise_address") or kwargs.get("pod_address")
        self.calls.append((self.name, "start", address))
        env = {"KUBECONFIG": str(state_dir / "admin.kubeconfig")} if self.name == "kube" else {}
        info = {"probe": "127.0.0.1:1", "server": "https://127.0.0.1:1"}
        if self.name in ("kafka", "objectstore", "registry"):
            info["pod_address"] = address or ""
        return common.Started(self.name, env=env, info=info)

    def node_ip(self) -> str:
        return "10.242.0.1"

    def network_up(self, state_dir: Path) -> str:
        self.calls.append((self.name, "network_up", None))
        return "10.242.0.1"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    recorded: list[tuple[str, str, Any]] = []
    names = ("kafka", "objectstore", "registry", "kube", "node")
    fakes = {name: FakeComponent(name, recorded) for name in names}
    fakes_any: dict[str, Any] = {**fakes, "sparkjars": SimpleNamespace(provision=lambda log=print: None)}
    monkeypatch.setattr(orchestrate, "_module", lambda name: fakes_any[name])
    monkeypatch.setattr(orchestrate, "_healthy", lambda name, entry, state_dir=None: True)
    return recorded


def _starts(calls: list[tuple[str, str, Any]]) -> list[tuple[str, Any]]:
    return [(name, arg) for name, action, arg in calls if action == "start"]


def test_no_node_keeps_kafka_and_the_control_plane_on_loopback(tmp_path: Path, calls: list[Any]) -> None:
    state = orchestrate.up(tmp_path, log=lambda _: None, with_node=False)
    assert _starts(calls) == [("kafka", None), ("objectstore", None), ("registry", None), ("kube", None)]
    assert "node" not in state
    assert ("node", "network_up", None) not in calls


def test_the_real_node_starts_kafka_and_the_control_plane_on_its_bridge(
    tmp_path: Path, calls: list[Any]
) -> None:
    orchestrate.up(tmp_path, log=lambda _: None, with_node=False)
    calls.clear()
    state = orchestrate.up(tmp_path, log=lambda _: None)
    # the bridge before anything binds the node IP; Kafka and the API server listen there
    assert calls[0] == ("node", "network_up", None)
    assert _starts(calls) == [
        ("kafka", "10.242.0.1"), ("objectstore", "10.242.0.1"), ("registry", "10.242.0.1"),
        ("kube", "10.242.0.1"), ("node", None),
    ]
    assert state["kube"]["info"]["advertise_address"] == "10.242.0.1"
    assert state["kafka"]["info"]["pod_address"] == "10.242.0.1"
    assert state["objectstore"]["info"]["pod_address"] == "10.242.0.1"
    # restarting the node under a running Kafka and control plane keeps its bridge
    assert [c for c in calls if c[:2] == ("node", "stop")] == [("node", "stop", True)]
    calls.clear()
    orchestrate.up(tmp_path, log=lambda _: None)
    assert _starts(calls) == []  # everything healthy and as chosen: idempotent
    calls.clear()
    orchestrate.up(tmp_path, log=lambda _: None, with_node=False)  # no node: the bridge goes
    assert ("node", "stop", None) in calls
    assert _starts(calls) == [("kafka", None), ("objectstore", None), ("registry", None), ("kube", None)]


def test_down_stops_the_node_then_the_control_plane_the_object_store_and_kafka(
    tmp_path: Path, calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice_dev.platform import operator

    monkeypatch.setattr(operator, "stop", lambda state_dir: None)
    orchestrate.down(tmp_path, log=lambda _: None)
    stopped = [(name, keep) for name, action, keep in calls if action == "stop"]
    assert stopped == [("node", None), ("kube", None), ("registry", None), ("objectstore", None),
                       ("kafka", None)]


def test_images_load_only_into_a_running_real_node(tmp_path: Path, calls: list[Any]) -> None:
    loaded: list[dict[str, Path]] = []
    orchestrate._module("node").load_images = lambda state_dir, archives: loaded.append(archives)
    archives = {"localhost/sluice-runtime:0.1.0": tmp_path / "runtime.oci.tar"}
    orchestrate.up(tmp_path, log=lambda _: None, with_node=False)  # no node: nothing to load into
    assert orchestrate.load_images(tmp_path, archives) is False and loaded == []
    orchestrate.up(tmp_path, log=lambda _: None)
    assert orchestrate.load_images(tmp_path, archives) is True and loaded == [archives]
