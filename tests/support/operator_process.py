"""``sluice operator`` as a process of its own (the real command line), for integration tests.

It watches one namespace, holds its Lease there, and writes its log to a file that a failing test
shows. Extra arguments (the webhook flags, for instance) go on its command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class OperatorProcess:
    def __init__(self, kube: Any, namespace: str, log: Path, *extra: str) -> None:
        self._spawn(log, ["--namespace", namespace, "--lease-namespace", namespace, "--lease-seconds", "6",
                          "--metrics-port", "0", "--kubeconfig", str(kube.kubeconfig), *extra], kube.env())

    @classmethod
    def with_kubeconfig(cls, kubeconfig: Path, log: Path, *args: str) -> OperatorProcess:
        """The operator with ``kubeconfig``'s credentials (a ServiceAccount's, say) and exactly
        ``args`` besides; the test process's KUBECONFIG and POD_NAMESPACE do not reach it."""
        process = cls.__new__(cls)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
        process._spawn(log, ["--kubeconfig", str(kubeconfig), *args], env)
        return process

    @classmethod
    def later_build(cls, kubeconfig: Path, namespace: str, log: Path) -> OperatorProcess:
        """The operator of a later build whose compiler plans the same SQL differently
        (``tests.support.operator_variant``), watching ``namespace`` with ``kubeconfig``'s rights."""
        process = cls.__new__(cls)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
        root = Path(__file__).resolve().parents[2]
        env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        args = ["--log-format", "text", "--namespace", namespace, "--lease-namespace", namespace,
                "--lease-seconds", "6", "--metrics-port", "0", "--kubeconfig", str(kubeconfig)]
        process._spawn(log, args, env, command=[sys.executable, "-m", "tests.support.operator_variant"])
        return process

    def _spawn(self, log: Path, args: list[str], env: dict[str, str],
               command: list[str] | None = None) -> None:
        self.log = log
        if command is None:
            command = [str(Path(sys.executable).with_name("sluice")), "operator", "--log-format", "text"]
        cmd = [*command, *args]
        self.proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**env, "PYTHONUNBUFFERED": "1"})

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signal the process (SIGTERM: a clean stop) and wait for it; SIGKILL after ``timeout``."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return int(self.proc.returncode)

    def tail(self, lines: int = 60) -> str:
        return f"--- {self.log} ---\n" + "\n".join(self.text().splitlines()[-lines:])

    def check_alive(self) -> None:
        """Fail loudly, with the log, when the process ended."""
        if not self.alive():
            time.sleep(0.2)
            raise AssertionError(f"the operator exited with {self.proc.returncode}\n{self.tail()}")
