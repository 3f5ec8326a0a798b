"""Provisioning the real node: Debian packages, kubelet + kube-proxy, the local images.

Idempotent and locked like every other component: packages are installed only when a command
or plugin is missing, the Go binaries are built once per Kubernetes version
(``~/.cache/sluice/kubernetes-node-<version>/bin``), the images once per source hash.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform import kube_build
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged
from sluice_dev.platform.node import config, images

COMPONENT = "node"
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables")
COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
APT_TIMEOUT = 1800.0


def missing_tools() -> list[str]:
    """Commands and CNI plugins the node needs that this machine lacks."""
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    plugins = [config.CNI_BIN_DIR / name for name in CNI_PLUGINS]
    missing += [str(path) for path in plugins if not os.access(path, os.X_OK)]
    return missing


def apt_argv(*args: str) -> list[str]:
    """apt-get that waits for a lock another apt-get holds instead of failing."""
    return ["apt-get", "-o", "DPkg::Lock::Timeout=900", *args]


def install_packages(log: Callable[[str], None] = print) -> None:
    """Install the Debian packages when a tool is missing (as root; otherwise say what to run)."""
    if not missing_tools():
        return
    root = cache_dir("node-packages", "debian")
    log_path = root / "apt.log"
    with file_lock(root / ".lock"):
        missing = missing_tools()
        if not missing:
            return
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise PlatformError(
                COMPONENT,
                f"missing {', '.join(missing)}; install the Debian packages: "
                f"apt-get install {' '.join(PACKAGES)}",
                log_path,
            )
        log(f"{COMPONENT}: installing {', '.join(PACKAGES)} with apt-get (log: {log_path})")
        started = time.monotonic()
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        install = apt_argv("install", "-y", "--no-install-recommends", *PACKAGES)
        try:
            run_logged(COMPONENT, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
        except PlatformError:
            run_logged(COMPONENT, apt_argv("update"), log_path=log_path, env=env, timeout=APT_TIMEOUT)
            run_logged(COMPONENT, install, log_path=log_path, env=env, timeout=APT_TIMEOUT)
        still = missing_tools()
        if still:
            raise PlatformError(COMPONENT, f"still missing after apt-get: {', '.join(still)}", log_path)
        log(f"{COMPONENT}: packages installed in {time.monotonic() - started:.0f}s")


def node_bin_dir() -> Path:
    return kube_build.NODE_GROUP.bin_dir


def provision(log: Callable[[str], None] = print) -> Path:
    """Everything the node needs before it can start; returns the kubelet/kube-proxy bin dir."""
    install_packages(log)
    kube_build.provision(log)  # the control plane's binaries (kubectl among them)
    bin_dir = kube_build.provision_group(kube_build.NODE_GROUP, log)
    images.provision(log)
    return bin_dir
