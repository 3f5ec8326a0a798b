"""``sluice plan FILE.yaml [--output json|text]``: compile a StreamingQuery into its execution plan."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="compile a StreamingQuery manifest into its execution plan",
        description="Compile the SQL of a StreamingQuery manifest into the pinned execution plan "
        "the runtime executes. Problems are printed as FILE: line L, column C: message.",
    )
    parser.add_argument("file", metavar="FILE.yaml", help="StreamingQuery manifest ('-' reads stdin)")
    parser.add_argument("--output", "-o", choices=["json", "text"], default="json", help="output format")


def run(args: argparse.Namespace) -> int:
    from sluice.commands.registry import compile_with_registry
    from sluice.core.errors import SluiceError
    from sluice.core.manifest import parse_manifest
    from sluice.core.plan.render import render_text

    name = args.file
    try:
        text = sys.stdin.read() if name == "-" else open(name, encoding="utf-8").read()
    except OSError as exc:
        print(f"{name}: cannot read the file: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except UnicodeDecodeError as exc:
        print(
            f"{name}: cannot read the file: it is not UTF-8 text (invalid byte 0x{exc.object[exc.start]:02x} "
            f"at offset {exc.start}); save the manifest as UTF-8",
            file=sys.stderr,
        )
        return 1
    try:
        plan = compile_with_registry(parse_manifest(text).spec)
    except SluiceError as exc:
        for problem in exc.problems:
            print(problem.render(name), file=sys.stderr)
        return 1
    sys.stdout.write(plan.to_json() + "\n" if args.output == "json" else render_text(plan))
    return 0
