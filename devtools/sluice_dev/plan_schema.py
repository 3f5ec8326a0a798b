"""Check or regenerate the committed plan JSON Schema (``operator/sluice/core/plan/plan.schema.json``).

``python -m sluice_dev.plan_schema`` exits 1 when the models changed the schema (listing incompatible
changes); ``--write`` rewrites the committed file, and refuses when the change is incompatible. The
comparison itself is pure and lives in ``sluice.core.plan.schema_compat``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import sluice.core.plan
from sluice.core.plan.schema_compat import current_schema, incompatibilities, render_schema

#: the committed schema, shipped with the package next to the plan models
SCHEMA_FILE = Path(sluice.core.plan.__file__).with_name("plan.schema.json")

COMMAND = "python -m sluice_dev.plan_schema"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the committed plan.schema.json")
    args = parser.parse_args(argv)
    committed = json.loads(SCHEMA_FILE.read_text()) if SCHEMA_FILE.exists() else {}
    current = current_schema()
    problems = incompatibilities(committed, current) if committed else []
    for problem in problems:
        print(f"incompatible: {problem}", file=sys.stderr)
    if args.write:
        if problems:
            print("refusing to write an incompatible schema: add a new step version instead", file=sys.stderr)
            return 1
        SCHEMA_FILE.write_text(render_schema(current))
        print(f"wrote {SCHEMA_FILE}")
        return 0
    if problems:
        return 1
    if render_schema(current) != SCHEMA_FILE.read_text():
        print(f"the plan schema changed compatibly; run {COMMAND} --write")
        return 1
    print("plan schema unchanged")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
