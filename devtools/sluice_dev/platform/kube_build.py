"""Building the Kubernetes control-plane binaries, etcd and helm from Go modules (cached).

The wrapper modules under ``devtools/kube-build/`` pin the versions (their ``go.mod``/``go.sum``
are committed); ``go build`` fetches the sources through the Go module proxy. Each group of
binaries lands in ``<cache>/<component>-<version>/bin/`` and is built at most once per version.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged

VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
HELM_VERSION = "3.22.0"
COREDNS_VERSION = "1.15.0"

BUILD_ROOT = Path(__file__).resolve().parents[2] / "kube-build"
BUILD_TIMEOUT = 3 * 3600.0


@dataclass(frozen=True)
class BuildGroup:
    """Binaries built by one ``go build`` from one wrapper module."""

    component: str
    version: str
    module_dir: Path
    # binary name -> Go package path
    packages: dict[str, str]
    # ``-X importpath.name=value`` link flags (version stamping that release builds do)
    stamps: tuple[str, ...] = ()
    # a static binary (CGO_ENABLED=0), for an image without a C library
    static: bool = False

    @property
    def cache(self) -> Path:
        return cache_dir(self.component, self.version)

    @property
    def bin_dir(self) -> Path:
        return self.cache / "bin"

    @property
    def log_path(self) -> Path:
        return self.cache / "build.log"

    def complete(self) -> bool:
        return all(os.access(self.bin_dir / name, os.X_OK) for name in self.packages)


def _kube_stamps(version: str) -> tuple[str, ...]:
    """What the Kubernetes release build stamps, so that clients see a real server version."""
    major, minor, _ = version.split(".")
    stamps: list[str] = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps += [
            f"{package}.gitVersion=v{version}",
            f"{package}.gitMajor={major}",
            f"{package}.gitMinor={minor}",
            f"{package}.gitTreeState=clean",
            f"{package}.gitCommit=0000000000000000000000000000000000000000",
        ]
    return tuple(stamps)


GROUPS: tuple[BuildGroup, ...] = (
    BuildGroup(
        "kubernetes",
        VERSION,
        BUILD_ROOT / "kubernetes",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
        _kube_stamps(VERSION),
    ),
    BuildGroup("etcd", ETCD_VERSION, BUILD_ROOT / "etcd", {"etcd": "go.etcd.io/etcd/server/v3"}),
    BuildGroup(
        "helm",
        HELM_VERSION,
        BUILD_ROOT / "helm",
        {"helm": "helm.sh/helm/v3/cmd/helm"},
        (
            f"helm.sh/helm/v3/internal/version.version=v{HELM_VERSION}",
            "helm.sh/helm/v3/internal/version.gitTreeState=clean",
        ),
    ),
)

# The real node's binaries: a group of their own (same module and version), so that adding them
# does not invalidate a cached control-plane build. Not linked into ``bin_dir()``; the node
# component finds them through ``NODE_GROUP.bin_dir``.
NODE_GROUP = BuildGroup(
    "kubernetes-node",
    VERSION,
    BUILD_ROOT / "kubernetes",
    {
        "kubelet": "k8s.io/kubernetes/cmd/kubelet",
        "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
    },
    _kube_stamps(VERSION),
)

# Cluster DNS of the real node, packed into an image by ``sluice_dev.platform.node.images``.
COREDNS_GROUP = BuildGroup(
    "coredns",
    COREDNS_VERSION,
    BUILD_ROOT / "coredns",
    {"coredns": "sluice.dev/kube-build/coredns"},
    (f"github.com/coredns/coredns/coremain.GitCommit=v{COREDNS_VERSION}",),
    static=True,
)

# Every binary the platform needs, all reachable from ``bin_dir()``.
BINARIES: tuple[str, ...] = tuple(name for group in GROUPS for name in group.packages)


def bin_dir() -> Path:
    """The directory that holds (or links to) every binary: the Kubernetes group's ``bin/``."""
    return GROUPS[0].bin_dir


def provision_group(group: BuildGroup, log: Callable[[str], None] = print) -> Path:
    """Build one group once per version (locked); return its bin dir."""
    if not group.complete():
        with file_lock(group.cache / ".lock"):
            if not group.complete():
                _build(group, log)
    return group.bin_dir


def _build(group: BuildGroup, log: Callable[[str], None]) -> None:
    go = shutil.which("go")
    if go is None:
        raise PlatformError(group.component, "the Go toolchain (`go`) is not on PATH", group.log_path)
    if not (group.module_dir / "go.mod").is_file():
        raise PlatformError(group.component, f"wrapper module {group.module_dir} is missing", group.log_path)
    staging = group.cache / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = {"GOTOOLCHAIN": "local", "GOWORK": "off", **({"CGO_ENABLED": "0"} if group.static else {})}
    names = list(group.packages)
    log(f"{group.component} {group.version}: building {', '.join(names)} with go (first time only; slow)")
    started = time.monotonic()
    ldflags = " ".join(["-s", "-w", *(f"-X {stamp}" for stamp in group.stamps)])
    for name, package in group.packages.items():
        # One `go build` per binary so that each output is named explicitly (etcd's main package
        # path ends in /v3); the shared build cache makes the later ones cheap.
        run_logged(
            group.component,
            [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(staging / name), package],
            log_path=group.log_path,
            env=env,
            cwd=group.module_dir,
            timeout=BUILD_TIMEOUT,
        )
    missing = [name for name in names if not (staging / name).is_file()]
    if missing:
        raise PlatformError(group.component, f"go build produced no {', '.join(missing)}", group.log_path)
    # Keep links that other groups placed in this bin dir.
    group.bin_dir.mkdir(exist_ok=True)
    for name in names:
        os.replace(staging / name, group.bin_dir / name)
    shutil.rmtree(staging, ignore_errors=True)
    elapsed = time.monotonic() - started
    with open(group.log_path, "a") as handle:
        handle.write(f"\nbuilt {', '.join(names)} in {elapsed:.0f}s\n")
    log(f"{group.component} {group.version}: built in {elapsed:.0f}s")


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def provision(log: Callable[[str], None] = print) -> Path:
    """Build (once per version) every binary; return the bin dir holding all of them."""
    for group in GROUPS:
        provision_group(group, log)
    target = bin_dir()
    target.mkdir(parents=True, exist_ok=True)
    with file_lock(GROUPS[0].cache / ".lock"):
        for group in GROUPS[1:]:
            for name in group.packages:
                _link(group.bin_dir / name, target / name)
    return target
