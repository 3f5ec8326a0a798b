"""``promtool``, Prometheus' own checker and rule tester, for the chart's alert rules.

``promtool test rules`` evaluates alerting rules over synthetic series exactly as the Prometheus
server does (it is the server's rule engine). Debian's ``prometheus`` package ships it as
``/usr/bin/promtool``. It is installed once with apt-get (as root), with the apt-get command line
the image build uses (waits for a lock another apt-get holds), under a file lock so that
concurrent test processes install it once; the package's service is not started (a container's
policy-rc.d, or no init system).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from sluice_dev.images.tooling import APT_GET, apt_install_argv
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged

COMPONENT = "promtool"
PACKAGE = "prometheus"
PROMTOOL = Path("/usr/bin/promtool")
APT_TIMEOUT = 900.0


def find_promtool() -> Path | None:
    """``/usr/bin/promtool``, else a ``promtool`` on PATH, else None."""
    if PROMTOOL.is_file() and os.access(PROMTOOL, os.X_OK):
        return PROMTOOL
    on_path = shutil.which("promtool")
    return Path(on_path) if on_path else None


def ensure_promtool(log: Callable[[str], object] = print) -> Path:
    """The path of ``promtool``, installed with apt-get (package ``prometheus``) when it is missing.

    ``apt-get install -y --no-install-recommends prometheus`` runs first; ``apt-get update`` only
    when that fails (no or stale package lists), then the install once more. Raises
    ``PlatformError`` naming the package and the apt log when promtool still cannot be found."""
    found = find_promtool()
    if found is not None:
        return found
    root = cache_dir(COMPONENT, "debian")
    log_path = root / "apt.log"
    with file_lock(root / ".apt.lock"):
        found = find_promtool()
        if found is not None:
            return found
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise PlatformError(COMPONENT, f"promtool is missing and cannot be installed here (needs root "
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
        found = find_promtool()
        if found is None:
            raise PlatformError(COMPONENT, f"promtool is still missing after apt-get install {PACKAGE}",
                                log_path)
        return found
