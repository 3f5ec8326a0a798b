"""Regenerate the dependency locks under ``requirements/`` (``make lock``).

One lock per install target, each with every pin's hashes, for CPython 3.11 on Linux x86_64:
``dev.txt`` (``.[dev]``: development and CI, ``make install``), ``runtime.txt`` (``.[runtime]``:
the runtime image) and ``operator.txt`` (``.[operator]``: the operator image). Each also pins the
build backend (``requirements/build.in``, kept equal to pyproject's ``[build-system] requires``),
so that the project itself installs with ``--no-deps --no-build-isolation`` from the lock alone.
``dev.txt`` is resolved first and constrains the images' locks: the images run the versions CI
tested.

The resolver is uv at a pinned version, installed once into a virtualenv of its own under
``~/.cache/sluice/`` (``$SLUICE_CACHE``). Existing pins are kept where pyproject still allows them;
``--upgrade`` (``make lock UPGRADE=1``) moves every pin to the newest version allowed.

Runs on the machine's ``python3`` (standard library only), from any directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

#: the resolver's version: a new one may resolve or write differently, so it is pinned too
UV_VERSION = "0.13.8"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-unknown-linux-gnu"
#: lock name and the extra it locks, in the order they are resolved (dev first: it constrains the rest)
LOCKS: tuple[tuple[str, str], ...] = (("dev", "dev"), ("runtime", "runtime"), ("operator", "operator"))
REQUIREMENTS = "requirements"
BUILD_INPUT = f"{REQUIREMENTS}/build.in"
COMMAND = "make lock"

REPO = Path(__file__).resolve().parents[2]

_PURPOSE = {
    "dev": "development and CI (`make install`)",
    "runtime": "the runtime image (runtime-image/Dockerfile)",
    "operator": "the operator image (operator/Dockerfile)",
}


def lock_path(name: str) -> str:
    return f"{REQUIREMENTS}/{name}.txt"


def build_input(pyproject: str) -> str:
    """``requirements/build.in``: the build backend's requirements, one a line."""
    requires = tomllib.loads(pyproject)["build-system"]["requires"]
    lines = ["# pyproject.toml's [build-system] requires, locked with each target (written by `make lock`)"]
    return "\n".join([*lines, *requires]) + "\n"


def header(name: str, extra: str) -> str:
    """The comment that opens a lock: what it is for and how to regenerate it."""
    return (
        f"# Locked dependencies of `.[{extra}]` for {_PURPOSE[name]},\n"
        f"# CPython {PYTHON_VERSION} on Linux x86_64, with hashes:"
        f" pip install --require-hashes -r {lock_path(name)}\n"
        f"# Regenerate with `{COMMAND}` (uv {UV_VERSION}, devtools/sluice_dev/locks.py) after a change"
        " of\n# pyproject.toml's dependencies; `make lock UPGRADE=1` moves every pin to the newest version"
        " allowed.\n# Do not edit by hand.\n"
    )


def compile_argv(uv: Path, name: str, extra: str, *, upgrade: bool) -> list[str]:
    """``uv pip compile`` of one lock, run from the repository root (relative paths in the lock)."""
    argv = [
        str(uv), "pip", "compile", "pyproject.toml", BUILD_INPUT,
        "--extra", extra,
        "--generate-hashes", "--no-config",
        "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
        "--custom-compile-command", COMMAND,
        "--output-file", lock_path(name), "--quiet",
    ]
    if name != "dev":
        argv += ["--constraint", lock_path("dev")]
    if upgrade:
        argv.append("--upgrade")
    return argv


def tool_dir() -> Path:
    return Path(os.environ.get("SLUICE_CACHE", "~/.cache/sluice")).expanduser() / f"uv-{UV_VERSION}"


def ensure_uv() -> Path:
    """The pinned uv, installed into its own virtualenv on first use."""
    venv = tool_dir()
    uv = venv / "bin" / "uv"
    if not uv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        f"uv=={UV_VERSION}"], check=True)
    return uv


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest version allowed")
    args = parser.parse_args(argv)
    uv = ensure_uv()
    (REPO / BUILD_INPUT).write_text(build_input((REPO / "pyproject.toml").read_text()))
    for name, extra in LOCKS:
        subprocess.run(compile_argv(uv, name, extra, upgrade=args.upgrade), cwd=REPO, check=True)
        path = REPO / lock_path(name)
        path.write_text(header(name, extra) + path.read_text())
        print(f"wrote {lock_path(name)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
