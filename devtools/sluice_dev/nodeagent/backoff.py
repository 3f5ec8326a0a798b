"""Crash-loop back-off (pure): 0 for the first restart, then ``initial`` doubling up to ``cap``.

A container that ran longer than ``reset_after`` seconds before exiting starts over, like the
kubelet forgetting a back-off entry after it stayed unused for twice the maximum.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float = 10.0
    cap: float = 300.0

    @property
    def reset_after(self) -> float:
        return 2 * self.cap

    def delay(self, crashes: int) -> float:
        """Wait before the restart following the ``crashes``-th consecutive exit (1-based)."""
        if crashes <= 1:
            return 0.0
        return float(min(self.initial * 2 ** (crashes - 2), self.cap))

    def next_crashes(self, crashes: int, ran_for: float) -> int:
        """The consecutive-crash count after an exit of a container that ran ``ran_for`` s."""
        return 1 if ran_for >= self.reset_after else crashes + 1
