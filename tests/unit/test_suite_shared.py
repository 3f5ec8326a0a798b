"""One resource for all the workers of a test run (``tests/support/shared.py``, the e2e cluster):
started once, attached to by the others, stopped only when every worker is done with it, and a
failed start fails every worker that needs it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import shared
from tests.support.shared import SharedState


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared, "POLL", 0.05)


class Resource:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()

    def log(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    @contextmanager
    def start(self) -> Iterator[dict[str, Any]]:
        self.log("start")
        time.sleep(0.2)
        yield {"address": "here"}
        self.log("stop")


def use(state: SharedState, resource: Resource, me: str, hold: float, got: list[dict[str, Any]]) -> None:
    for info in shared.shared(state, resource.start, "the resource", me=me):
        got.append(info)
        time.sleep(hold)
        resource.log(f"{me} done")


def test_the_first_worker_starts_it_the_other_attaches_and_it_stops_after_the_last(tmp_path: Path) -> None:
    state, resource, got = SharedState(tmp_path, "r"), Resource(), []
    owner = threading.Thread(target=use, args=(state, resource, "gw0", 0.1, got))
    owner.start()
    time.sleep(0.05)  # gw0 is starting it
    user = threading.Thread(target=use, args=(state, resource, "gw1", 0.6, got))
    user.start()
    owner.join(10)
    user.join(10)
    assert got == [{"address": "here"}] * 2
    # started once; the owner, done first, waited for gw1 before stopping it
    assert resource.events == ["start", "gw0 done", "gw1 done", "stop"]
    assert state.read()["state"] == "down" and state.read()["users"] == []


def test_a_worker_that_comes_after_the_stop_starts_it_again(tmp_path: Path) -> None:
    state, resource, got = SharedState(tmp_path, "r"), Resource(), []
    use(state, resource, "gw0", 0, got)
    use(state, resource, "gw1", 0, got)
    assert resource.events == ["start", "gw0 done", "stop", "start", "gw1 done", "stop"]


def test_a_failed_start_fails_the_workers_waiting_for_it_with_the_owner_s_message(tmp_path: Path) -> None:
    state = SharedState(tmp_path, "r")
    starts: list[str] = []

    @contextmanager
    def broken() -> Iterator[dict[str, Any]]:
        starts.append("start")
        time.sleep(0.3)
        raise RuntimeError("kubelet did not start, see node/kubelet.log")
        yield {}

    errors: dict[str, BaseException] = {}

    def attach(me: str) -> None:
        try:
            for _ in shared.shared(state, broken, "the e2e cluster", me=me):
                pass
        except BaseException as exc:  # pytest.fail raises Failed, a BaseException
            errors[me] = exc

    owner = threading.Thread(target=attach, args=("gw0",))
    owner.start()
    time.sleep(0.1)
    waiting = threading.Thread(target=attach, args=("gw1",))  # attaches while gw0 starts it
    waiting.start()
    owner.join(10)
    waiting.join(10)
    attach("gw2")  # comes after the failure: fails at once, no second start
    assert isinstance(errors["gw0"], RuntimeError) and starts == ["start"]
    for me in ("gw1", "gw2"):
        assert "the e2e cluster did not start (gw0)" in str(errors[me]), errors
        assert "kubelet.log" in str(errors[me])
