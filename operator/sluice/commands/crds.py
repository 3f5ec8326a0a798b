"""``sluice crds``: write the CustomResourceDefinitions generated from the pydantic models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "crds", help="Generate the CRD YAML files from the models.",
        description="Write structural CRD YAML generated from the pydantic models (sluice.crd).",
    )
    parser.add_argument("--output-dir", default="crds", help="Directory to write into (default: crds).")
    parser.add_argument(
        "--check", action="store_true", help="Do not write; exit 1 when the files differ from the models."
    )


def run(args: argparse.Namespace) -> int:
    from sluice.crd.generate import generated_files, write

    out = Path(args.output_dir)
    if args.check:
        stale = [
            name for name, text in generated_files().items()
            if not (out / name).is_file() or (out / name).read_text() != text
        ]
        for name in stale:
            print(f"{out / name}: out of date; run `sluice crds --output-dir {out}`", file=sys.stderr)
        return 1 if stale else 0
    for path in write(out):
        print(path)
    return 0
