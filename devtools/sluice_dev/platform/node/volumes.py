"""Persistent volumes on the real node: the ``sluice-local`` StorageClass and its provisioner.

A node process of its own (``python -m sluice_dev.platform.node.volumes``) running
``sluice_dev.platform.node.provisioner``: a pending claim of the class gets a
hostPath PV under ``<state>/node/pv/<pv name>``, pre-bound to it; a released one with
``reclaimPolicy: Delete`` goes with its directory. The directories are world-writable (0777,
as the local-path provisioner makes them): the kubelet applies no ``fsGroup`` ownership to a
hostPath volume, and the pods run as a non-root user. It talks to the API server with the
platform's admin credentials, like the control plane's own components.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from sluice_dev.platform.node.provisioner import CLASS_NAME

#: how the process is recognised among the machine's processes (``teardown.processes``)
MODULE = "sluice_dev.platform.node.volumes"
DIR_MODE = 0o777
__all__ = ["CLASS_NAME", "DIR_MODE", "MODULE", "argv", "main"]


def argv(python: str, *, kubeconfig: Path, root: Path, node: str | None = None) -> list[str]:
    """``node``: the node whose directory ``root`` is; its volumes get a node affinity to it
    (with two nodes: a pod using one is never scheduled on the other)."""
    extra = [f"--node={node}"] if node else []
    return [python, "-m", MODULE, f"--kubeconfig={kubeconfig}", f"--root={root}", *extra]


def main(args: list[str] | None = None) -> int:
    from sluice_dev.platform.node.kubeapi import Api
    from sluice_dev.platform.node.provisioner import Provisioner

    parser = argparse.ArgumentParser(prog=MODULE, description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True, help="where the volumes' directories go")
    parser.add_argument("--node", help="the node the directories are on (node affinity of the volumes)")
    options = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    provisioner = Provisioner(Api(options.kubeconfig), options.root, dir_mode=DIR_MODE, node=options.node)
    provisioner.start()
    logging.info("provisioning the %s class under %s", CLASS_NAME, options.root)
    stop.wait()
    provisioner.stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
