"""How a driver decides that its streaming queries ended (sluice_runtime.queryend)."""

from __future__ import annotations

from sluice_runtime.queryend import FAILED, FINISHED, QueryLook, ended, look


class FailsBetweenReads:
    """A query that fails between two reads of ``isActive``, as Spark's do: the cause is set before
    the query is marked terminated."""

    name = "main"

    def __init__(self) -> None:
        self.reads = 0
        self.cause = RuntimeError("SLUICE_UNKNOWN_SCHEMA_ID: ...")

    @property
    def isActive(self) -> bool:  # Spark's name
        self.reads += 1
        return self.reads == 1

    def exception(self) -> RuntimeError | None:
        return None if self.reads == 1 else self.cause


def test_a_query_failing_between_two_looks_is_running_then_failed_never_finished() -> None:
    query = FailsBetweenReads()
    first = look([query])
    assert first == [QueryLook("main", True)] and ended(first) is None
    second = look([query])
    verdict = ended(second)
    assert verdict is not None and verdict[0] == FAILED and verdict[1] is not None
    assert verdict[1].failure is query.cause
    assert query.reads == 2  # one read of isActive per look


def test_failed_wins_over_finished_and_running() -> None:
    boom = ValueError("boom")
    assert ended([QueryLook("dlq", False), QueryLook("main", False, boom)]) == (
        FAILED, QueryLook("main", False, boom))
    assert ended([QueryLook("dlq", True), QueryLook("main", False, boom)]) == (
        FAILED, QueryLook("main", False, boom))


def test_finished_only_when_none_is_active_and_none_failed() -> None:
    assert ended([QueryLook("main", False), QueryLook("dlq", False)]) == (FINISHED, None)
    assert ended([QueryLook("main", False), QueryLook("dlq", True)]) is None
    assert ended([QueryLook("main", True)]) is None
