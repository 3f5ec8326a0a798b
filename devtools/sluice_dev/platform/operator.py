"""`make deploy`: install the CRDs and run the operator against the local platform.

The operator runs as a local background process (``sluice operator``) with the platform's admin
kubeconfig, exactly the program the Helm chart runs in a pod. Its pid file and log live in
``state_dir/operator/``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sluice_dev.platform import common

REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "crds"


def install_crds(kubeconfig: Path, kubectl: Path, log_path: Path) -> None:
    """``kubectl apply`` the generated CRDs and wait until they are Established."""
    files = sorted(CRDS.glob("*.sluice.dev.yaml"))
    if not files:
        raise common.PlatformError("crds", f"no CRDs found in {CRDS} (run `make crds`)", log_path)
    env = {"KUBECONFIG": str(kubeconfig)}
    argv = [str(kubectl), "apply", "--server-side", "--force-conflicts"]
    for path in files:
        argv += ["-f", str(path)]
    common.run_logged("crds", argv, log_path=log_path, env=env, timeout=120)
    common.run_logged(
        "crds",
        [str(kubectl), "wait", "--for=condition=Established", "--timeout=60s",
         "crd/streamingqueries.sluice.dev", "crd/queryclusters.sluice.dev"],
        log_path=log_path, env=env, timeout=90,
    )


def start(state_dir: Path, kubeconfig: Path, kubectl: Path) -> common.Started:
    """Install the CRDs, then start ``sluice operator`` in the background."""
    home = state_dir / "operator"
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "operator.log"
    install_crds(kubeconfig, kubectl, home / "crds.log")
    stop(state_dir)
    metrics_port = common.free_port()
    proc = common.spawn(
        "operator",
        [sys.executable, "-m", "sluice.cli", "operator", "--kubeconfig", str(kubeconfig),
         "--metrics-port", str(metrics_port), "--log-format", "text"],
        log_path=log_path,
        pid_path=home / "operator.pid",
        env={"KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"},
    )
    common.wait_until(
        "operator", lambda: common.port_open("127.0.0.1", metrics_port), timeout=90,
        log_path=log_path, proc=proc, what="serve its metrics endpoint",
    )
    return common.Started(
        component="operator",
        logs=[log_path],
        info={"metrics": f"http://127.0.0.1:{metrics_port}/metrics",
              "probe": f"127.0.0.1:{metrics_port}"},
    )


def stop(state_dir: Path) -> None:
    common.stop_pid(state_dir / "operator" / "operator.pid", grace=20)


def running(state_dir: Path) -> bool:
    pid = common.read_pid(state_dir / "operator" / "operator.pid")
    return pid is not None and common.pid_alive(pid)


def kubectl_text(kubeconfig: Path, kubectl: Path, *args: str) -> str:
    result = subprocess.run(
        [str(kubectl), *args], capture_output=True, text=True, check=False,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
    )
    return result.stdout + result.stderr
