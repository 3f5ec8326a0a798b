"""One container: its process, its state machine, its probes, its back-off."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sluice_dev.nodeagent.backoff import Backoff
from sluice_dev.nodeagent.probes import LIVENESS, READINESS, STARTUP, ProbeState
from sluice_dev.nodeagent.status import ContainerView, terminated

Obj = dict[str, Any]


def process_start_time(pid: int) -> str:
    """The start time (in clock ticks since boot) of a process, to tell a pid reused later."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def image_paths(env: dict[str, str]) -> list[str]:
    """Host paths that stand for the container image's own files (the project's source tree and
    venv, the Python install, the connector jars). A pod volume mounted over an ancestor (an
    emptyDir on /tmp while the checkout lives under /tmp) must not hide them."""
    repo = Path(__file__).resolve().parents[3]
    paths = {str(repo), sys.prefix, sys.base_prefix}
    for jar in env.get("SLUICE_JARS", "").split(","):
        if jar.strip():
            paths.add(str(Path(jar.strip()).parent))
    return sorted(paths)


def exit_code_of(returncode: int) -> int:
    """Popen's ``-signum`` as the shell-style ``128 + signum``."""
    return 128 - returncode if returncode < 0 else returncode


class Container:
    def __init__(self, spec: Obj, *, restart_count: int = 0, last_terminated: Obj | None = None) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.state = "waiting"
        self.reason = "ContainerCreating"
        self.message = ""
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.exit_code: int | None = None
        self.restart_count = restart_count
        self.last_terminated = last_terminated
        self.crashes = 0
        self.not_before = 0.0  # back-off: do not start before this time
        self.ever_started = False
        self.kill_reason: str | None = None
        self.env: dict[str, str] = {}
        self.probes = {
            kind: ProbeState(kind, spec[f"{kind}Probe"])
            for kind in (READINESS, LIVENESS, STARTUP)
            if spec.get(f"{kind}Probe")
        }

    # -- process -------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        mounts: list[Obj],
        cwd: str | None,
        run_dir: Path,
        log_path: Path,
        use_namespace: bool,
        hostname: str = "",
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path = run_dir / f"{self.name}.json"
        spec_path.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "env": env,
                    "cwd": cwd,
                    "mounts": mounts,
                    "keep": image_paths(env),
                    "namespace": use_namespace,
                    "uts": use_namespace,
                    "hostname": hostname,
                }
            )
        )
        launcher = [sys.executable, "-m", "sluice_dev.nodeagent.launch", str(spec_path)]
        if use_namespace:
            launcher = ["unshare", "--mount", "--uts", "--propagation", "private", "--", *launcher]
        with open(log_path, "ab") as log:
            log.write(
                f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} start "
                f"(restart {self.restart_count}): {argv}\n".encode()
            )
            log.flush()
            self.proc = subprocess.Popen(
                launcher,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        (run_dir / f"{self.name}.pid").write_text(f"{self.proc.pid} {process_start_time(self.proc.pid)}")
        self.env = env
        now = time.time()
        self.state, self.reason, self.message = "running", "", ""
        self.started_at, self.finished_at, self.exit_code = now, None, None
        self.ever_started = True
        self.kill_reason = None
        for probe in self.probes.values():
            probe.reset(now)

    def poll(self) -> bool:
        """True when the process has just exited (state becomes terminated)."""
        if self.proc is None or self.state != "running":
            return False
        code = self.proc.poll()
        if code is None:
            return False
        self.state = "terminated"
        self.exit_code = exit_code_of(code)
        self.finished_at = time.time()
        if self.exit_code == 128 and self.started_at and self.finished_at - self.started_at < 5:
            self.reason = "StartError"
        else:
            self.reason = "Completed" if self.exit_code == 0 else "Error"
        if self.kill_reason:
            self.message = self.kill_reason
        return True

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, grace: float, reason: str) -> None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds; waits for the exit."""
        self.kill_reason = reason
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            self.signal(signal.SIGKILL)
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
        # children that outlived the main process
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    # -- restart bookkeeping -------------------------------------------------------------------

    def schedule_restart(self, backoff: Backoff) -> None:
        """After an exit: the next start waits for the back-off; state shows CrashLoopBackOff."""
        ran_for = (self.finished_at or 0) - (self.started_at or 0)
        self.crashes = backoff.next_crashes(self.crashes, ran_for)
        delay = backoff.delay(self.crashes)
        self.last_terminated = terminated(
            self.exit_code or 0, self.started_at, self.finished_at or time.time(), self.reason, self.message
        )
        self.not_before = time.time() + delay
        self.restart_count += 1
        self.state = "waiting"
        self.reason = "CrashLoopBackOff" if delay > 0 else "ContainerCreating"
        self.message = f"back-off {delay:.0f}s restarting failed container={self.name}" if delay > 0 else ""

    # -- status --------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        startup = self.probes.get(STARTUP)
        return self.state == "running" and (startup is None or startup.result)

    @property
    def ready(self) -> bool:
        readiness = self.probes.get(READINESS)
        return self.started and (readiness is None or readiness.result)

    def view(self, image: str) -> ContainerView:
        return ContainerView(
            name=self.name,
            image=image,
            state=self.state,
            reason=self.reason,
            message=self.message,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            restart_count=self.restart_count,
            last_terminated=self.last_terminated,
            ready=self.ready,
            started=self.started,
            container_id=f"sluice://{self.pid}" if self.pid else "",
        )
