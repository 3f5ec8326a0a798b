"""The image catalog: image reference -> entry point, working dir and environment (pure)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CATALOG = Path(__file__).with_name("images.yaml")


class ImageError(ValueError):
    """No way to run the container (the kubelet's ErrImagePull / CreateContainerError)."""


@dataclass
class Image:
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None


@dataclass
class Catalog:
    images: list[tuple[str, Image]] = field(default_factory=list)
    inherit_env: list[str] = field(default_factory=lambda: ["PATH", "HOME", "LANG"])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path) -> Catalog:
        base = (base_dir / str(data.get("baseDir", "."))).resolve()

        def absolute(argv: list[str]) -> list[str]:
            if argv and ("/" in argv[0]) and not os.path.isabs(argv[0]):
                return [str(base / argv[0]), *argv[1:]]
            return argv

        images = []
        for entry in data.get("images", []) or []:
            images.append(
                (
                    str(entry["match"]),
                    Image(
                        entrypoint=absolute([str(a) for a in entry.get("entrypoint", []) or []]),
                        cmd=[str(a) for a in entry.get("cmd", []) or []],
                        env={str(k): str(v) for k, v in (entry.get("env") or {}).items()},
                        working_dir=str(base / entry["workingDir"]) if entry.get("workingDir") else None,
                    ),
                )
            )
        inherit = [str(v) for v in data.get("inheritEnv", ["PATH", "HOME", "LANG"])]
        return cls(images=images, inherit_env=inherit)

    @classmethod
    def load(cls, path: Path | None = None) -> Catalog:
        import yaml

        path = path or DEFAULT_CATALOG
        return cls.from_dict(yaml.safe_load(path.read_text()) or {}, path.parent)

    def find(self, image: str) -> Image | None:
        names = {image}
        short = image.rsplit("/", 1)[-1]
        names.add(short)
        if "@" in image:
            names.update(n.split("@", 1)[0] for n in list(names))
        names.update(f"{n}:latest" for n in list(names) if ":" not in n.rsplit("/", 1)[-1])
        for pattern, entry in self.images:
            if any(fnmatch.fnmatchcase(n, pattern) for n in names):
                return entry
        return None

    def base_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {k: environ[k] for k in self.inherit_env if k in environ}


def argv_for(container: Mapping[str, Any], image: Image | None) -> list[str]:
    """The argv of a container: ``command``+``args``, else the image's entrypoint (+cmd)."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if command:
        return command + args
    if image is None:
        raise ImageError(
            f"container {container.get('name')!r} has no command and image {container.get('image')!r} "
            "is not in the node agent's image catalog"
        )
    argv = list(image.entrypoint) + (args if args else list(image.cmd))
    if not argv:
        raise ImageError(f"image {container.get('image')!r} has neither entrypoint nor cmd")
    return argv
