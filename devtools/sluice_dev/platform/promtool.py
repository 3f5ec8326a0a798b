"""``promtool``, Prometheus' own checker and rule tester, for the chart's alert rules.

``promtool test rules`` evaluates alerting rules over synthetic series exactly as the Prometheus
server does (it is the server's rule engine). Debian's ``prometheus`` package ships it as
``/usr/bin/promtool``. It is installed once with apt-get (as root), with the apt-get command line
the image build uses (waits for a lock another apt-get holds), under a file lock so that
concurrent test processes install it once; the package's service is not started (a container's
policy-rc.d, or no init system).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform.debian import ensure_tool, find_tool

COMPONENT = "promtool"
PACKAGE = "prometheus"
PROMTOOL = Path("/usr/bin/promtool")


def find_promtool() -> Path | None:
    """``/usr/bin/promtool``, else a ``promtool`` on PATH, else None."""
    return find_tool(PROMTOOL, "promtool")


def ensure_promtool(log: Callable[[str], object] = print) -> Path:
    """The path of ``promtool``, installed with apt-get (package ``prometheus``) when it is missing
    (:func:`sluice_dev.platform.debian.ensure_tool`)."""
    return ensure_tool(COMPONENT, PACKAGE, "promtool", find_promtool, log)
