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
        "--chart-dir",
        help="Also write Sluice's own CRDs (not kopf's peering CRDs) into this directory, e.g. "
        "charts/sluice/crds.",
    )
    parser.add_argument(
        "--check", action="store_true", help="Do not write; exit 1 when the files differ from the models."
    )


def chart_files() -> dict[str, str]:
    """File name -> YAML text of the CRDs the Helm chart carries: Sluice's own kinds."""
    from sluice.crd.base import GROUP
    from sluice.crd.generate import generated_files

    return {name: text for name, text in generated_files().items() if name.endswith(f".{GROUP}.yaml")}


def run(args: argparse.Namespace) -> int:
    from sluice.crd.generate import generated_files

    targets = [(Path(args.output_dir), generated_files())]
    if args.chart_dir:
        targets.append((Path(args.chart_dir), chart_files()))
    if args.check:
        stale = [
            out / name for out, files in targets for name, text in files.items()
            if not (out / name).is_file() or (out / name).read_text() != text
        ]
        for path in stale:
            print(f"{path}: out of date; run `{_write_command(args)}`", file=sys.stderr)
        return 1 if stale else 0
    for out, files in targets:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
            print(out / name)
    return 0


def _write_command(args: argparse.Namespace) -> str:
    chart = f" --chart-dir {args.chart_dir}" if args.chart_dir else ""
    return f"sluice crds --output-dir {args.output_dir}{chart}"
