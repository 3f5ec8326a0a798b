"""Container launcher: bind-mount the volumes, then exec the container's program.

Run by the agent as ``unshare --mount --propagation private -- python -m
sluice_dev.nodeagent.launch SPEC.json``, so the mounts are private to this process tree (the
container) and vanish when it exits. The spec holds ``argv``, ``env``, ``cwd``, ``mounts``
(``src``, ``dst``, ``readOnly``), ``hostname`` (set when ``uts``: the launcher got its own UTS
namespace) and ``namespace`` (false in the no-mount-namespace fallback:
then nothing is mounted here). Exit code 128 means the container could not be started.

Only the standard library is imported: this runs before every container start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
from typing import Any

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

_libc = None


def _mount(src: str, dst: str, flags: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.mount(src.encode(), dst.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {dst}: {os.strerror(err)}")


def _same_file(path: str, fd: int) -> bool:
    try:
        now, pinned = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (pinned.st_dev, pinned.st_ino)


def bind(src: str, dst: str, read_only: bool) -> None:
    """Bind ``src`` on ``dst`` (creating the mount point: a directory, or a file for a file)."""
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst) or "/", exist_ok=True)
        if not os.path.exists(dst):
            with open(dst, "a"):
                pass
    _mount(src, dst, MS_BIND | MS_REC)
    if read_only:
        _mount(src, dst, MS_BIND | MS_REMOUNT | MS_RDONLY)


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        spec: dict[str, Any] = json.load(handle)
    try:
        if spec.get("hostname") and spec.get("uts"):
            import socket

            socket.sethostname(spec["hostname"])
        if spec.get("namespace", True):
            mounts = spec.get("mounts", [])
            # Pin every source before mounting anything: a mount on /tmp (say) would otherwise
            # hide sources that live under /tmp. The fds are close-on-exec.
            fds = [os.open(mount["src"], os.O_PATH) for mount in mounts]
            keep = {path: os.open(path, os.O_PATH) for path in spec.get("keep", []) if os.path.exists(path)}
            for mount, fd in zip(mounts, fds, strict=True):
                bind(f"/proc/self/fd/{fd}", mount["dst"], bool(mount.get("readOnly")))
            # the image's own files stay visible even under a volume mounted on an ancestor
            for path, fd in keep.items():
                if not _same_file(path, fd):
                    bind(f"/proc/self/fd/{fd}", path, True)
        cwd = spec.get("cwd")
        if cwd:
            os.makedirs(cwd, exist_ok=True)
            os.chdir(cwd)
        env = {str(k): str(v) for k, v in spec["env"].items()}
        program = spec["argv"]
        sys.stdout.flush()
        os.execvpe(program[0], program, env)
    except OSError as exc:
        print(f"sluice-nodeagent: cannot start container: {exc}", file=sys.stderr, flush=True)
        return 128
    return 128  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
