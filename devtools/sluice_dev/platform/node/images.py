"""The node's tiny local images, built without a registry or an image builder.

``devtools/node-images/`` holds two static Go programs: ``pause`` (the pod sandbox; the upstream
pause image cannot be pulled here) and ``nodetest`` (an HTTP server and client for the real-node
tests). Each is built with ``CGO_ENABLED=0`` and packed into a one-layer OCI image archive written
here directly (layer tar, config, manifest, index; deterministic, so the digests are stable), then
imported with ``ctr images import``. The archives are cached under
``~/.cache/sluice/node-images-<hash of the sources>/``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice_dev.platform import kube_build
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged
from sluice_dev.platform.node import config

COMPONENT = "node-images"
SOURCES = Path(__file__).resolve().parents[3] / "node-images"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class Image:
    name: str
    program: str  # Go package directory under devtools/node-images/
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()

    @property
    def archive_name(self) -> str:
        return f"{self.program}.oci.tar"


IMAGES: tuple[Image, ...] = (
    Image(config.PAUSE_IMAGE, "pause", ("/pause",)),
    Image(config.TEST_IMAGE, "nodetest", ("/nodetest",), ("serve",)),
)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def layer_tar(files: Sequence[tuple[str, bytes, int]]) -> bytes:
    """An uncompressed, deterministic layer: ``(path, content, mode)`` entries."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in files:
            _add(tar, path.lstrip("/"), content, mode)
    return buffer.getvalue()


def oci_archive(
    name: str, layer: bytes, *, entrypoint: Sequence[str], cmd: Sequence[str] = (), user: str = "65532"
) -> bytes:
    """A single-layer, linux/amd64 OCI image layout as a tar, named ``name`` for ``ctr import``."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Cmd": list(cmd), "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        "history": [{"created_by": "sluice_dev.platform.node.images"}],
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": _digest(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": OCI_LAYER, "digest": _digest(layer), "size": len(layer)}],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    tag = name.rpartition(":")[2]
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "digest": _digest(manifest_blob),
            "size": len(manifest_blob),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
        }],
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for blob in (config_blob, manifest_blob, layer):
            _add(tar, f"blobs/sha256/{_digest(blob).removeprefix('sha256:')}", blob)
    return buffer.getvalue()


def sources_hash(root: Path = SOURCES) -> str:
    """Hash of the Go sources (and the image list), the cache key of the archives."""
    digest = hashlib.sha256(repr(IMAGES).encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in {".go", ".mod"}:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache() -> Path:
    return cache_dir(COMPONENT, sources_hash())


def coredns_archive_path() -> Path:
    return kube_build.COREDNS_GROUP.cache / "coredns.oci.tar"


def archives() -> list[Path]:
    """Every archive the node imports: pause, nodetest, CoreDNS."""
    return [*(cache() / image.archive_name for image in IMAGES), coredns_archive_path()]


def provision_coredns(log: Callable[[str], None] = print) -> Path:
    """Build CoreDNS (``kube_build.COREDNS_GROUP``) and pack it into an image, once per version."""
    group = kube_build.COREDNS_GROUP
    bin_dir = kube_build.provision_group(group, log)
    archive = coredns_archive_path()
    if archive.exists():
        return archive
    with file_lock(group.cache / ".lock"):
        if not archive.exists():
            layer = layer_tar([("/coredns", (bin_dir / "coredns").read_bytes(), 0o755)])
            tmp = archive.with_name(archive.name + ".partial")
            tmp.write_bytes(oci_archive(config.COREDNS_IMAGE, layer, entrypoint=["/coredns"]))
            tmp.replace(archive)
    return archive


def provision(log: Callable[[str], None] = print) -> list[Path]:
    """Build the programs and their OCI archives once per source hash (CoreDNS once per
    version); return every archive."""
    provision_coredns(log)
    root = cache()
    marker = root / ".provisioned"
    if marker.exists():
        return archives()
    log_path = root / "build.log"
    with file_lock(root / ".lock"):
        if marker.exists():
            return archives()
        go = shutil.which("go")
        if go is None:
            raise PlatformError(COMPONENT, "the Go toolchain (`go`) is not on PATH", log_path)
        log(f"{COMPONENT}: building {', '.join(i.program for i in IMAGES)} (log: {log_path})")
        env = {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOWORK": "off"}
        for image in IMAGES:
            binary = root / "bin" / image.program
            run_logged(
                COMPONENT,
                [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), f"./{image.program}"],
                log_path=log_path, env=env, cwd=SOURCES, timeout=900,
            )
            layer = layer_tar([(image.entrypoint[0], binary.read_bytes(), 0o755)])
            archive = oci_archive(image.name, layer, entrypoint=image.entrypoint, cmd=image.cmd)
            tmp = root / f"{image.archive_name}.partial"
            tmp.write_bytes(archive)
            tmp.replace(root / image.archive_name)
        marker.write_text("ok\n")
    return archives()
