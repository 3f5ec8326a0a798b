"""Run a command inside an image archive with runc, without a container engine (smoke tests).

The OCI archive is unpacked into a runtime bundle with ``umoci unpack`` (root file system plus a
``config.json`` carrying the image's user, environment and working directory); the command
replaces the process arguments, the root file system is mounted read-only with a fresh tmpfs on
``/tmp`` (as the pods' ``emptyDir``), and ``runc run`` executes it in new namespaces (no network
but loopback). Needs root. Every container and bundle made here is removed afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_dev.platform.common import PlatformError

COMPONENT = "runc"
#: the ref name ``unpack_bundle`` adds to the archive's index for umoci (a plain tag)
SMOKE_TAG = "sluice-smoke"
#: where ``run_in_bundle`` keeps the config umoci wrote, next to the one it runs
IMAGE_CONFIG = "config.image.json"
_counter = itertools.count()


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def tag_for_umoci(layout: Path, tag: str = SMOKE_TAG) -> None:
    """Give the layout's (single) manifest a plain tag: umoci cannot address a full reference."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    manifests = index.get("manifests", [])
    if not manifests:
        raise PlatformError(COMPONENT, f"{layout}: image index lists no manifest")
    entry = dict(manifests[0])
    entry["annotations"] = {**entry.get("annotations", {}), "org.opencontainers.image.ref.name": tag}
    index["manifests"] = [*manifests, entry]
    index_path.write_text(json.dumps(index))


def adapt_config(config: dict[str, Any], args: Sequence[str], *, readonly: bool = True,
                 env: Sequence[str] = ()) -> dict[str, Any]:
    """The bundle's runtime config, changed to run ``args`` (pure; returns a new dict)."""
    changed = json.loads(json.dumps(config))
    process = changed.setdefault("process", {})
    process["args"] = list(args)
    process["terminal"] = False
    process["env"] = [*process.get("env", []), *env]
    changed.setdefault("root", {})["readonly"] = readonly
    mounts = [m for m in changed.get("mounts", []) if m.get("destination") != "/tmp"]
    mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "nodev", "mode=1777", "size=512m"]})
    changed["mounts"] = mounts
    linux = changed.setdefault("linux", {})
    # no cgroup limits (the development machines allow no lowering of limits; not under test here)
    linux.pop("resources", None)
    linux.pop("cgroupsPath", None)
    process.pop("rlimits", None)
    return changed


@contextlib.contextmanager
def unpack_bundle(archive: Path, workdir: Path) -> Iterator[Path]:
    """An umoci bundle of ``archive`` under ``workdir`` (removed afterwards)."""
    umoci = shutil.which("umoci")
    if umoci is None:
        raise PlatformError(COMPONENT, "umoci is not installed (apt-get install umoci)")
    root = workdir / f"bundle-{os.getpid()}-{next(_counter)}"
    layout, bundle = root / "layout", root / "bundle"
    layout.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(layout, filter="data")
        tag_for_umoci(layout)
        result = subprocess.run([umoci, "unpack", "--image", f"{layout}:{SMOKE_TAG}", str(bundle)],
                                capture_output=True, text=True, check=False, timeout=600)
        if result.returncode != 0:
            raise PlatformError(COMPONENT, f"umoci unpack {archive.name} failed: {result.stderr.strip()}")
        yield bundle
    finally:
        shutil.rmtree(root, ignore_errors=True)


def image_config(bundle: Path) -> dict[str, Any]:
    """The runtime config umoci made from the image (before ``run_in_bundle`` changed it)."""
    original = bundle / IMAGE_CONFIG
    path = original if original.exists() else bundle / "config.json"
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def run_in_bundle(bundle: Path, args: Sequence[str], *, readonly: bool = True, env: Sequence[str] = (),
                  timeout: float = 300) -> Result:
    """Run ``args`` in the bundle with ``runc run`` (foreground) and return its exit and output."""
    runc = shutil.which("runc")
    if runc is None:
        raise PlatformError(COMPONENT, "runc is not installed (apt-get install runc)")
    config = image_config(bundle)
    original = bundle / IMAGE_CONFIG
    if not original.exists():
        original.write_text(json.dumps(config))
    (bundle / "config.json").write_text(json.dumps(adapt_config(config, args, readonly=readonly, env=env)))
    state = bundle.parent / "runc-state"
    container = f"sluice-smoke-{os.getpid()}-{next(_counter)}"
    base = [runc, "--root", str(state)]
    try:
        result = subprocess.run([*base, "run", "--bundle", str(bundle), container], capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, check=False, timeout=timeout)
    finally:
        subprocess.run([*base, "delete", "--force", container], capture_output=True, check=False)
    return Result(result.returncode, result.stdout, result.stderr)


def run_in_image(archive: Path, args: Sequence[str], *, workdir: Path, readonly: bool = True,
                 env: Sequence[str] = (), timeout: float = 300) -> Result:
    """Unpack ``archive``, run ``args`` in it, clean up."""
    with unpack_bundle(archive, workdir) as bundle:
        return run_in_bundle(bundle, args, readonly=readonly, env=env, timeout=timeout)
