"""Shared plumbing for the local platform: cache layout, ports, processes, errors.

Every component (Kafka, the Kubernetes control plane, the Spark connector jars) follows the same
shape, so that `sluice-dev platform up` and the pytest fixtures can treat them alike:

- ``provision()`` fills ``~/.cache/sluice/<component>-<version>/`` once (idempotent, locked);
- ``start(state_dir)`` starts the component's processes in the background on 127.0.0.1 and free
  ports, writes pid files and logs under ``state_dir/<component>/`` and returns a ``Started``;
- ``stop(state_dir)`` stops whatever the pid files name (idempotent).

A component that cannot start raises ``PlatformError`` naming the component and its log file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """Root of the artifact cache, ``$SLUICE_CACHE`` or ``~/.cache/sluice``."""
    return Path(os.environ.get("SLUICE_CACHE", "~/.cache/sluice")).expanduser()


def cache_dir(component: str, version: str) -> Path:
    """``<cache root>/<component>-<version>/`` (created)."""
    path = cache_root() / f"{component}-{version}"
    path.mkdir(parents=True, exist_ok=True)
    return path


class PlatformError(RuntimeError):
    """A platform component could not be provisioned or started."""

    def __init__(self, component: str, message: str, log_path: Path | None = None) -> None:
        self.component = component
        self.log_path = log_path
        where = f" (log: {log_path})" if log_path is not None else ""
        super().__init__(f"{component}: {message}{where}")


@dataclass
class Started:
    """What a started component exposes to users and tests."""

    component: str
    env: dict[str, str] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so that concurrent provisioning runs do not race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, for error messages."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    return "\n".join(content[-lines:])


def spawn(
    component: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    pid_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a background process in its own session, logging to ``log_path``.

    The pid is written to ``pid_path`` so that ``stop_pid`` (or a later ``platform down``) can
    stop it even from another process.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    except OSError as exc:
        raise PlatformError(component, f"cannot execute {argv[0]}: {exc}", log_path) from exc
    finally:
        log.close()
    pid_path.write_text(str(proc.pid))
    return proc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(pid_path: Path) -> int | None:
    try:
        return int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return None


def alive_record(pid_path: Path, record_path: Path,
                 answers: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], int] | None:
    """A component started earlier that still runs: its record (the JSON it wrote at start) and its
    pid, when the process lives and ``answers(record)`` (exceptions count as no); else None."""
    pid = read_pid(pid_path)
    if pid is None or not pid_alive(pid):
        return None
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None
    with contextlib.suppress(Exception):
        if isinstance(record, dict) and answers(record):
            return record, pid
    return None


def fresh_log(log_path: Path) -> Path:
    """A component's log, empty, the previous one kept beside it as ``<name>.prev``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path.exists():
        log_path.replace(log_path.with_name(log_path.name + ".prev"))
    log_path.touch()
    return log_path


def stop_pid(pid_path: Path, grace: float = 10.0) -> None:
    """SIGTERM the process group named by ``pid_path``, SIGKILL after ``grace``; idempotent."""
    pid = read_pid(pid_path)
    if pid is not None and pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.1)
    with contextlib.suppress(FileNotFoundError):
        pid_path.unlink()


def wait_until(
    component: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    log_path: Path,
    proc: subprocess.Popen[bytes] | None = None,
    what: str = "become ready",
    interval: float = 0.25,
) -> None:
    """Poll ``check`` until it is true; fail naming the component and its log otherwise.

    If ``proc`` exits while waiting, fail at once with its exit code and the log's tail.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise PlatformError(
                component,
                f"process exited with code {proc.returncode} before it could {what}; last log lines:\n"
                + tail(log_path),
                log_path,
            )
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(interval)
    raise PlatformError(
        component, f"did not {what} within {timeout:.0f}s; last log lines:\n{tail(log_path)}", log_path
    )


def run_logged(
    component: str, argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None,
    cwd: Path | None = None, timeout: float | None = None,
) -> None:
    """Run a provisioning command to completion, appending its output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        try:
            result = subprocess.run(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=full_env, cwd=str(cwd) if cwd else None, timeout=timeout, check=False,
            )
        except FileNotFoundError as exc:
            raise PlatformError(component, f"{argv[0]} is not installed: {exc}", log_path) from exc
        except subprocess.TimeoutExpired as exc:
            raise PlatformError(component, f"{argv[0]} timed out after {timeout}s", log_path) from exc
    if result.returncode != 0:
        raise PlatformError(
            component,
            f"`{' '.join(argv[:3])} ...` failed with exit code {result.returncode}; last log lines:\n"
            + tail(log_path),
            log_path,
        )


#: written last by ``provision_maven_jars``: the jars in the cache are complete
PROVISIONED_MARKER = ".provisioned"


_SINGLE_ARTIFACT_POM = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by sluice_dev.platform.{component}: {what}. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice.platform</groupId>
  <artifactId>{component}-{artifact}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
      <classifier>{classifier}</classifier>{type}
      <exclusions>
        <exclusion>
          <groupId>*</groupId>
          <artifactId>*</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
  </dependencies>
</project>
"""


def single_artifact_pom(component: str, what: str, *, group: str, artifact: str, version: str,
                        classifier: str, type_: str = "jar") -> str:
    """A POM that resolves one artifact (a self-contained jar, a distribution archive) and none of
    its dependencies: what ``component`` runs as it is published."""
    kind = "" if type_ == "jar" else f"\n      <type>{type_}</type>"
    return _SINGLE_ARTIFACT_POM.format(component=component, what=what, group=group, artifact=artifact,
                                       version=version, classifier=classifier, type=kind)


def maven_copy_argv(mvn: str, pom: Path, output_dir: Path) -> list[str]:
    """Maven resolving a POM's runtime dependencies and copying their jars into ``output_dir``."""
    return [
        mvn,
        "-B",
        "-ntp",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output_dir}",
    ]


def provision_maven_jars(
    component: str,
    root: Path,
    jars_name: str,
    pom: str,
    *,
    what: str,
    finish: Callable[[Path, Path], str],
    check: Callable[[Path], object] | None = None,
    log: Callable[[str], object] = print,
) -> Path:
    """Resolve a POM's jars with Maven into ``root/jars_name`` once; return that directory.

    Idempotent (a marker file, written last, records a completed run) and safe against concurrent
    callers (a file lock; the marker is checked again under it). Under the lock: ``check(log_path)``
    may refuse before Maven runs; Maven copies the jars into ``<jars_name>.partial``;
    ``finish(staging, log_path)`` vets (and may prune) them and returns the marker's text; only then
    does the staging directory replace ``jars_name``. ``what`` completes "<component>: <what> with
    Maven" in the progress line.
    """
    jars = root / jars_name
    marker = root / PROVISIONED_MARKER
    if marker.exists():
        return jars
    log_path = root / "provision.log"
    with file_lock(root / ".lock"):
        if marker.exists():
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise PlatformError(component, "mvn (Apache Maven) not found on PATH", log_path)
        if check is not None:
            check(log_path)
        log(f"{component}: {what} with Maven (log: {log_path})")
        started = time.monotonic()
        pom_path = root / "pom.xml"
        pom_path.write_text(pom)
        staging = root / f"{jars_name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        argv = maven_copy_argv(mvn, pom_path, staging)
        run_logged(component, argv, log_path=log_path, cwd=root, timeout=900)
        marker_text = finish(staging, log_path)
        shutil.rmtree(jars, ignore_errors=True)
        staging.rename(jars)
        marker.write_text(marker_text)
        count = len(list(jars.glob("*.jar")))
        log(f"{component}: {count} jars ready in {time.monotonic() - started:.1f}s")
    return jars
