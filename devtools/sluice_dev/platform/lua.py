"""A Lua 5.1 interpreter for testing the Argo CD health checks and actions (``argocd/``).

Argo CD runs those scripts in gopher-lua, which follows Lua 5.1; Debian's ``lua5.1`` package is
the reference interpreter of that language version. It is installed once with apt-get (as root),
with the apt-get command line the image build uses (waits for a lock another apt-get holds), under
a file lock so that concurrent test processes install it once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform.debian import ensure_tool, find_tool

COMPONENT = "lua"
PACKAGE = "lua5.1"
LUA = Path("/usr/bin/lua5.1")


def find_lua() -> Path | None:
    """``/usr/bin/lua5.1``, else a ``lua5.1`` on PATH, else None."""
    return find_tool(LUA, "lua5.1")


def ensure_lua(log: Callable[[str], object] = print) -> Path:
    """The path of ``lua5.1``, installed with apt-get (package ``lua5.1``) when it is missing
    (:func:`sluice_dev.platform.debian.ensure_tool`)."""
    return ensure_tool(COMPONENT, PACKAGE, "lua5.1", find_lua, log)
