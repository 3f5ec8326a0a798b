"""How the suite's work units are ordered and handed to the xdist workers (``tests/conftest.py``).

A work unit is a test file, except the real node's tests (``tests/platform``), which form one
unit: they start and stop a node of their own. The e2e files share one cluster on the real node
(``tests/e2e/shared.py``): the first worker that needs it starts it, the others attach to it. One
real node runs per machine, so an e2e unit may not start on one worker while the real node's tests
run on another: a worker asking for work then gets the next unit that is no e2e unit (or waits).

Order: the real node's tests, the e2e files longest first (``E2E_ORDER``), then the rest in
collection order. The units that take long start first, so that the two workers end together.
"""

from __future__ import annotations

from collections.abc import Iterable

NODE_UNIT = "tests/platform"
E2E_PREFIX = "tests/e2e/"
#: the e2e files, longest first (seconds per file in a CI run of 2026-11-26: 870, 800, 505, 220, 60)
E2E_ORDER = ("test_upgrades.py", "test_queries.py", "test_standby.py", "test_helm.py", "test_webhook.py")


def unit_of(nodeid: str) -> str:
    """The work unit of a test id: its file, or ``NODE_UNIT`` for the real node's tests."""
    path = nodeid.split("::", 1)[0]
    return NODE_UNIT if path.startswith(NODE_UNIT + "/") else path


def rank(nodeid: str) -> tuple[int, int]:
    """Sort key of a test in a distributed run (stable sort: the rest keeps collection order)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(NODE_UNIT + "/"):
        return (0, 0)
    if path.startswith(E2E_PREFIX):
        name = path.removeprefix(E2E_PREFIX)
        return (1, E2E_ORDER.index(name) if name in E2E_ORDER else len(E2E_ORDER))
    return (2, 0)


def is_e2e(unit: str) -> bool:
    return unit.startswith(E2E_PREFIX)


def pick(queue: Iterable[str], node_tests_elsewhere: bool) -> str | None:
    """The unit to hand to a worker: the first of ``queue``, skipping e2e units while the real
    node's tests run (or wait) on another worker; None: nothing may start on this worker now."""
    for unit in queue:
        if is_e2e(unit) and node_tests_elsewhere:
            continue
        return unit
    return None
