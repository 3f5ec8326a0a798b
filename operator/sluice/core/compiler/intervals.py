"""Normalizing Spark interval strings ('5 minutes', INTERVAL '5' MINUTE) into one spelling."""

from __future__ import annotations

import re

_UNITS = {
    "ms": "millisecond",
    "msec": "millisecond",
    "msecs": "millisecond",
    "millisecond": "millisecond",
    "milliseconds": "millisecond",
    "s": "second",
    "sec": "second",
    "secs": "second",
    "second": "second",
    "seconds": "second",
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "minute": "minute",
    "minutes": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "hour": "hour",
    "hours": "hour",
    "d": "day",
    "day": "day",
    "days": "day",
    "w": "week",
    "week": "week",
    "weeks": "week",
}
_ORDER = ["week", "day", "hour", "minute", "second", "millisecond"]
_PART = re.compile(r"(\d+)\s*([A-Za-z]+)")


class IntervalError(ValueError):
    pass


def normalize_interval(text: str) -> str:
    """'5 MINUTES' / "interval '5' minute" / '1 hour 30 minutes' -> '5 minutes', '1 hour 30 minutes'."""
    cleaned = text.strip().strip("'\"").strip()
    cleaned = re.sub(r"(?i)^interval\s+", "", cleaned).replace("'", " ").replace('"', " ")
    if not cleaned:
        raise IntervalError(f"{text!r} is empty; write e.g. '5 minutes'")
    parts = []
    pos = 0
    for match in _PART.finditer(cleaned):
        if cleaned[pos : match.start()].strip():
            break
        parts.append(match)
        pos = match.end()
    if not parts or cleaned[pos:].strip():
        raise IntervalError(f"{text.strip()!r} is not an interval; write e.g. '5 minutes' or '30 seconds'")
    amounts: dict[str, int] = {}
    for match in parts:
        unit = _UNITS.get(match.group(2).lower())
        if unit is None:
            raise IntervalError(
                f"unknown unit {match.group(2)!r} in {text.strip()!r}; use milliseconds, seconds, minutes, "
                "hours, days or weeks"
            )
        amounts[unit] = amounts.get(unit, 0) + int(match.group(1))
    if not any(amounts.values()):
        raise IntervalError(f"{text.strip()!r} is zero; an interval must be positive")
    out = []
    for unit in _ORDER:
        if amounts.get(unit):
            n = amounts[unit]
            out.append(f"{n} {unit}" + ("" if n == 1 else "s"))
    return " ".join(out)


_MILLIS = {
    "week": 7 * 24 * 3_600_000,
    "day": 24 * 3_600_000,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1_000,
    "millisecond": 1,
}


def interval_millis(text: str) -> int:
    """The length of an interval in milliseconds ('1 hour 30 minutes' -> 5400000)."""
    normalized = normalize_interval(text)
    return sum(int(n) * _MILLIS[unit.rstrip("s")] for n, unit in _PART.findall(normalized))
