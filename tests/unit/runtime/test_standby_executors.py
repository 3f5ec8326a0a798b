"""How many executor pods a driver holds while active (and gives back as a standby)."""

from __future__ import annotations

import pytest
from sluice_runtime.standby_executors import ExecutorHold, wanted_executors


@pytest.mark.parametrize(("master", "instances", "wanted"), [
    ("k8s://https://10.0.0.1:443", "2", 2),
    ("k8s://https://10.0.0.1:443", None, 0),
    ("k8s://https://10.0.0.1:443", "0", 0),
    ("k8s://https://10.0.0.1:443", "two", 0),
    ("local[2]", "2", 0),  # local mode: the tasks run in the driver, there is nothing to give back
])
def test_the_executors_a_driver_holds_while_active(master: str, instances: str | None, wanted: int) -> None:
    assert wanted_executors(master, instances) == wanted


def test_without_executors_nothing_is_asked_of_spark() -> None:
    """Local mode: no executor to give back or ask for, so Spark is never called (no session here)."""
    hold = ExecutorHold(spark=None, wanted=0)
    assert hold.release() == 0
    hold.acquire()
    assert hold.stand_by() == 0
