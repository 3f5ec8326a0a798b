"""A Lua 5.1 interpreter for testing the Argo CD health checks and actions (``argocd/``).

Argo CD runs those scripts in gopher-lua, which follows Lua 5.1; Debian's ``lua5.1`` package is
the reference interpreter of that language version. It is installed once with apt-get (as root),
with the apt-get command line the image build uses (waits for a lock another apt-get holds), under
a file lock so that concurrent test processes install it once.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from sluice_dev.images.tooling import APT_GET, apt_install_argv
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged

COMPONENT = "lua"
PACKAGE = "lua5.1"
LUA = Path("/usr/bin/lua5.1")
APT_TIMEOUT = 900.0


def find_lua() -> Path | None:
    """``/usr/bin/lua5.1``, else a ``lua5.1`` on PATH, else None."""
    if LUA.is_file() and os.access(LUA, os.X_OK):
        return LUA
    on_path = shutil.which(PACKAGE)
    return Path(on_path) if on_path else None


def ensure_lua(log: Callable[[str], object] = print) -> Path:
    """The path of the ``lua5.1`` interpreter, installed with apt-get when it is missing.

    ``apt-get install -y --no-install-recommends lua5.1`` runs first; ``apt-get update`` only when
    that fails (no or stale package lists), then the install once more. Raises ``PlatformError``
    naming lua5.1 and the apt log when the interpreter still cannot be found."""
    found = find_lua()
    if found is not None:
        return found
    root = cache_dir(COMPONENT, "debian")
    log_path = root / "apt.log"
    with file_lock(root / ".apt.lock"):
        found = find_lua()
        if found is not None:
            return found
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise PlatformError(COMPONENT, f"{PACKAGE} is missing and cannot be installed here (needs root "
                                f"and apt-get): apt-get install {PACKAGE}", log_path)
        log(f"{COMPONENT}: installing {PACKAGE} with apt-get (log: {log_path})")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        install = apt_install_argv([PACKAGE])
        try:
            try:
                run_logged(COMPONENT, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
            except PlatformError:
                run_logged(COMPONENT, [*APT_GET, "update"], log_path=log_path, env=env, timeout=APT_TIMEOUT)
                run_logged(COMPONENT, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
        except PlatformError as exc:
            detail = str(exc).removeprefix(f"{COMPONENT}: ").removesuffix(f" (log: {log_path})")
            raise PlatformError(COMPONENT, f"could not install {PACKAGE} with apt-get: {detail}",
                                log_path) from exc
        found = find_lua()
        if found is None:
            raise PlatformError(COMPONENT, f"{PACKAGE} is still missing after apt-get install {PACKAGE}",
                                log_path)
        return found
