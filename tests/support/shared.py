"""One resource for all the xdist workers of a test run (the e2e cluster on the real node).

The first worker that needs it starts it (the *owner*) and writes what the others need to reach it
(a JSON-able ``info``) to a state file in the run's directory, which all its workers share; the
others wait until it is up and attach. Every worker says when it is done with it; the owner stops
it when it is done itself and no other worker still uses it (it waits for them at the end of its
session). A start that fails is recorded, and every worker that needs the resource fails with the
owner's message (for the rest of the run: no second try): nothing skips. Without xdist the one
process is the owner.

All reads and writes of the state file happen under an exclusive ``flock`` of a lock file beside
it; nothing is held while the resource starts or while a test runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

#: how long a worker waits for another worker's start of the resource
START_TIMEOUT = 1800.0
#: how long the owner waits, at the end of its session, for the other workers to be done with it
USERS_TIMEOUT = 5400.0
POLL = 2.0


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory all workers of this run share (the base temp dir without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


class SharedState:
    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}.json"
        self.lock = directory / f"{name}.lock"

    @contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, read and written back under the lock."""
        with open(self.lock, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            state: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}
            yield state
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(self.path)

    def read(self) -> dict[str, Any]:
        with self.locked() as state:
            return dict(state)

    def leave(self, worker: str) -> None:
        with self.locked() as state:
            state["users"] = [u for u in state.get("users", []) if u != worker]


def shared(state: SharedState, start: Callable[[], AbstractContextManager[dict[str, Any]]],
           what: str, me: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield the resource's ``info``, starting it (``start``: a context manager that yields the
    info and stops the resource on exit) when no other worker has. See the module. ``me``: this
    worker's name (default: xdist's)."""
    me = me or worker_id()
    with state.locked() as current:
        owner = current.get("state") not in ("starting", "up", "failed")  # a failed start stays failed
        if owner:
            current.clear()
            current.update(state="starting", owner=me, users=[me])
        else:
            current["users"] = [*current.get("users", []), me]
    if not owner:
        try:
            yield _attach(state, what)
        finally:
            state.leave(me)
        return
    try:
        with start() as info:
            with state.locked() as current:
                current.update(state="up", info=info)
            try:
                yield info
            finally:
                state.leave(me)
                _wait_for_the_others(state, what)
    except BaseException as exc:
        with state.locked() as current:
            if current.get("state") == "starting":
                current.update(state="failed", error=f"{what} did not start ({me}): {exc}")
        raise


def _attach(state: SharedState, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        current = state.read()
        if current.get("state") == "up":
            return dict(current["info"])
        if current.get("state") == "failed":
            pytest.fail(str(current.get("error")), pytrace=False)
        time.sleep(POLL)
    pytest.fail(f"{what}: another worker's start did not finish in {START_TIMEOUT:.0f}s", pytrace=False)


def _wait_for_the_others(state: SharedState, what: str) -> None:
    """At the end of the owner's session: wait until no other worker uses it, then mark it down
    (a worker that comes later starts a new one, once this one has stopped)."""
    deadline = time.monotonic() + USERS_TIMEOUT
    while True:
        with state.locked() as current:
            if not current.get("users") or time.monotonic() > deadline:
                current["state"] = "down"
                return
        time.sleep(POLL)
