"""The suite's own scheduling (``tests/support/scheduling.py``): the real node's tests never run on
one worker while an e2e file, which needs the machine's one real node too, starts on another."""

from __future__ import annotations

from tests.support.scheduling import E2E_ORDER, NODE_UNIT, pick, rank, unit_of


def test_the_real_node_s_tests_are_one_unit_and_other_files_one_each() -> None:
    assert unit_of("tests/platform/test_node.py::test_node_registers_ready") == NODE_UNIT
    assert unit_of("tests/e2e/test_helm.py::test_x") == "tests/e2e/test_helm.py"
    assert unit_of("tests/unit/test_a.py::test_b[1-2]") == "tests/unit/test_a.py"


def test_the_node_s_tests_come_first_then_the_e2e_files_longest_first_then_the_rest() -> None:
    ids = ["tests/unit/test_a.py::t", "tests/e2e/test_webhook.py::t", "tests/integration/test_b.py::t",
           "tests/e2e/test_upgrades.py::t", "tests/e2e/test_new.py::t", "tests/platform/test_node.py::t",
           "tests/e2e/test_queries.py::t"]
    assert sorted(ids, key=rank) == [
        "tests/platform/test_node.py::t", "tests/e2e/test_upgrades.py::t", "tests/e2e/test_queries.py::t",
        "tests/e2e/test_webhook.py::t", "tests/e2e/test_new.py::t", "tests/unit/test_a.py::t",
        "tests/integration/test_b.py::t"]
    assert E2E_ORDER[0] == "test_upgrades.py"


def test_an_e2e_unit_waits_while_the_node_s_tests_run_on_another_worker() -> None:
    queue = ["tests/e2e/test_upgrades.py", "tests/e2e/test_queries.py", "tests/integration/test_b.py"]
    assert pick(queue, node_tests_elsewhere=True) == "tests/integration/test_b.py"
    assert pick(queue, node_tests_elsewhere=False) == "tests/e2e/test_upgrades.py"
    assert pick(queue[:2], node_tests_elsewhere=True) is None  # nothing may start: the worker waits
    assert pick([], node_tests_elsewhere=False) is None
