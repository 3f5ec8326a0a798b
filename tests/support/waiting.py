"""Polling for a condition in the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 30.0,
    interval: float = 0.25,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> T:
    """Poll ``check`` until it returns something truthy, and return that.

    Exceptions of the ``retry_on`` types (transient API errors while things settle) count as "not
    yet"; others propagate at once. After ``timeout`` seconds: AssertionError naming ``what`` and
    the last result or error.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except retry_on as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting until {what} (last: {last!r})")
