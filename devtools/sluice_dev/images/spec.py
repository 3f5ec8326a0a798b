"""What the images are made of, and the pure parts of building them: content keys and argv.

Both images are built from the repository root as build context, of which the repository's
``.dockerignore`` lets through ``CONTEXT_INCLUDE`` minus the ``CONTEXT_EXCLUDE`` patterns (a unit
test keeps the two in step). An image's inputs are its Dockerfile, ``.dockerignore`` and the
context files under the entries it copies (``ImageSpec.sources``; a unit test checks the
Dockerfile's ``COPY`` lines against them). Its cache key is a hash of those inputs and of the base
image's key, so a rebuild happens when one of them changes, and only then.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the only version anywhere: images are tagged with the package's version, as the chart
#: (``appVersion``) and the operator's default runtime image (``default_image``) expect
from sluice import __version__ as VERSION

#: the locally made base is stored under this name; the Dockerfiles' ``FROM debian:bookworm-slim``
#: finds it there (buildah resolves a short name to a ``localhost/`` image before anything else,
#: and ``--pull-never`` forbids pulling)
BASE_REFERENCE = "localhost/debian:bookworm-slim"
#: top-level context entries the images use (``!`` lines of ``.dockerignore``); ``requirements``
#: holds the dependency locks the images install from, so that a lock change rebuilds them
CONTEXT_INCLUDE: tuple[str, ...] = (
    "pyproject.toml", "README.md", "requirements", "operator", "runtime-image")
#: name patterns left out anywhere below them (``**/`` lines of ``.dockerignore``)
CONTEXT_EXCLUDE: tuple[str, ...] = ("__pycache__", "*.pyc", "*.egg-info", "Dockerfile")


@dataclass(frozen=True)
class ImageSpec:
    """One image: its repository name, its Dockerfile and the context entries it copies."""

    name: str
    dockerfile: str
    sources: tuple[str, ...] = CONTEXT_INCLUDE

    def reference(self, version: str = VERSION) -> str:
        """The name the archive carries, ``localhost/<name>:<version>``: the local node's pods
        name their image so (an unqualified name would be taken for one of a public registry)."""
        return self.local_tag(version)

    def local_tag(self, version: str = VERSION) -> str:
        return f"localhost/{self.name}:{version}"


RUNTIME = ImageSpec("sluice-runtime", "runtime-image/Dockerfile")
OPERATOR = ImageSpec(
    "sluice-operator", "operator/Dockerfile", ("pyproject.toml", "README.md", "requirements", "operator"))
IMAGES: tuple[ImageSpec, ...] = (RUNTIME, OPERATOR)


def by_name(name: str) -> ImageSpec:
    for spec in IMAGES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown image {name!r} (known: {', '.join(s.name for s in IMAGES)})")


def _excluded(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in CONTEXT_EXCLUDE)


def context_files(root: Path, entries: Sequence[str] = CONTEXT_INCLUDE) -> Iterator[Path]:
    """The build context's files under ``entries`` (not excluded), relative to ``root``, sorted."""
    found: list[Path] = []
    for entry in entries:
        path = root / entry
        if path.is_file():
            found.append(Path(entry))
            continue
        for child in path.rglob("*"):
            rel = child.relative_to(root)
            if any(_excluded(part) for part in rel.parts) or not child.is_file():
                continue
            found.append(rel)
    yield from sorted(found)


def content_key(parts: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over named byte strings, unambiguous (each name and length is hashed too)."""
    digest = hashlib.sha256()
    for name, data in parts:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def image_key(root: Path, spec: ImageSpec, base_key: str) -> str:
    """The cache key of ``spec``: its Dockerfile, the context files it copies, the base's key."""

    def parts() -> Iterator[tuple[str, bytes]]:
        yield "base", base_key.encode()
        yield "dockerfile", (root / spec.dockerfile).read_bytes()
        ignore = root / ".dockerignore"
        yield "dockerignore", ignore.read_bytes() if ignore.exists() else b""
        for rel in context_files(root, spec.sources):
            path = root / rel
            mode = b"x" if path.stat().st_mode & 0o111 else b"-"
            yield f"file:{rel.as_posix()}", mode + path.read_bytes()

    return content_key(parts())


def base_key(suite: str, variant: str, sources: bytes) -> str:
    """The cache key of the Debian base rootfs: suite, variant and the apt sources' content."""
    return content_key([("suite", suite.encode()), ("variant", variant.encode()), ("sources", sources)])


def archive_name(spec: ImageSpec, key: str, version: str = VERSION) -> str:
    return f"{spec.name}-{version}-{key[:16]}.oci.tar"


# --- argv -------------------------------------------------------------------------------------


def mmdebstrap_argv(suite: str, variant: str, output: Path, sources: Path) -> list[str]:
    """A minimal Debian rootfs tarball from the machine's own apt sources (no mirror named)."""
    return ["mmdebstrap", f"--variant={variant}", suite, str(output), str(sources)]


def buildah_global(storage_root: Path, run_root: Path) -> list[str]:
    """``buildah`` with a private image store, so nothing here touches the machine's own."""
    return ["buildah", "--root", str(storage_root), "--runroot", str(run_root)]


def build_argv(
    buildah: Sequence[str],
    spec: ImageSpec,
    root: Path,
    *,
    version: str = VERSION,
    volumes: Sequence[str] = (),
) -> list[str]:
    """``buildah build`` of one Dockerfile: host network, chroot isolation, layer cache, no pull.

    ``volumes`` are ``-v`` bind mounts visible to the ``RUN`` steps only (not committed).
    """
    argv = [
        *buildah, "build",
        "--pull-never", "--layers",
        "--network", "host", "--isolation", "chroot",
        "-f", str(root / spec.dockerfile),
        "-t", spec.local_tag(version),
    ]
    for volume in volumes:
        argv += ["-v", volume]
    argv.append(str(root))
    return argv


def push_argv(buildah: Sequence[str], spec: ImageSpec, archive: Path, version: str = VERSION) -> list[str]:
    """Write the image as an OCI archive whose reference is the kubelet's name for it."""
    return [*buildah, "push", "--quiet", spec.local_tag(version),
            f"oci-archive:{archive}:{spec.reference(version)}"]


def ctr_import_argv(archive: Path, address: str, namespace: str = "k8s.io") -> list[str]:
    """Load an OCI archive into a containerd (the kubelet's images live in ``k8s.io``)."""
    return ["ctr", "--address", address, "--namespace", namespace, "images", "import", str(archive)]
