"""``kubectl sluice``: the plugin's command line (console script ``kubectl-sluice``).

Each subcommand lives in its own module under ``sluice.kubectl`` with ``register(subparsers)``
(cheap: no heavy imports) and ``run(args) -> int``, as in ``sluice.cli``. kubectl's connection
flags (``--kubeconfig``, ``--context``, ``-n/--namespace``) go before or after the subcommand.
A ``PluginError`` or a failed API call prints ``error: ...`` and exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sluice import __version__
from sluice.kubectl.connection import PluginError, add_flags

#: subcommand name -> module implementing it
COMMANDS: dict[str, str] = {
    "plan": "sluice.kubectl.plan",
    "diff": "sluice.kubectl.diff",
    "history": "sluice.kubectl.history",
    "rollback": "sluice.kubectl.rollback",
    "replan": "sluice.kubectl.replan",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl sluice",
        description="Read and roll back Sluice StreamingQueries on the cluster of the current kubeconfig "
        "context.",
    )
    parser.add_argument("--version", action="version", version=f"kubectl-sluice {__version__}")
    add_flags(parser, suppress=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sluice.operator.kube import KubeError

    unreachable: tuple[type[BaseException], ...] = (OSError,)  # connection refused, DNS, TLS
    try:
        from urllib3.exceptions import HTTPError  # timeouts, retries exhausted

        unreachable += (HTTPError,)
    except ImportError:  # no kubernetes client installed: connect() says so
        pass

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    module = importlib.import_module(COMMANDS[args.command])
    try:
        result: int = module.run(args)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KubeError as exc:
        print(f"error: the API server refused: {exc}", file=sys.stderr)
        return 1
    except unreachable as exc:
        print(f"error: cannot reach the API server: {exc}", file=sys.stderr)
        return 1
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
