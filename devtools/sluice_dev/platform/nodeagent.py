"""The local node agent as a platform component (``sluice-dev platform up`` starts it last).

Thin wrapper around ``python -m sluice_dev.nodeagent``: state, pid file and log live under
``<state_dir>/nodeagent/``. The agent authenticates with the admin kubeconfig it is given.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import zlib
from pathlib import Path

from sluice_dev.nodeagent.kubeapi import Api
from sluice_dev.platform import sparkjars
from sluice_dev.platform.common import PlatformError, Started, free_port, spawn, stop_pid, wait_until

COMPONENT = "nodeagent"
NODE_NAME = "sluice-local"
START_TIMEOUT = 60.0


def image_env() -> dict[str, str]:
    """What the runtime image provides, emulated on this machine: its programs on PATH (the
    project's venv) and the Spark Kafka connector jars (cached from Maven Central)."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "SLUICE_JARS": ",".join(str(p) for p in sparkjars.jar_paths()),
    }


def pod_cidr(directory: Path) -> str:
    """A loopback /16 of its own per state directory, so that two platforms on one machine (a
    developer's ``.platform`` and a test run's) never hand out the same pod IP."""
    return f"127.{10 + zlib.crc32(str(directory.resolve()).encode()) % 240}.0.0/16"


def agent_dir(state_dir: Path) -> Path:
    return state_dir / COMPONENT


def start(
    state_dir: Path, kubeconfig: Path, *, node_name: str = NODE_NAME, extra_args: list[str] | None = None
) -> Started:
    """Start the agent; returns once its Node is registered and its health endpoint answers."""
    directory = agent_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "nodeagent.log"
    port = free_port()
    (directory / "agent.json").unlink(missing_ok=True)
    proc = spawn(
        COMPONENT,
        [
            sys.executable,
            "-m",
            "sluice_dev.nodeagent",
            "--kubeconfig",
            str(kubeconfig),
            "--node-name",
            node_name,
            "--state-dir",
            str(directory),
            "--health-port",
            str(port),
            "--pod-cidr",
            pod_cidr(directory),
            *(extra_args or []),
        ],
        log_path=log_path,
        pid_path=directory / "nodeagent.pid",
        env=image_env(),
    )

    def ready() -> bool:
        if not (directory / "agent.json").exists():
            return False
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)

    wait_until(
        COMPONENT, ready, timeout=START_TIMEOUT, log_path=log_path, proc=proc, what="register its node"
    )
    api = Api(kubeconfig)

    def schedulable() -> bool:
        # a fresh node can carry the lifecycle controller's not-ready taint for a few seconds
        node = api.get(f"/api/v1/nodes/{node_name}")
        return not any(
            t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or []
        )

    wait_until(
        COMPONENT,
        schedulable,
        timeout=START_TIMEOUT,
        log_path=log_path,
        proc=proc,
        what="have its node schedulable (no not-ready taint)",
    )
    try:
        agent = json.loads((directory / "agent.json").read_text())
    except (OSError, ValueError) as exc:
        raise PlatformError(COMPONENT, f"no agent.json: {exc}", log_path) from exc
    return Started(
        component=COMPONENT,
        env={},
        logs=[log_path],
        info={
            "probe": f"127.0.0.1:{port}",
            "node": node_name,
            "state_dir": str(directory),
            "mount_namespaces": str(agent.get("mountNamespaces")),
        },
    )


def stop(state_dir: Path) -> None:
    """Stop the agent (it kills its containers), then any container it left behind; idempotent."""
    from sluice_dev.nodeagent.agent import kill_orphans

    directory = agent_dir(state_dir)
    stop_pid(directory / "nodeagent.pid", grace=20.0)
    if (directory / "pods").is_dir():
        kill_orphans(directory / "pods")
