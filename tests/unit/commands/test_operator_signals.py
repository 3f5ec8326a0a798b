"""A replica waiting for leadership leaves on SIGTERM (as a container's PID 1 it would otherwise
ignore it, and could take the Lease its leader just released on the same scale-down)."""

from __future__ import annotations

import os
import signal

from sluice.commands.operator import stop_on_signals


def test_sigterm_and_sigint_set_the_stop_event() -> None:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in saved:
            stop = stop_on_signals()
            assert not stop.is_set()
            os.kill(os.getpid(), sig)
            assert stop.wait(5), f"{sig!r} did not set the stop event"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
