"""The ``sluice`` command line.

Each subcommand lives in its own module under ``sluice.commands`` with two functions:
``register(subparsers)`` (cheap: no heavy imports) and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sluice import __version__

#: subcommand name -> module implementing it
COMMANDS: dict[str, str] = {
    "plan": "sluice.commands.plan",
    "diff": "sluice.commands.diff",
    "operator": "sluice.commands.operator",
    "crds": "sluice.commands.crds",
    "run": "sluice.commands.run",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Sluice: streaming SQL on Apache Spark, run by a Kubernetes operator.",
    )
    parser.add_argument("--version", action="version", version=f"sluice {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        module.register(subparsers)
        del name
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    module = importlib.import_module(COMMANDS[args.command])
    result: int = module.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
