"""A tool from a Debian package, installed once with apt-get when it is missing (the Argo CD
scripts' Lua, the alert rules' promtool).

``apt-get install -y --no-install-recommends <package>`` runs first (with the command line the image
build uses, which waits for a lock another apt-get holds); ``apt-get update`` only when that fails
(no or stale package lists), then the install once more. A file lock makes concurrent test
processes install it once. It needs root.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from sluice_dev.images.tooling import APT_GET, apt_install_argv
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged

APT_TIMEOUT = 900.0


def find_tool(path: Path, name: str) -> Path | None:
    """``path`` when it is an executable file, else ``name`` on PATH, else None."""
    if path.is_file() and os.access(path, os.X_OK):
        return path
    on_path = shutil.which(name)
    return Path(on_path) if on_path else None


def ensure_tool(component: str, package: str, tool: str, find: Callable[[], Path | None],
                log: Callable[[str], object] = print) -> Path:
    """The path ``find`` returns, after installing ``package`` when it returns None. Raises
    ``PlatformError`` naming the package and the apt log when ``tool`` still cannot be found."""
    found = find()
    if found is not None:
        return found
    root = cache_dir(component, "debian")
    log_path = root / "apt.log"
    with file_lock(root / ".apt.lock"):
        found = find()
        if found is not None:
            return found
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise PlatformError(component, f"{tool} is missing and cannot be installed here (needs root "
                                f"and apt-get): apt-get install {package}", log_path)
        log(f"{component}: installing {package} with apt-get (log: {log_path})")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        install = apt_install_argv([package])
        try:
            try:
                run_logged(component, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
            except PlatformError:
                run_logged(component, [*APT_GET, "update"], log_path=log_path, env=env, timeout=APT_TIMEOUT)
                run_logged(component, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
        except PlatformError as exc:
            detail = str(exc).removeprefix(f"{component}: ").removesuffix(f" (log: {log_path})")
            raise PlatformError(component, f"could not install {package} with apt-get: {detail}",
                                log_path) from exc
        found = find()
        if found is None:
            raise PlatformError(component, f"{tool} is still missing after apt-get install {package}",
                                log_path)
        return found
