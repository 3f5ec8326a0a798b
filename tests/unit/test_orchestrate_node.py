"""`platform up` picks the node: the node agent by default, the real node with `--node kubelet`."""

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

    def stop(self, state_dir: Path) -> None:
        self.calls.append((self.name, "stop", None))

    def start(self, state_dir: Path, *args: Any, **kwargs: Any) -> common.Started:
        self.calls.append((self.name, "start", kwargs.get("advertise_address")))
        env = {"KUBECONFIG": str(state_dir / "admin.kubeconfig")} if self.name == "kube" else {}
        return common.Started(self.name, env=env, info={"probe": "127.0.0.1:1", "server": "https://127.0.0.1:1"})

    def node_ip(self) -> str:
        return "10.242.0.1"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    recorded: list[tuple[str, str, Any]] = []
    fakes = {name: FakeComponent(name, recorded) for name in ("kafka", "kube", "nodeagent", "node")}
    fakes_any: dict[str, Any] = {**fakes, "sparkjars": SimpleNamespace(provision=lambda log=print: None)}
    monkeypatch.setattr(orchestrate, "_module", lambda name: fakes_any[name])
    monkeypatch.setattr(orchestrate, "_healthy", lambda name, entry, state_dir=None: True)
    return recorded


def _starts(calls: list[tuple[str, str, Any]]) -> list[tuple[str, Any]]:
    return [(name, arg) for name, action, arg in calls if action == "start"]


def test_default_is_the_node_agent_on_a_loopback_control_plane(tmp_path: Path, calls: list[Any]) -> None:
    state = orchestrate.up(tmp_path, log=lambda _: None)
    assert _starts(calls) == [("kafka", None), ("kube", None), ("nodeagent", None)]
    assert "node" not in state


def test_switching_to_the_real_node_restarts_the_control_plane_and_stops_the_agent(
    tmp_path: Path, calls: list[Any]
) -> None:
    orchestrate.up(tmp_path, log=lambda _: None)
    calls.clear()
    state = orchestrate.up(tmp_path, log=lambda _: None, node="kubelet")
    assert ("nodeagent", "stop", None) in calls
    assert _starts(calls) == [("kube", "10.242.0.1"), ("node", None)]  # kafka kept
    assert "nodeagent" not in state and state["kube"]["info"]["advertise_address"] == "10.242.0.1"
    calls.clear()
    orchestrate.up(tmp_path, log=lambda _: None, node="kubelet")
    assert _starts(calls) == []  # everything healthy and as chosen: idempotent


def test_down_stops_both_kinds_of_node(
    tmp_path: Path, calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice_dev.platform import operator

    monkeypatch.setattr(operator, "stop", lambda state_dir: None)
    orchestrate.down(tmp_path, log=lambda _: None)
    stopped = [name for name, action, _ in calls if action == "stop"]
    assert stopped == ["node", "nodeagent", "kube", "kafka"]
