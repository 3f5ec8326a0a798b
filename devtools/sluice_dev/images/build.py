"""``sluice-dev images build``: the project's Dockerfiles built with buildah, cached by content.

1. The Debian base: ``mmdebstrap --variant=minbase bookworm`` from the machine's own apt sources
   file (so no mirror is named anywhere), cached as
   ``~/.cache/sluice/debian-base-bookworm-<key>/rootfs.tar`` where the key hashes the suite, the
   variant and the sources' content; imported into a private buildah store as
   ``debian:bookworm-slim``, which is what the Dockerfiles ``FROM``.
2. Each image: ``buildah build --layers`` of its Dockerfile (repository root as context), then
   ``buildah push`` to an OCI archive ``~/.cache/sluice/images/<name>-<version>-<key>.oci.tar``.
   The key hashes the Dockerfile, the context files the image can see and the base's key; an
   archive that exists is never rebuilt, and the layer cache makes a source-only change rebuild
   just the last layers.
3. ``load_into_containerd`` hands an archive to a containerd (``ctr images import``).

Everything is idempotent and serialized by file locks. The buildah store lives in the cache
(``~/.cache/sluice/images/storage``), apart from the machine's own.

The build reaches the package registries through the machine's network (``--network host``); if
the machine trusts locally added CA certificates (``/usr/local/share/ca-certificates``), they are
bind-mounted read-only into the ``RUN`` steps, where Debian's ca-certificates adds them to the
image's trust stores (so pip and Maven inside the build trust what the machine trusts).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice_dev.images import spec as specs
from sluice_dev.images import tooling
from sluice_dev.platform.common import PlatformError, cache_dir, cache_root, file_lock, run_logged

COMPONENT = "images"
REPO = Path(__file__).resolve().parents[3]
SUITE = "bookworm"
VARIANT = "minbase"
#: the machine's own apt sources (``$SLUICE_APT_SOURCES`` overrides)
DEFAULT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")
PROVISIONED = ".provisioned"

Log = Callable[[str], object]


@dataclass(frozen=True)
class Store:
    """The private buildah store and the archives, under ``<cache root>/images/``."""

    root: Path

    @property
    def buildah(self) -> list[str]:
        return specs.buildah_global(self.root / "storage", self.root / "run")

    def archive(self, spec: specs.ImageSpec, key: str) -> Path:
        return self.root / specs.archive_name(spec, key)

    def log_path(self, what: str) -> Path:
        return self.root / "logs" / f"{what}.log"


def default_store() -> Store:
    root = cache_root() / "images"
    root.mkdir(parents=True, exist_ok=True)
    return Store(root)


def apt_sources() -> Path:
    path = Path(os.environ.get("SLUICE_APT_SOURCES", str(DEFAULT_SOURCES)))
    if not path.is_file():
        raise PlatformError(COMPONENT, f"apt sources file {path} not found (set SLUICE_APT_SOURCES)")
    return path


def provision_base(log: Log = print) -> tuple[Path, str]:
    """The Debian base rootfs tarball (made once per suite and sources content) and its key."""
    sources = apt_sources()
    key = specs.base_key(SUITE, VARIANT, sources.read_bytes())
    root = cache_dir("debian-base", f"{SUITE}-{key[:12]}")
    tarball = root / "rootfs.tar"
    if (root / PROVISIONED).exists():
        return tarball, key
    log_path = root / "provision.log"
    with file_lock(root / ".lock"):
        if (root / PROVISIONED).exists():
            return tarball, key
        log(f"{COMPONENT}: making the Debian {SUITE} base with mmdebstrap (log: {log_path})")
        started = time.monotonic()
        partial = root / "rootfs.tar.partial.tar"
        partial.unlink(missing_ok=True)
        run_logged(COMPONENT, specs.mmdebstrap_argv(SUITE, VARIANT, partial, sources),
                   log_path=log_path, timeout=1800)
        partial.rename(tarball)
        (root / PROVISIONED).write_text(key + "\n")
        log(f"{COMPONENT}: base rootfs ready in {time.monotonic() - started:.1f}s")
    return tarball, key


def _image_exists(store: Store, reference: str) -> bool:
    return bool(tooling.output_of([*store.buildah, "images", "--quiet", reference]).strip())


def import_base(store: Store, tarball: Path, key: str, log: Log = print) -> None:
    """Store the rootfs as ``debian:bookworm-slim`` unless the store already has this one."""
    marker = store.root / "base.key"
    if marker.exists() and marker.read_text().strip() == key and _image_exists(store, specs.BASE_REFERENCE):
        return
    log_path = store.log_path("base-import")
    log(f"{COMPONENT}: importing the base as {specs.BASE_REFERENCE} (log: {log_path})")
    container = f"sluice-base-import-{os.getpid()}"
    buildah = store.buildah
    run_logged(COMPONENT, [*buildah, "from", "--name", container, "scratch"], log_path=log_path)
    try:
        run_logged(COMPONENT, [*buildah, "add", "--quiet", container, str(tarball), "/"], log_path=log_path)
        run_logged(COMPONENT, [*buildah, "config", "--cmd", "/bin/bash", "--env",
                               "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               container], log_path=log_path)
        run_logged(COMPONENT, [*buildah, "commit", "--quiet", container, specs.BASE_REFERENCE],
                   log_path=log_path, timeout=900)
    finally:
        tooling.output_of([*buildah, "rm", container])
    marker.write_text(key + "\n")


def build_volumes(ca_dir: Path = LOCAL_CA_DIR) -> list[str]:
    """Read-only bind mounts for the ``RUN`` steps: the machine's locally added CAs, if any."""
    if ca_dir.is_dir() and any(ca_dir.rglob("*.crt")):
        return [f"{ca_dir}:{ca_dir}:ro"]
    return []


def environment_key(ca_dir: Path = LOCAL_CA_DIR) -> str:
    """A key of what the build mounts in (those CAs end up in the images' trust stores)."""
    files = sorted(ca_dir.rglob("*.crt")) if ca_dir.is_dir() else []
    return specs.content_key((str(path), path.read_bytes()) for path in files)


def build_image(
    spec: specs.ImageSpec, base_key: str, *, store: Store, root: Path = REPO, log: Log = print
) -> Path:
    """Build one image unless its archive exists; return the OCI archive."""
    key = specs.image_key(root, spec, f"{base_key}:{environment_key()}")
    archive = store.archive(spec, key)
    if archive.exists():
        log(f"{COMPONENT}: {spec.name} up to date ({archive.name})")
        return archive
    with file_lock(store.root / ".build.lock"):
        if archive.exists():
            return archive
        log_path = store.log_path(spec.name)
        log(f"{COMPONENT}: building {spec.name} from {spec.dockerfile} (log: {log_path})")
        started = time.monotonic()
        run_logged(COMPONENT, specs.build_argv(store.buildah, spec, root, volumes=build_volumes()),
                   log_path=log_path, timeout=3600)
        partial = archive.with_name(archive.name + ".partial")
        partial.unlink(missing_ok=True)
        run_logged(COMPONENT, specs.push_argv(store.buildah, spec, partial), log_path=log_path, timeout=1800)
        partial.rename(archive)
        for old in store.root.glob(f"{spec.name}-*.oci.tar"):
            if old != archive:
                old.unlink(missing_ok=True)
        log(f"{COMPONENT}: {spec.name} built in {time.monotonic() - started:.1f}s -> {archive}")
    return archive


def build(names: Iterable[str] = (), *, root: Path = REPO, log: Log = print) -> dict[str, Path]:
    """Build the named images (all by default); return name -> OCI archive."""
    wanted = [specs.by_name(name) for name in names] or list(specs.IMAGES)
    store = default_store()
    tooling.ensure_packages(store.root, log=log)
    tarball, base_key = provision_base(log=log)
    with file_lock(store.root / ".base.lock"):
        import_base(store, tarball, base_key, log=log)
    return {spec.name: build_image(spec, base_key, store=store, root=root, log=log) for spec in wanted}


def archives(names: Sequence[str] = ()) -> dict[str, Path]:
    """The current archives (building what is stale): what the node loads."""
    return build(names, log=lambda _: None)


def by_reference(built: dict[str, Path]) -> dict[str, Path]:
    """``build``'s result (image name -> archive) keyed by the reference each archive carries."""
    return {specs.by_name(name).reference(): archive for name, archive in built.items()}


def load_into_containerd(archive: Path, address: str, *, namespace: str = "k8s.io",
                         log_path: Path | None = None) -> None:
    """Import an OCI archive into the containerd listening on ``address`` (a socket path)."""
    if not archive.is_file():
        raise PlatformError(COMPONENT, f"no image archive at {archive}")
    run_logged(COMPONENT, specs.ctr_import_argv(archive, address, namespace),
               log_path=log_path or default_store().log_path("containerd-import"), timeout=900)
