"""``python -m sluice_dev.nodeagent --kubeconfig K --node-name N --state-dir D``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from sluice_dev.nodeagent.agent import Agent, Config


def parse(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(
        prog="sluice-nodeagent", description="Run the pods of one Node as local processes."
    )
    p.add_argument("--kubeconfig", required=True, type=Path)
    p.add_argument("--node-name", default="sluice-local")
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--image-catalog", type=Path, default=None)
    p.add_argument("--pod-cidr", default="127.10.0.0/16", help="loopback range for pod IPs")
    p.add_argument("--cpu", default="32", help="reported CPU capacity (not enforced)")
    p.add_argument("--memory", default="64Gi", help="reported memory capacity (not enforced)")
    p.add_argument("--pods", default="110")
    p.add_argument("--backoff-initial", type=float, default=10.0)
    p.add_argument("--backoff-max", type=float, default=300.0)
    p.add_argument("--heartbeat", type=float, default=10.0, help="seconds between Lease renewals")
    p.add_argument("--health-port", type=int, default=0)
    p.add_argument("--no-provisioner", action="store_true")
    p.add_argument("--delete-node-on-exit", action="store_true")
    p.add_argument("--mount-namespaces", choices=["auto", "on", "off"], default="auto")
    a = p.parse_args(argv)
    return Config(
        kubeconfig=a.kubeconfig,
        node_name=a.node_name,
        state_dir=a.state_dir.resolve(),
        image_catalog=a.image_catalog,
        pod_cidr=a.pod_cidr,
        cpu=a.cpu,
        memory=a.memory,
        pods=a.pods,
        backoff_initial=a.backoff_initial,
        backoff_max=a.backoff_max,
        health_port=a.health_port,
        heartbeat=a.heartbeat,
        provisioner=not a.no_provisioner,
        delete_node_on_exit=a.delete_node_on_exit,
        mount_namespaces=a.mount_namespaces,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    cfg = parse(sys.argv[1:] if argv is None else argv)
    agent = Agent(cfg)
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.info("signal %s: shutting down", signum)
        agent.stop.set()
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            agent.run()
        except BaseException as exc:
            logging.exception("node agent failed")
            failed.append(exc)

    runner = threading.Thread(target=run, name="pod-watch", daemon=True)
    runner.start()
    while not done.wait(0.5):
        if not runner.is_alive():
            logging.error("pod watch stopped unexpectedly")
            break
    agent.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
