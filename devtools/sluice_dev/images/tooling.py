"""The Debian packages the image build needs (buildah, mmdebstrap, umoci, runc), installed once.

Installing needs root and apt-get; a package already installed is never touched again, so a warm
run costs one ``dpkg-query``. apt-get waits for a lock held by a concurrent apt-get (up to 15
minutes) instead of failing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from sluice_dev.platform.common import PlatformError, file_lock, run_logged

COMPONENT = "images"
#: Debian package -> a command it provides
PACKAGES: dict[str, str] = {
    "buildah": "buildah", "mmdebstrap": "mmdebstrap", "umoci": "umoci", "runc": "runc",
}
APT_GET: tuple[str, ...] = ("apt-get", "-o", "DPkg::Lock::Timeout=900")


def missing_packages(packages: dict[str, str] | None = None) -> list[str]:
    """Packages whose command is not on PATH (sorted)."""
    wanted = PACKAGES if packages is None else packages
    return sorted(name for name, command in wanted.items() if shutil.which(command) is None)


def apt_install_argv(packages: Sequence[str]) -> list[str]:
    return [*APT_GET, "install", "-y", "--no-install-recommends", *packages]


def ensure_packages(
    cache: Path, packages: dict[str, str] | None = None, log: Callable[[str], object] = print
) -> None:
    """Install the missing Debian packages with apt-get (idempotent, locked)."""
    if not missing_packages(packages):
        return
    log_path = cache / "apt.log"
    with file_lock(cache / ".apt.lock"):
        missing = missing_packages(packages)
        if not missing:
            return
        if os.geteuid() != 0:
            raise PlatformError(
                COMPONENT, f"needs root to install {', '.join(missing)} with apt-get", log_path
            )
        log(f"{COMPONENT}: installing {', '.join(missing)} with apt-get (log: {log_path})")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        try:
            run_logged(COMPONENT, apt_install_argv(missing), log_path=log_path, env=env, timeout=1800)
        except PlatformError:
            # stale package lists: refresh them once and try again
            run_logged(COMPONENT, [*APT_GET, "update"], log_path=log_path, env=env, timeout=900)
            run_logged(COMPONENT, apt_install_argv(missing), log_path=log_path, env=env, timeout=1800)
        still = missing_packages(packages)
        if still:
            raise PlatformError(COMPONENT, f"still missing after apt-get: {', '.join(still)}", log_path)


def output_of(argv: Sequence[str], *, timeout: float = 120) -> str:
    """stdout of a short query command ('' if it fails)."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""
