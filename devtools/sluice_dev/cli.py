"""`sluice-dev`: developer tooling (the local platform)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sluice_dev.platform import common, orchestrate


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice-dev", description="Sluice developer tooling.")
    sub = parser.add_subparsers(dest="command", required=True)
    platform = sub.add_parser(
        "platform", help="the local platform: Kafka, a Kubernetes control plane and a real node (root)")
    platform.add_argument("action", choices=["up", "down", "status"])
    platform.add_argument("--state-dir", type=Path, default=Path(".platform"))
    platform.add_argument("--no-node", action="store_true",
                          help="no node (containerd, kubelet): Kafka and the control plane on loopback only")
    platform.add_argument("--nodes", type=int, choices=[1, 2], default=1,
                          help="how many real nodes: 2 adds sluice-node-2, in a network namespace of its own")
    node = sub.add_parser("node", help="power a node of the local platform off (a power loss) or on again")
    node.add_argument("action", choices=["stop", "start"])
    node.add_argument("name", metavar="NAME", help="sluice-node or sluice-node-2")
    node.add_argument("--state-dir", type=Path, default=Path(".platform"))
    deploy = sub.add_parser("deploy", help="install the CRDs and start the operator on the platform")
    deploy.add_argument("--state-dir", type=Path, default=Path(".platform"))
    images = sub.add_parser("images", help="container images from the Dockerfiles (buildah, cached)")
    images.add_argument("action", choices=["build"])
    images.add_argument("names", nargs="*", metavar="NAME",
                        help="sluice-runtime and/or sluice-operator (default: both)")
    images.add_argument("--state-dir", type=Path, default=Path(".platform"),
                        help="the platform whose real node gets the images, if one runs")
    args = parser.parse_args(argv)
    try:
        if args.command == "images":
            from sluice_dev.images import build

            built = build.build(args.names)
            for name, archive in built.items():
                print(f"{name}: {archive}")
            if orchestrate.load_images(args.state_dir, build.by_reference(built)):
                print(f"loaded into the real node of {args.state_dir}")
        elif args.command == "deploy":
            orchestrate.deploy(args.state_dir)
        elif args.command == "node":
            orchestrate.node_power(args.state_dir, args.name, on=args.action == "start")
        elif args.action == "up":
            if args.nodes == 1:
                orchestrate.up(args.state_dir, with_node=not args.no_node)
            elif args.no_node:
                parser.error("--nodes and --no-node exclude each other")
            else:
                orchestrate.up(args.state_dir, with_node=True, nodes=args.nodes)
        elif args.action == "down":
            orchestrate.down(args.state_dir)
        else:
            return 0 if orchestrate.status(args.state_dir) else 1
    except common.PlatformError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
